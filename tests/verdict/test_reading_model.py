"""Issue 59: the reading model a fit may keep for a system's step sets (verdict/reading_model.py): what it reads
from a log's step_scores rows, the label prior's order (`prior_key`), and the checks a ranker file's model gets."""

import math

import numpy as np
import pytest

from masprism_batch.verdict import reading_model as rm
from masprism_batch.verdict import stepset as ss


def _rows(np_rng, n: int) -> list[dict]:
    return [{"step": i, "agent": str(np_rng.choice(["Planner", "Coder", "coder (-> Planner)"])),
             "h_score": float(np_rng.normal()), "nll_pass1": float(np_rng.gamma(2.0)),
             "tokens_pass1": int(np_rng.integers(1, 500))} for i in range(n)]


@pytest.mark.parametrize("n", [1, 7, 47])
def test_matrix_reads_the_label_prior_turns_position_and_standardised_signals(np_rng, n):
    rows = _rows(np_rng, n)
    agents = {"planner": 3.0, "coder": 1.0}
    X = rm.matrix(rows, n, agents)
    assert X.shape == (n, len(rm.FEATURES)) and np.isfinite(X).all()
    f = {name: X[:, i] for i, name in enumerate(rm.FEATURES)}
    names = ["planner" if r["agent"] == "Planner" else "coder" for r in rows]
    for k, a in enumerate(names):
        assert f["agent"][k] == pytest.approx(math.log((agents[a] + 0.5) / names.count(a)))
        assert f["turn"][k] == pytest.approx(math.log1p(names[:k].count(a)))
    assert f["rel"][0] == 0 and (n == 1 or f["rel"][-1] == pytest.approx(1.0))
    for name in ("h", "nll", "tokens"):
        assert abs(f[name].mean()) < 1e-9 and (n == 1 or f[name].std() == pytest.approx(1.0))


def test_missing_or_bad_signals_read_as_average_and_steps_without_rows_count():
    rows = [{"step": 0, "agent": "A", "h_score": None, "nll_pass1": float("nan"), "tokens_pass1": -3},
            {"step": 1, "agent": "A", "h_score": 2.0, "nll_pass1": 1.0, "tokens_pass1": 10},
            {"step": 9, "agent": "A"}]  # past the log: ignored
    X = rm.matrix(rows, 3, {})
    assert np.isfinite(X).all() and X.shape == (3, len(rm.FEATURES))
    h = X[:, rm.FEATURES.index("h")]
    assert h[0] == 0 and h[2] == 0  # missing: the mean


def test_the_learned_tail_orders_by_the_models_score(np_rng):
    n = 23
    rows = _rows(np_rng, n)
    w = [0.0] * len(rm.FEATURES)
    w[rm.FEATURES.index("nll")] = 1.0
    model = {"features": list(rm.FEATURES), "weights": w, "agents": {}}
    assert rm.check(model) is None
    got = ss.reading_order([5], n, "learned", rows, lead="top", model=model)
    nll = {r["step"]: r["nll_pass1"] for r in rows}
    assert got[0] == 5 and got[1:] == sorted(set(range(n)) - {5}, key=lambda k: -nll[k])


@pytest.mark.parametrize("bad,field", [
    ([1], "model must be an object"),
    ({"features": ["agent"], "weights": [1.0], "agents": {}}, "model.features"),
    ({"features": 6, "weights": [0.0] * len(rm.FEATURES), "agents": {}}, "model.features"),  # was a TypeError
    ({"features": {f: 1 for f in rm.FEATURES}, "weights": [0.0] * len(rm.FEATURES), "agents": {}}, "model.features"),
    ({"features": list(rm.FEATURES), "weights": [1.0], "agents": {}}, "model.weights"),
    ({"features": list(rm.FEATURES), "weights": [float("inf")] * len(rm.FEATURES), "agents": {}}, "model.weights"),
    # finite, but inf - inf in the step scores: a NaN reading order, silently
    ({"features": list(rm.FEATURES), "weights": [1e308, -1e308] * (len(rm.FEATURES) // 2), "agents": {}},
     "model.weights"),
    ({"features": list(rm.FEATURES), "weights": [0.0] * len(rm.FEATURES), "agents": {"a": -1}}, "model.agents['a']"),
    ({"features": list(rm.FEATURES), "weights": [0.0] * len(rm.FEATURES)}, "model.agents must be"),
])
def test_a_bad_model_is_refused_naming_its_field(bad, field):
    problem = ss.check({"score": "share", "tail": "learned", "scores": [0.5], "model": bad})
    assert problem is not None and field in problem
