"""Step features are well-formed, the conditional-logit solver recovers a planted signal, agents sum their steps."""

import numpy as np
import pytest

from masprism_batch.fit import clogit
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


def test_features_shape_and_finiteness(np_rng):
    rng = np_rng
    for n in (1, 2, 17):
        t, rows = _trace_and_rows(rng, n)
        X = rk.step_features(t, rows)
        assert X.shape == (n, len(rk.FEATURES)) and np.isfinite(X).all()


def test_clogit_recovers_a_planted_feature(np_rng):
    """The one conditional-logit solver (fit/clogit.py) on step features: gold = the most surprising step."""
    rng = np_rng
    col = rk.FEATURES.index("nll1_z")
    xs, golds = [], []
    for _ in range(60):
        t, rows = _trace_and_rows(rng, int(rng.integers(3, 15)))
        X = rk.step_features(t, rows)
        xs.append(X)
        golds.append([int(np.argmax(X[:, col]))])
    w = clogit.solve(xs, golds, [np.zeros(len(x)) for x in xs], np.full(len(rk.FEATURES), 0.1 / len(xs)))
    assert int(np.argmax(np.abs(w))) == col and w[col] > 0
    hits = sum(int(np.argmax(X @ w)) == g[0] for X, g in zip(xs, golds, strict=True))
    assert hits / len(xs) > 0.8


def test_agent_scores_sum_step_probabilities_case_insensitively():
    t = Trace(trace_id="t", source="s", steps=[Step(0, "WebSurfer", "a"), Step(1, "websurfer", "b"),
                                                Step(2, "Orchestrator", "c")])
    s = rk.agent_scores(t, np.array([0.3, 0.3, 0.4]))
    assert s == pytest.approx({"WebSurfer": 0.6, "Orchestrator": 0.4})


def _clogit_grad(xs, golds, offs, pen, w):
    """The objective's gradient, log by log (an independent loop, not the solver's stacked arrays)."""
    g = np.zeros_like(w)
    for x, gold, off in zip(xs, golds, offs, strict=True):
        s = off + x @ w
        p = np.exp(s - s.max())
        p /= p.sum()
        q = np.zeros(len(s))
        q[gold] = 1.0 / len(gold)  # the target: uniform over the log's gold steps
        g += x.T @ (p - q)
    return g / len(xs) + pen * w


@pytest.mark.parametrize("l2", [30.0, 3.0, 0.3, 0.03])
def test_clogit_converges_with_several_gold_steps_per_log(np_rng, l2):
    """TRAIL labels several error spans per log. The solver once fitted "any gold step" there, a non-convex
    objective whose Newton step could point uphill: it stopped at w = 0 (a fitted ranker silently equal to its
    offset) on about a third of such fits. At its answer the gradient of the documented objective (cross-entropy
    to the uniform distribution over the gold steps) must vanish. Fresh random logs of ragged lengths, an offset
    on five steps as the rule's order gives, 2-7 gold steps per log."""
    d = 23
    for _ in range(4):
        planted = np_rng.normal(size=d) * 0.5
        xs, golds, offs = [], [], []
        for _ in range(int(np_rng.integers(15, 40))):
            m = int(np_rng.integers(8, 47))
            x = np_rng.normal(size=(m, d))
            top = np.argsort(-(x @ planted))[: int(np_rng.integers(2, 7))]
            golds.append(sorted({*top.tolist(), int(np_rng.integers(m))}))
            off = np.zeros(m)
            off[np_rng.choice(m, 5, replace=False)] = 2.0 / np.arange(1, 6)
            xs.append(x)
            offs.append(off)
        pen = np.full(d, l2)
        w = clogit.solve(xs, golds, offs, pen)
        # 1e-4: Newton's last steps reach ~1e-8; a solver stopped early leaves 1e-3 to 1 (and w = 0)
        assert np.abs(_clogit_grad(xs, golds, offs, pen, w)).max() < 1e-4, (l2, np.abs(w).max())


def test_clogit_refuses_a_log_without_gold_steps(np_rng):
    xs = [np_rng.normal(size=(int(np_rng.integers(3, 9)), 4)) for _ in range(3)]
    with pytest.raises(ValueError, match="log 1 has no gold step"):
        clogit.solve(xs, [[0], [], [2]], [np.zeros(len(x)) for x in xs], np.full(4, 1.0))
