"""The pass-1 render crosses the process border as Arrow rows and means the same on the other side: the model
stage given shipped renders writes the same rows as the model stage that renders itself."""

from __future__ import annotations

import random

import pytest
from masprism_batch.pipelines.contracts import from_ipc, to_ipc

from masprism_batch.config import load_config
from masprism_batch.model import load_model, model_context
from masprism_batch.render import pass1, windows
from masprism_batch.render import prompt as render
from masprism_batch.stage.attribute import attribute_traces
from masprism_batch.trace import Step, Trace

WORDS = "plan search the file error retry tool answer check result failed timeout agent".split()


def _trace(rng: random.Random, n_steps: int, max_words: int = 90) -> Trace:
    steps = [Step(index=i, agent=rng.choice(["Planner", "Coder", "Terminal"]),
                  content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words))))
             for i in range(n_steps)]
    return Trace(trace_id=f"t{rng.randrange(10**6)}", source="jsonl", steps=steps, question="find the answer")


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, model__name="tiny-random", render__max_context=384)
    return cfg, load_model(cfg.model, cfg.signals)


def _shipped(traces, renders):
    blob = to_ipc([pass1.to_row(t.trace_id, r) for t, r in zip(traces, renders, strict=True)], pass1.RENDERED)
    return [pass1.from_row(r) for r in from_ipc(blob).to_pylist()]


@pytest.mark.parametrize("mode", ["windows", "truncate"])
def test_shipped_renders_give_the_same_rows(tiny, mode, monkeypatch):
    cfg, model = tiny
    cfg = cfg.model_copy(update={"render": cfg.render.model_copy(update={"pass1": mode})})
    rng = random.Random(5)
    long = _trace(rng, 30) if mode == "windows" else _trace(rng, 5, 60)  # truncate: steps cut to fit one prompt
    traces = [long, _trace(rng, 4), Trace(trace_id="empty", source="jsonl", steps=[])]
    rcfg = pass1.render_config(cfg, model_context(cfg.model))
    assert rcfg == pass1.render_config(cfg, model.max_context)  # planning's config is the model stage's
    renders = pass1.render_traces(traces, model.tokenizer, rcfg)
    assert isinstance(renders[2], dict) and renders[2]["reason"] == "empty_trace"
    kind = windows.Windowed if mode == "windows" else render.Rendered
    assert isinstance(renders[0], kind)
    if mode == "windows":
        assert len(renders[0].windows) > 1  # the long trace really is read in several windows
    back = _shipped(traces, renders)
    for a, b in zip(renders[:2], back[:2], strict=True):
        full_a = a.full if mode == "windows" else a
        full_b = b.full if mode == "windows" else b
        assert (full_a.input_ids, full_a.step_spans, full_a.step_truncated) == \
            (full_b.input_ids, full_b.step_spans, full_b.step_truncated)
        if mode == "windows":
            assert a.windows == b.windows and a.head_len == b.head_len

    def strip(out):
        drop = {"seconds_pass1", "seconds_pass2", "attributed_at"}
        return ([{k: v for k, v in r.items() if k not in drop} for r in out.attributions], out.step_scores,
                [(e["record_id"], e["reason"]) for e in out.errors])

    in_place = strip(attribute_traces(traces, model, cfg))

    def no_render(*a, **k):
        raise AssertionError("the model stage rendered pass 1 although it was given the renders")

    for mod, name in ((render, "render_pass1"), (windows, "render_windows"), (pass1, "render_one")):
        monkeypatch.setattr(mod, name, no_render)
    assert strip(attribute_traces(traces, model, cfg, rendered=back)) == in_place


def test_renders_must_match_the_traces(tiny):
    cfg, model = tiny
    with pytest.raises(ValueError, match="renders for"):
        attribute_traces([_trace(random.Random(1), 3)], model, cfg, rendered=[])
