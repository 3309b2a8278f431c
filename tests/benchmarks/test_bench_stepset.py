"""benchmarks/accuracy/bench_stepset.py (issue 59) on synthetic cached cases: the leave-one-system-out rows never
calibrate a system on itself, the packaged dev calibration it writes is one a run accepts, and the fitted rows
measure the product's fit on held-out folds."""

import json

import numpy as np

from benchmarks.accuracy import bench_stepset as bs
from benchmarks.accuracy.accuracy_cases import Case
from masprism_batch.trace import Labels, Step, Trace
from masprism_batch.verdict import stepset as ss

SYSTEMS = ("who-and-when/A", "who-and-when/B", "who-and-when/C")


def _cases(rng, per=14):
    out = []
    for s in SYSTEMS:
        for i in range(per):
            n = int(rng.integers(5, 25))
            ranked = [int(k) for k in rng.permutation(n)[:5]]
            gold = ranked[0] if rng.random() < 0.4 else int(rng.integers(0, n))
            steps = [Step(index=j, agent=f"a{j % 3}", content="x " * int(rng.integers(1, 20)), role="assistant")
                     for j in range(n)]
            t = Trace(trace_id=f"{s}-{i}", source=s, steps=steps, labels=Labels(mistake_step=gold, mistake_agent="a0"))
            rows = [{"step": j, "nll_pass1": float(rng.random() * 4), "nll_pass2": float(rng.random() * 4),
                     "h_score": float(rng.random()), "score": float(5 - ranked.index(j)) if j in ranked else None,
                     "rank": ranked.index(j) + 1 if j in ranked else None, "is_symptom": bool(rng.random() < .2),
                     "is_candidate": j in ranked, "has_failure_word": bool(rng.random() < .2),
                     "attention_pass1": [float(x) for x in rng.random(j + 1)]} for j in range(n)]
            meta = {"rows": rows, "ranking": {"ranked": ranked},
                    "attribution": {"pred_step": ranked[0], "seconds_pass1": 1.0, "seconds_pass2": 0.5}}
            out.append(Case(s, t, meta, {}))
    return out


def test_loso_rows_calibrate_each_system_on_the_others_only(np_rng, monkeypatch):
    cases = _cases(np_rng)
    seen = []
    real = bs.apply

    def spy(cal, test, level, score):
        seen.append((cal, len(test)))
        return real(cal, test, level, score)

    monkeypatch.setattr(bs, "apply", spy)
    rows, (score, tail, pool, lead) = bs.zero_training_rows(cases, "faithful")
    assert score in ss.SCORES and tail in ss.TAILS and pool in ss.POOLS and lead in ss.LEADS
    # every call: the two other systems' 28 logs calibrate, the held-out system's 14 are scored
    assert seen and all(len(c["scores"]) == 28 and len(c["groups"]) == 2 and t == 14 for c, t in seen)
    assert {r["system"] for r in rows} == set(SYSTEMS)
    assert len(rows) == len(SYSTEMS) * len(bs.LEVELS) * len(ss.SCORES) * len(ss.TAILS) * len(ss.POOLS) * len(ss.LEADS)


def test_written_dev_calibration_is_one_a_run_accepts(np_rng, tmp_path):
    cases = _cases(np_rng)
    rows, choice = bs.zero_training_rows(cases, "faithful")
    path = tmp_path / "stepset.json"
    bs.write_dev(cases, "faithful", choice, rows, path)
    d = json.loads(path.read_text())
    assert ss.check(d) is None and d["format"] == ss.FORMAT and d["systems"] == {s: 14 for s in SYSTEMS}
    assert len(d["scores"]) == 42 and (d["score"], d["tail"], d["pool"], d["lead"]) == choice
    assert sorted(d["groups"]) == list(SYSTEMS) and len(d["heldout_loso"]) == len(SYSTEMS) * len(bs.LEVELS)


def test_fitted_rows_are_held_out_coverage_of_the_products_fit(np_rng):
    cases = _cases(np_rng)
    rows = bs.fitted_rows(cases, "faithful", "author", seeds=(0,))
    assert {r["system"] for r in rows} == set(SYSTEMS)
    for r in rows:
        assert 0 <= r["coverage"] <= 1 and 0 < r["mean_set_share"] <= 1 and r["logs"] == 14
    cost = bs.cost_row(cases, "faithful", repeats=2)
    assert 0 < cost["set_seconds"] < 0.01 and np.isclose(cost["attribute_seconds"], 1.5)


def test_draw_rows_fit_on_k_logs_and_measure_the_others(np_rng, monkeypatch):
    """stepset_draws: each draw's fit sees exactly k of a system's labelled logs; its sets are measured on that
    system's other logs only."""
    from benchmarks.accuracy import stepset_draws as sd

    cases = _cases(np_rng, per=20)
    fitted, applied = [], []
    fit, apply = sd.fs.fit_system, sd.SystemRanker.apply

    def fit_spy(train, system, **kw):
        fitted.append((system, {c.trace.trace_id for c in train}))
        return fit(train, system, **kw)

    def apply_spy(self, trace, rows, ranked):
        applied.append((self.entry["system"], trace.trace_id, frozenset(fitted[-1][1])))
        return apply(self, trace, rows, ranked)

    monkeypatch.setattr(sd.fs, "fit_system", fit_spy)
    monkeypatch.setattr(sd.SystemRanker, "apply", apply_spy)
    rows = sd.draw_rows(cases, "faithful", "author", ks=(10,), draws=3,
                        row=lambda p, s, lv, cov, share, base, n: bs._row(p, s, lv, "", "", cov, share, base, n))
    assert len(fitted) == 3 * len(SYSTEMS) and all(len(ids) == 10 for _, ids in fitted)
    assert all(t.startswith(s) for s, ids in fitted for t in ids)
    assert applied and all(tid not in train and tid.startswith(s) for s, tid, train in applied)
    assert len(applied) == 3 * len(SYSTEMS) * 10  # every other log of the system, once per draw
    assert {(r["system"], r["coverage_level"]) for r in rows} == {(s, lv) for s in SYSTEMS for lv in (0.5, 0.8, 0.9)}
    for r in rows:
        assert r["protocol"] == "fitted on 10 labels, 3 draws" and 0 <= r["coverage"] <= 1
        assert 0 < r["mean_set_share"] <= 1 and 0 < r["step0_share"] <= 1 and r["logs"] == 20
