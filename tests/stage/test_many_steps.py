"""Cost in the number of steps (issue 27 item 2) and attributions unchanged by making it linear.

- Growth: the step-attention cells every prefill is asked for (sum over prefills of n_steps^2 x heads) and the
  tokens read grow about linearly in the steps of one trace; before the fix each window asked for the whole
  log's 2N x 2N matrix (cubic in N over the windows), and each window's digest re-evaluated every older step
  once per dropped step (quadratic per window). Deterministic counts, no timing: safe on a loaded machine.
- Unchanged: the masprism method's outputs on a few traces (windows with and without pass 2, one window,
  the truncate render) equal those of the code before the fix (commit 70e2f8a), stored in
  tests/data/many_steps_golden.json: same blamed step, symptoms and candidates, scores to float tolerance.
  Regenerate (only on purpose, with the code whose outputs are the reference):
  `python tests/stage/test_many_steps.py --write-golden`.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

from masprism_batch.config import load_config
from masprism_batch.model import load_model
from masprism_batch.render import windows
from masprism_batch.trace import Step, Trace

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "many_steps_golden.json"
WORDS = ["search", "result", "error", "file", "answer", "plan", "code", "value", "agent", "step"]
SHORT = "ok go run fix err try set get put ls cd".split()


def _short_trace(n: int, seed: int) -> Trace:
    """n steps of ~10 bytes: the red team's shape (issue 27)."""
    rng = random.Random(seed)
    steps = [Step(index=i, agent=rng.choice(["Planner", "Coder", "Terminal"]),
                  content=" ".join(rng.choice(SHORT) for _ in range(3))[:10]) for i in range(n)]
    return Trace(trace_id=f"short-{n}-{seed}", source="jsonl", steps=steps, question="fix the build")


def _word_trace(n: int, seed: int, max_words: int = 40) -> Trace:
    rng = random.Random(seed)
    steps = [Step(index=i, agent=rng.choice(["Planner", "Coder", "Terminal"]),
                  content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words)))) for i in range(n)]
    return Trace(trace_id=f"words-{n}-{seed}", source="jsonl", steps=steps, question="find the answer")


# name -> (trace, render overrides): windows without pass 2 (headers alone overflow it), windows with pass 2,
# one window (pass 2 and counterfactuals), and the paper's single truncated prompt
CASES = {
    "short-windows": (lambda: _short_trace(90, 1), {"max_context": 1024}),
    "words-windows": (lambda: _word_trace(30, 2), {"max_context": 1024, "window_context": 128}),
    "one-window": (lambda: _word_trace(10, 3, 20), {"max_context": 2048}),
    "truncate": (lambda: _word_trace(40, 4), {"max_context": 2048, "pass1": "truncate"}),
}


def _cfg(render_over: dict):
    # counterfactuals off: they read pass 2 only (not what windows change) and are another module's work
    cfg = load_config(None, model__name="tiny-random", method__name="masprism", method__counterfactual_k=0)
    return cfg.model_copy(update={"render": cfg.render.model_copy(update=render_over)})


def _summary(out) -> dict:
    """What the attribution says, in JSON: verdict, candidates with scores, per-step scores and attention."""
    (a,) = out.attributions
    steps = sorted(out.step_scores, key=lambda r: r["step"])
    return {"pred_step": a["pred_step"], "pred_agent": a["pred_agent"], "symptoms": a["symptoms"],
            "candidates": [[c["step"], c["score"]] for c in a["candidates"]],
            "tokens_pass1": a["tokens_pass1"], "tokens_pass2": a["tokens_pass2"],
            "steps": {k: [r.get(k) for r in steps] for k in ("nll_pass1", "nll_pass2", "h_score", "score", "rank",
                                                            "cf_effect", "attention_pass1")}}


def _attribute(name: str, model) -> dict:
    from masprism_batch.stage.attribute import attribute_traces

    make, over = CASES[name]
    out = attribute_traces([make()], model, _cfg(over))
    assert not out.errors, out.errors
    return _summary(out)


def _close(got, want, path: str) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _close(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and want is not None:
        assert got is not None and math.isclose(got, want, rel_tol=2e-4, abs_tol=1e-6), f"{path}: {got} != {want}"
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, model__name="tiny-random")
    return load_model(cfg.model, cfg.signals)


@pytest.mark.parametrize("name", list(CASES))
def test_attributions_unchanged_by_the_linear_windows(tiny, name):
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))[name]
    got = _attribute(name, tiny)
    for key in ("pred_step", "pred_agent", "symptoms", "tokens_pass1", "tokens_pass2"):
        assert got[key] == want[key], (key, got[key], want[key])
    assert [c[0] for c in got["candidates"]] == [c[0] for c in want["candidates"]], "same candidates, same order"
    _close(got["candidates"], want["candidates"], "candidates")
    for key, values in want["steps"].items():
        if key != "cf_effect":  # stored, not compared (counterfactuals off here; see _cfg)
            _close(got["steps"][key], values, key)


def _render_cost(n: int, tok, rcfg, monkeypatch) -> dict:
    """Deterministic cost of rendering one n-step log in windows: tokens read, step-mass cells the windows
    ask the model for (sum of n_steps^2), and step lengths the digests' budget fits evaluate."""
    fitted: list[int] = []
    real = windows.fit_budget

    def counting(lengths, *a, **kw):
        fitted.append(len(lengths))
        return real(lengths, *a, **kw)

    monkeypatch.setattr(windows, "fit_budget", counting)
    wd = windows.render_windows(_short_trace(n, 5), tok, rcfg)
    return {"tokens": sum(len(w.input_ids) for w in wd.windows), "cells": sum(w.n_steps ** 2 for w in wd.windows),
            "fitted": sum(fitted)}


def test_window_render_cost_grows_like_the_tokens(monkeypatch):
    """4x the steps: the cells asked of the model and the digest work grow like the tokens read (~4x), not
    like N^3 (before: every window asked for 2N x 2N cells, 64x here) or N^2 (each digest refitted once per
    dropped older step)."""
    from masprism_batch.model import load_tokenizer

    cfg = load_config(None, model__name="tiny-random", render__max_context=512)
    tok = load_tokenizer(cfg.model)
    small, big = (_render_cost(n, tok, cfg.render, monkeypatch) for n in (128, 512))
    tokens = big["tokens"] / small["tokens"]
    assert 3.5 < tokens < 5.5, tokens  # the logs themselves grow ~linearly (longer step numbers: a bit more)
    for key in ("cells", "fitted"):
        assert big[key] / small[key] < 1.5 * tokens, (key, small, big)


def test_stage_asks_the_model_for_cells_linear_in_steps(tiny, monkeypatch):
    """Through the model stage: the step-attention cells of every prefill (n_steps^2, times the heads when per
    head) for 4x the steps grow about 4x; the attribution still covers every step."""
    from masprism_batch.stage.attribute import attribute_traces

    asked: list[int] = []
    real = type(tiny).signals

    def counting(self, seqs, step_ids, n_steps=None, **kw):
        heads = self.arch.num_heads if kw.get("per_head") else 1
        ns = n_steps or [max(s, default=-1) + 1 for s in step_ids]
        asked.append(sum(heads * n * n for n in ns))
        return real(self, seqs, step_ids, n_steps, **kw)

    monkeypatch.setattr(type(tiny), "signals", counting)
    cfg = _cfg({"max_context": 512})
    cost = {}
    for n in (48, 192):
        asked.clear()
        out = attribute_traces([_short_trace(n, 6)], tiny, cfg)
        assert not out.errors and len(out.step_scores) == n
        cost[n] = (sum(asked), out.attributions[0]["tokens_pass1"])
    tokens = cost[192][1] / cost[48][1]
    assert cost[192][0] / cost[48][0] < 1.5 * tokens, cost


def _write_golden() -> None:
    cfg = load_config(None, model__name="tiny-random")
    model = load_model(cfg.model, cfg.signals)
    data = {name: _attribute(name, model) for name in CASES}
    GOLDEN.write_text(json.dumps(data, indent=None, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__" and "--write-golden" in sys.argv:
    _write_golden()
