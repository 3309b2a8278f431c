"""benchmarks/accuracy/bench_label_picker.py (issue 59 item 3) on synthetic cached cases: the picker reads only
the pool's verdicts (no label), both choices are fitted and scored on the same held-out test logs, and the rows
pair picker and random per draw."""

import csv
import sys

import numpy as np

from benchmarks.accuracy import bench_label_picker as bl
from benchmarks.accuracy.accuracy_cases import Case, fit_cases
from masprism_batch.trace import Labels, Step, Trace
from masprism_batch.verdict import rules as zr


def _cases(rng, n=40, system="who-and-when/A"):
    out = []
    for i in range(n):
        k = int(rng.integers(6, 20))
        ranked = [int(x) for x in rng.permutation(k)[:5]]
        gold = ranked[0] if rng.random() < 0.4 else int(rng.integers(0, k))
        steps = [Step(index=j, agent=f"a{j % 3}", content="x " * int(rng.integers(1, 20)), role="assistant")
                 for j in range(k)]
        t = Trace(trace_id=f"{system}-{i}", source=system, steps=steps, question=f"task {i % 25}",
                  labels=Labels(mistake_step=gold, mistake_agent="a0"))
        rows = [{"step": j, "nll_pass1": float(rng.random() * 4), "nll_pass2": float(rng.random() * 4),
                 "h_score": float(rng.random()), "score": float(5 - ranked.index(j)) if j in ranked else None,
                 "rank": ranked.index(j) + 1 if j in ranked else None, "is_symptom": bool(rng.random() < .2),
                 "is_candidate": j in ranked, "has_failure_word": bool(rng.random() < .2),
                 "attention_pass1": [float(x) for x in rng.random(j + 1)]} for j in range(k)]
        out.append(Case(system, t, {"rows": rows, "ranking": {"ranked": ranked},
                                    "attribution": {"pred_step": ranked[0]}}, {}))
    return out


def test_picker_reads_no_label_and_both_choices_are_scored_on_the_same_held_out_logs(np_rng, monkeypatch, tmp_path):
    fallback = zr.read_fallback(None)
    fc = fit_cases(_cases(np_rng), fallback.rule)
    for pool, test, _ in bl.splits(fc, "who-and-when/A", 2):
        assert not {c.trace.trace_id for c in pool} & {c.trace.trace_id for c in test}
        cands = [bl.candidate(c, fallback) for c in pool]
        blind = [bl.candidate(type(c)(c.trace, c.rows, [], [], c.ranked), fallback) for c in pool]
        assert cands == blind  # the same candidates without the labels: the picker never reads one
    monkeypatch.setattr(bl, "cached_cases", lambda args: (_cases(np_rng), None))
    out = tmp_path / "lp.csv"
    monkeypatch.setattr(sys, "argv", ["bench_label_picker.py", "--draws", "2", "--csv", str(out)])
    bl.main()
    rows = list(csv.DictReader(out.open()))
    keys = {(r["k"], r["draw"], r["method"]) for r in rows}
    assert keys == {(str(k), str(d), m) for k in bl.KS for d in (0, 1) for m in ("picker", bl.DIVERSITY, "random")}
    assert all(0 <= float(r["value"]) <= 1 for r in rows) and len({r["n_test"] for r in rows}) == 1
    assert np.isfinite([float(r["value"]) for r in rows]).all()
