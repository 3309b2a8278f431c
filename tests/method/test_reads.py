"""What a verdict reads (method/reads.py) and the model stage computing costly features only there (issue 24)."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import numpy as np
import pytest

from masprism_batch.config import load_config
from masprism_batch.fit import rankfile
from masprism_batch.method import reads
from masprism_batch.model import load_model
from masprism_batch.stage.attribute import attribute_traces
from masprism_batch.trace import Step, Trace

CF, HEADS = reads.COUNTERFACTUAL, reads.HEAD_ATTENTION


def _t(source="my-team/agents", n=6, seed=0):
    rng = random.Random(seed)
    words = ["search", "result", "error", "file", "answer", "plan", "code", "value", "failed"]
    return Trace(trace_id=f"{source}-{seed}", source=source, steps=[
        Step(index=i, agent=rng.choice(["Planner", "Coder"]), content=" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))))
        for i in range(n)])


def _weights(tmp_path, rule: str):
    (tmp_path / "fallback.json").write_text(json.dumps({"rule": rule}), encoding="utf-8")
    return str(tmp_path)


@pytest.mark.parametrize(("rule", "want"), [("faithful", set()), ("earliest", set()), ("counterfactual", {CF}),
                                            ("learned_heads", {HEADS})])
def test_zero_training_rule_reads_its_column_only(tmp_path, rule, want):
    cfg = load_config(None, method__ranker_weights=_weights(tmp_path, rule))
    assert reads.verdict_reads(cfg, _t()) == want
    assert reads.needed(cfg, [_t(), _t(seed=1)]) == [frozenset(want)] * 2


@pytest.mark.parametrize(("entry", "want"), [
    (SimpleNamespace(features=["nll1_z", "cf_z"]), {CF}),  # a fitted ranker: its step features
    (SimpleNamespace(features=["has_cf", "attn_learned_norm", "rel_pos"]), {CF, HEADS}),
    (SimpleNamespace(features=["nll1_z", "rel_pos"]), set()),
    (SimpleNamespace(features=[], verdict="rule", rule="counterfactual"), {CF}),  # a system kept on a rule
    (SimpleNamespace(features=[], verdict="rule", rule="earliest"), set()),
])
def test_fitted_ranker_reads_what_it_declares(monkeypatch, entry, want):
    monkeypatch.setattr(rankfile, "ranker_for", lambda *a, **k: entry)
    assert reads.verdict_reads(load_config(None), _t()) == want


def test_faithful_method_reads_nothing_and_all_features_reads_everything_enabled(monkeypatch):
    monkeypatch.setattr(rankfile, "ranker_for", lambda *a, **k: SimpleNamespace(features=["cf_z", "attn_learned_norm"]))
    assert reads.needed(load_config(None, method__name="masprism"), [_t()]) == [frozenset()]
    assert reads.needed(load_config(None), [_t()]) == [frozenset({CF, HEADS})]
    every = load_config(None, method__name="masprism", method__features="all")
    assert reads.needed(every, [_t()]) == [frozenset({CF, HEADS})]
    assert reads.needed(load_config(None, method__name="masprism"), [_t()], everything=True) == [frozenset({CF, HEADS})]
    # what the config disables is never computed, whatever reads it
    off = load_config(None, method__counterfactual_k=0, method__learned_heads=False)
    assert reads.needed(off, [_t()]) == [frozenset()]


def test_unresolved_verdict_computes_everything(monkeypatch):
    def boom(*a, **k):
        raise ValueError("ranker file of another model")

    monkeypatch.setattr(rankfile, "ranker_for", boom)
    assert reads.needed(load_config(None), [_t()]) == [reads.enabled(load_config(None))]


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, model__name="tiny-random", render__max_context=1024)
    return cfg, load_model(cfg.model, cfg.signals)


def _run(model, cfg, traces):
    out = attribute_traces(traces, model, cfg)
    by = {}
    for r in out.step_scores:
        by.setdefault(r["trace_id"], []).append(r)
    return out, by


@pytest.mark.parametrize("rule", ["faithful", "counterfactual"])
def test_stage_skips_what_the_verdict_does_not_read_and_verdicts_stay(tmp_path, tiny, rule):
    """tiny-random (no packaged ranker applies): the zero-training rule decides. A rule that reads no costly
    feature gets null cf_effect everywhere and the same verdicts as a run computing every feature."""
    cfg, model = tiny
    cfg = cfg.model_copy(update={"method": cfg.method.model_copy(update={"ranker_weights": _weights(tmp_path, rule)})})
    traces = [_t(n=random.Random(s).randint(4, 9), seed=s) for s in range(4)]
    lean, lean_rows = _run(model, cfg, traces)
    full, full_rows = _run(model, cfg.model_copy(update={"method": cfg.method.model_copy(update={"features": "all"})}),
                           traces)
    key = [(a["trace_id"], a["pred_step"], a["pred_agent"], [c["step"] for c in a["candidates"]]) for a in lean.attributions]
    assert key == [(a["trace_id"], a["pred_step"], a["pred_agent"], [c["step"] for c in a["candidates"]])
                   for a in full.attributions]
    cf_lean = [r["cf_effect"] for rows in lean_rows.values() for r in rows]
    cf_full = [r["cf_effect"] for rows in full_rows.values() for r in rows]
    assert any(x is not None and np.isfinite(x) for x in cf_full)  # the forced run measured some
    if rule == "faithful":
        assert all(x is None or not np.isfinite(x) for x in cf_lean)
        assert lean.tokens_counterfactual == 0 and full.tokens_counterfactual > 0
    else:  # the rule reads them: measured as in the forced run
        np.testing.assert_allclose(np.array(cf_lean, dtype=float), np.array(cf_full, dtype=float), atol=1e-5)
