"""benchmarks/accuracy/compare_models.py (issue 52): the learning curve pairs the two models draw by draw (the same
training and test logs for both, whatever each model's signals say), skips a system too small to leave 5 test logs,
scores each draw on its test logs only; the speed row is tokens of both passes over extraction seconds."""

from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.accuracy import compare_models as cm


def _cases(rng, system, n, model_shift):
    out = []
    for i in range(n):
        steps = int(rng.integers(3, 12))
        out.append(SimpleNamespace(system=system, trace=SimpleNamespace(trace_id=f"{system}:{i}", steps=[0] * steps),
                                   rows=[], gold={int(rng.integers(steps))},
                                   ranked=list(np.roll(np.arange(steps), model_shift + i))))
    return out


def test_curve_pairs_the_draws_and_scores_the_held_out_logs(np_rng, monkeypatch):
    seen: list[tuple[str, tuple[str, ...]]] = []

    class Ranker:  # the "fit" blames its rule's first step: its hits are then known without the real fit
        def __init__(self, entry, _):
            self.entry = entry

        def apply(self, trace, rows, ranked):
            return ranked, None, None, None

    def fit_system(train, system, **_):
        seen.append((system, tuple(c.trace.trace_id for c in train)))
        return SimpleNamespace(entry={})

    monkeypatch.setattr(cm, "fit_cases", lambda cases, rule: cases)
    monkeypatch.setattr(cm.fs, "fit_system", fit_system)
    monkeypatch.setattr(cm, "SystemRanker", Ranker)
    monkeypatch.setattr(cm.ft, "hit", lambda c, s: s in c.gold)
    n_big, k, draws = int(np_rng.integers(23, 47)), 5, int(np_rng.integers(3, 7))
    seed = int(np_rng.integers(1 << 30))
    a = _cases(np.random.default_rng(seed), "big", n_big, 0) + _cases(np.random.default_rng(seed), "small", 9, 0)
    b = _cases(np.random.default_rng(seed), "big", n_big, 1) + _cases(np.random.default_rng(seed), "small", 9, 1)
    got_a = cm.curve(a, k, draws, "faithful", "author")
    trains_a, seen[:] = list(seen), []
    got_b = cm.curve(b, k, draws, "faithful", "author")
    assert list(got_a) == ["big"]  # 9 logs leave fewer than 5 to test after 5 trained on: no row
    assert seen == trains_a and len(seen) == draws  # the same training logs in every draw for both models
    by_id = {c.trace.trace_id: c for c in a}
    for (_, train), va, vb in zip(trains_a, got_a["big"], got_b["big"], strict=True):
        assert len(train) == k and all(by_id[t].system == "big" for t in train)
        for cases, v in ((a, va), (b, vb)):  # each model scored on the same held-out logs, by its own ranking
            test = [c for c in cases if c.system == "big" and c.trace.trace_id not in train]
            assert len(test) == n_big - k
            assert v == pytest.approx(np.mean([c.ranked[0] in c.gold for c in test]))


def test_speed_is_tokens_of_both_passes_over_seconds(np_rng):
    cases = [SimpleNamespace(meta={"attribution": {"tokens_pass1": int(np_rng.integers(100, 3000)),
                                                   "tokens_pass2": int(np_rng.integers(0, 2048))},
                                   "seconds": float(np_rng.uniform(1, 90))}) for _ in range(int(np_rng.integers(3, 9)))]
    tok, secs, tps = cm.speed(cases)
    assert tok == sum(c.meta["attribution"]["tokens_pass1"] + c.meta["attribution"]["tokens_pass2"] for c in cases)
    assert secs == pytest.approx(sum(c.meta["seconds"] for c in cases)) and tps == pytest.approx(tok / secs)
    assert cm.speed([]) == (0, 0, 0.0)
