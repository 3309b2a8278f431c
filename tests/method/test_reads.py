"""What a verdict reads (method/reads.py) and the model stage computing costly features only there (issue 24)."""

from __future__ import annotations

import dataclasses
import json
import random
from types import SimpleNamespace

import numpy as np
import pytest

from masprism_batch.config import load_config
from masprism_batch.method import reads
from masprism_batch.model import load_model
from masprism_batch.stage.attribute import attribute_traces
from masprism_batch.trace import Step, Trace
from masprism_batch.verdict import rankfile
from masprism_batch.verdict.policy import VerdictPolicy

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


def _policy(cfg, entry=None, refused=None):
    """The run's policy with its ranker file replaced by `entry` for every log (or refused)."""
    pol = VerdictPolicy.load(cfg.method)
    files = SimpleNamespace(for_trace=lambda *_a: entry) if entry is not None else None
    return dataclasses.replace(pol, rankers=files, refused=refused) if pol.ranked else pol


@pytest.mark.parametrize(("rule", "want"), [("faithful", set()), ("earliest", set()), ("counterfactual", {CF}),
                                            ("learned_heads", {HEADS})])
def test_zero_training_rule_reads_its_column_only(tmp_path, rule, want):
    cfg = load_config(None, method__ranker=_weights(tmp_path, rule))
    pol = VerdictPolicy.load(cfg.method)
    assert pol.rankers is None and pol.fallback.rule == rule  # a folder with only fallback.json: no ranker
    assert reads.verdict_reads(pol, _t()) == want
    assert reads.needed(cfg, pol, [_t(), _t(seed=1)]) == [frozenset(want)] * 2


@pytest.mark.parametrize(("entry", "want"), [
    (SimpleNamespace(features=["nll1_z", "cf_z"]), {CF}),  # a fitted ranker: its step features
    (SimpleNamespace(features=["has_cf", "attn_learned_norm", "rel_pos"]), {CF, HEADS}),
    (SimpleNamespace(features=["nll1_z", "rel_pos"]), set()),
    (SimpleNamespace(features=[], verdict="rule", rule="counterfactual"), {CF}),  # a system kept on a rule
    (SimpleNamespace(features=[], verdict="rule", rule="earliest"), set()),
])
def test_fitted_ranker_reads_what_it_declares(entry, want):
    assert reads.verdict_reads(_policy(load_config(None), entry), _t()) == want


def test_faithful_method_reads_nothing_and_all_features_reads_everything_enabled():
    entry = SimpleNamespace(features=["cf_z", "attn_learned_norm"])

    def needed(cfg, **kw):
        return reads.needed(cfg, _policy(cfg, entry), [_t()], **kw)

    assert needed(load_config(None, method__name="masprism")) == [frozenset()]
    assert needed(load_config(None)) == [frozenset({CF, HEADS})]
    assert needed(load_config(None, method__name="masprism", method__features="all")) == [frozenset({CF, HEADS})]
    assert needed(load_config(None, method__name="masprism"), everything=True) == [frozenset({CF, HEADS})]
    # what the config disables is never computed, whatever reads it
    assert needed(load_config(None, method__counterfactual_k=0, method__learned_heads=False)) == [frozenset()]


def test_unresolved_verdict_computes_everything(tmp_path):
    cfg = load_config(None, method__ranker=str(tmp_path / "missing.json"))
    pol = VerdictPolicy.load(cfg.method)
    assert isinstance(pol.refused, FileNotFoundError)  # said by every verdict that reads it, not at load
    assert reads.needed(cfg, pol, [_t()]) == [reads.enabled(cfg)]
    with pytest.raises(FileNotFoundError, match="missing.json"):
        pol.ranker(_t())


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
    cfg = cfg.model_copy(update={"method": cfg.method.model_copy(update={"ranker": _weights(tmp_path, rule)})})
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


def test_the_stage_reads_the_ranker_file_once_through_its_policy(tmp_path, tiny, np_rng):
    """The run's policy holds the ranker file: removed after the policy was loaded, the stage still applies it
    (no per-trace resolution), and what-to-compute and the verdict read the same entries."""
    from masprism_batch.verdict.rankfile import RankerFile

    cfg, model = tiny
    rng = np_rng
    path = tmp_path / "ranker.json"
    fitted = {"system": "team/a", "verdict": "ranker", "rule": "faithful", "agent_rule": "author",
              "features": ["is_first", "nll1_z"], "weights": rng.normal(size=2).tolist(), "mean": [0.0, 0.0],
              "std": [1.0, 1.0], "offset": "rule", "offset_scale": float(rng.random())}
    kept = {"system": "team/b", "verdict": "rule", "rule": "counterfactual", "agent_rule": "author"}
    RankerFile(model.model_id, {"team/a": fitted, "team/b": kept}, {}).write(path)
    cfg = cfg.model_copy(update={"method": cfg.method.model_copy(update={"ranker": str(path)})})
    policy = VerdictPolicy.load(cfg.method, model.model_id)
    path.unlink()
    traces = [_t(source=src, n=int(rng.integers(4, 9)), seed=int(s))
              for src, s in zip(["team/a", "team/b", "team/c"], rng.integers(0, 1 << 20, size=3), strict=True)]
    fallback = frozenset({CF}) if policy.fallback.rule == "counterfactual" else frozenset()
    assert reads.needed(cfg, policy, traces) == [frozenset(), frozenset({CF}), fallback]
    out = attribute_traces(traces, model, cfg, policy=policy)
    # a zero-training verdict no symptom points to is labelled no_symptom:<rule> (issue 51), same rule
    got = [a["verdict_by"].replace("no_symptom:", "rule:", 1) for a in out.attributions]
    assert got == ["ranker:team/a", "rule:counterfactual", f"rule:{policy.fallback.rule}"]
    assert not hasattr(rankfile, "_CACHE")  # no process-wide cache behind the policy
