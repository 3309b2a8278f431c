"""The learned ranker: features are well-formed, fitting recovers a planted signal, weights round-trip."""

import numpy as np
import pytest

from masprism_batch.method import ranker as rk
from masprism_batch.trace import Step, Trace


def _trace_and_rows(rng, n):
    steps = [Step(index=i, agent=str(rng.choice(["A", "B", "C"])), content="x " * int(rng.integers(1, 50)),
                  role=str(rng.choice(["user", "assistant"]))) for i in range(n)]
    rows = []
    for i in range(n):
        rows.append({"step": i, "nll_pass1": float(rng.random() * 4), "nll_pass2": float(rng.random() * 4),
                     "h_score": float(rng.random()), "score": None, "rank": None, "is_symptom": bool(rng.random() < .2),
                     "is_candidate": bool(rng.random() < .3), "has_failure_word": bool(rng.random() < .2),
                     "attention_pass1": [float(x) for x in rng.random(i + 1)]})
    return Trace(trace_id="t", source="s", steps=steps), rows


def test_features_shape_and_finiteness():
    rng = np.random.default_rng()
    for n in (1, 2, 17):
        t, rows = _trace_and_rows(rng, n)
        X = rk.step_features(t, rows)
        assert X.shape == (n, len(rk.FEATURES)) and np.isfinite(X).all()


def test_fit_recovers_a_planted_feature():
    rng = np.random.default_rng()
    samples = []
    col = rk.FEATURES.index("nll1_z")
    for _ in range(60):
        t, rows = _trace_and_rows(rng, int(rng.integers(3, 15)))
        X = rk.step_features(t, rows)
        samples.append((X, [int(np.argmax(X[:, col]))]))  # gold = the most surprising step
    m = rk.fit(samples, l2=0.1, iters=300)
    assert int(np.argmax(np.abs(m.weights))) == col and m.weights[col] > 0
    hits = sum(int(np.argmax(m.probs(X))) == g[0] for X, g in samples)
    assert hits / len(samples) > 0.8


def test_agent_scores_sum_step_probabilities_case_insensitively():
    t = Trace(trace_id="t", source="s", steps=[Step(0, "WebSurfer", "a"), Step(1, "websurfer", "b"),
                                                Step(2, "Orchestrator", "c")])
    s = rk.agent_scores(t, np.array([0.3, 0.3, 0.4]))
    assert s == pytest.approx({"WebSurfer": 0.6, "Orchestrator": 0.4})


def test_subset_rankers_and_candidate_scope():
    """A ranker over PORTABLE features scores through rerank; scope=candidates keeps the top among them."""
    rng = np.random.default_rng()
    t, rows = _trace_and_rows(rng, 12)
    for r in rows:
        r["is_candidate"] = r["step"] in (3, 7)
        r["is_symptom"] = r["step"] == 9
    feats = list(rk.PORTABLE)
    m = rk.Ranker(rng.normal(size=len(feats)), np.zeros(len(feats)), np.ones(len(feats)), feats, scope="candidates")
    order, probs, agent = rk.rerank(t, rows, m, 12, False)
    assert set(order[:3]) == {3, 7, 9} and abs(sum(probs) - 1) < 1e-9 and agent == t.steps[order[0]].agent
