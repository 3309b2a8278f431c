"""Step sets after a fit on a few labels (issue 59: "a fit on 20 labels of an unseen system"), for
`bench_stepset.py`: the learning curve's draws (bench_learning_curve.system_draws: k random labelled logs of a
system, tested on the rest, the same seeds), each fitted by the product's fit, whose own internal folds calibrate
its sets (fit/stepset_fit.py); the draw's other logs measure what the sets hold, beside the share that reading
from step 0 needs for the same level, calibrated by the same conformal rule on the same k logs."""

from __future__ import annotations

import numpy as np

from benchmarks.accuracy import bench_learning_curve as blc
from benchmarks.accuracy.accuracy_cases import fit_cases, gold_of
from masprism_batch.fit import system as fs
from masprism_batch.fit.stepset_fit import verdict_order
from masprism_batch.verdict import stepset as ss
from masprism_batch.verdict.rankfile import SystemRanker


def verdict_steps(sr: SystemRanker, c) -> list[int]:
    """The steps a run's verdict ranks on case `c` (verdict/decide.py): a ranker's every step, else the order
    its fit calibrated the sets on (fit/stepset_fit.verdict_order)."""
    order = sr.apply(c.trace, c.rows, c.ranked)[0]
    return order if sr.verdict == "ranker" else verdict_order(sr.verdict, order[0], c.ranked)


def step0_cal(cases) -> list[float]:
    """The calibration scores of reading from step 0 on the labelled `cases` (their first labelled step's share)."""
    out = []
    for c in cases:
        g = gold_of(c.trace)
        if g:
            n = len(c.trace.steps)
            out.append(ss.score_of(list(range(n)), g, n, "share"))
    return out


def measured(order: list[int], c, cal: dict | None, level: float, q0: float) -> tuple[bool, float, float]:
    """(the set holds a labelled step, its share of the log, the share reading from step 0 needs at quantile q0)
    of case `c` under calibration `cal` at `level`."""
    n = len(c.trace.steps)
    s = ss.step_set(order, n, cal, level, "fit", c.rows)
    return any(g in s.read for g in c.gold), s.share, ss.size_of(q0, n, "share") / n


def draw_rows(cases, rule: str, rule_agent: str, ks=(10, 20), draws: int = 20, levels=(0.5, 0.8, 0.9),
              row=None) -> list[dict]:
    """Per system, k and level: the mean over draws of the coverage (and its sd over draws), the mean set share and
    the share from step 0; `row(protocol, system, level, cov, share, base, logs)` builds each row."""
    out = []
    for system in sorted({c.system for c in cases}):
        fc = fit_cases([c for c in cases if c.system == system], rule)
        for k in ks:
            got: dict[float, list[tuple[float, float, float]]] = {lv: [] for lv in levels}
            for train, test in blc.system_draws(fc, system, k, draws):
                entry = fs.fit_system(train, system, rule=rule, rule_agent=rule_agent).entry
                sr = SystemRanker(entry, "")
                base = step0_cal(train)
                orders = [verdict_steps(sr, c) for c in test]
                for lv in levels:
                    q0 = ss.quantile(base, lv) if base else float("inf")
                    m = np.array([measured(o, c, entry.get("stepset"), lv, q0)
                                  for o, c in zip(orders, test, strict=True)], dtype=np.float64)
                    got[lv].append(tuple(m.mean(0)))
            for lv, runs in got.items():
                if not runs:
                    continue
                a = np.array(runs)
                r = row(f"fitted on {k} labels, {len(runs)} draws", system, lv, float(a[:, 0].mean()),
                        float(a[:, 1].mean()), float(a[:, 2].mean()), len(fc))
                r["coverage_sd"] = round(float(a[:, 0].std()), 4)
                out.append(r)
    return out
