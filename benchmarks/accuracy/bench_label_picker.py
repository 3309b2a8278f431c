"""The label picker against random draws (issue 59 item 3): does labelling the logs `masprism-batch pick` chooses
make the next `fit` better than labelling as many random logs?

    python benchmarks/accuracy/bench_label_picker.py --work /tmp/masprism-accuracy --counterfactual-k 0 \
        --no-learned-heads [--draws 20]

For each dev system in the signal cache and each draw: a random third of its labelled logs (at least 5) is the
test set, the rest the pool. From the pool, k = 10 and 20 logs are labelled three ways: at random (as
bench_learning_curve.py draws them), by the picker (masprism_batch/analytics/pick.py, the function the command
calls) and by its first design (least certain first: pick_uncertain_first), both reading the pool's zero-training
verdicts as a run writes them (confidence, step set, blamed step and agent; near-duplicates by task text and
length). Each choice is fitted by the product's fit (fit/system.py) and
scored on the same test logs (step top-1 / P@1: fit/fitting.hit), so picker minus random is paired per draw. Held
out: the test logs are in neither the pool nor any fit. Tidy rows to benchmarks/results/label_picker.csv.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import platform
import sys
import time
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy.accuracy_cases import add_cache_args, cached_cases, fit_cases
from benchmarks.rows import write_rows
from masprism_batch.analytics.pick import Candidate, pick, pick_uncertain_first
from masprism_batch.fit import fitting as ft
from masprism_batch.fit import system as fs
from masprism_batch.method import masprism as mp
from masprism_batch.verdict import rules as zr
from masprism_batch.verdict import stepset
from masprism_batch.verdict.confidence import rule_confidence
from masprism_batch.verdict.rankfile import SystemRanker

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench_label_picker")
KS = (10, 20)
DIVERSITY = "uncertain first"  # the first design beside it (analytics/pick.pick_uncertain_first)
COVERAGE = 0.8


def candidate(c, fallback: zr.Fallback) -> Candidate:
    """The picker's view of one log: its zero-training verdict as `attribute` writes it (no label read)."""
    t, order = c.trace, list(c.ranked)
    top = order[0] if order else 0
    conf = rule_confidence(t, c.rows, mp.Ranking(order, {}, {}, []), fallback.calibration)
    s = stepset.for_verdict(t, c.rows, SimpleNamespace(order=order or [top]), None, COVERAGE)
    return Candidate(t.trace_id, "x", len(t.steps), top, zr.agent_verdict(fallback.agent_rule, t, c.rows, order or [top]),
                     conf, s.share if s is not None else None, (hash(t.question or ""), len(t.steps)))


def score(train, test, system: str, fallback: zr.Fallback) -> float:
    """Step accuracy on `test` of the fit on `train`, applied as `--ranker` applies it."""
    f = fs.fit_system(train, system, rule=fallback.rule, rule_agent=fallback.agent_rule,
                      zero_cal=fallback.calibration)
    sr = SystemRanker(f.entry, "")
    return float(np.mean([ft.hit(c, sr.apply(c.trace, c.rows, c.ranked)[0][0]) for c in test]))


def splits(fc: list, system: str, n_draws: int):
    """(pool, test) per draw: a random third of the logs (at least 5) to test on, seeded by the system only."""
    rng = np.random.default_rng(zlib.crc32(f"picker|{system}".encode()))
    n_test = max(5, len(fc) // 3)
    for _ in range(n_draws):
        idx = rng.permutation(len(fc))
        yield [fc[i] for i in idx[n_test:]], [fc[i] for i in idx[:n_test]], rng


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cache_args(ap)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "label_picker.csv"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cases, _ = cached_cases(args)
    fallback = zr.read_fallback(None)
    rows, t0 = [], time.process_time()
    date, machine = dt.date.today().isoformat(), f"{platform.machine()} CPU, 2 cores shared"
    for system in sorted({c.system for c in cases}):
        fc = fit_cases([c for c in cases if c.system == system], fallback.rule)
        ks = [k for k in KS if len(fc) - max(5, len(fc) // 3) >= k + 5]  # a pool with k + 5 logs at least to pick from
        if not ks:
            log.info("%s: %d labelled logs cached, too few for k=%d from a pool plus a test set: skipped", system,
                     len(fc), min(KS))
            continue
        by_id = {c.trace.trace_id: c for c in fc}
        for d, (pool, test, rng) in enumerate(splits(fc, system, args.draws)):
            cands = [candidate(c, fallback) for c in pool]
            for k in ks:
                picked = [by_id[p.trace_id] for p in pick(cands, k)]
                spread = [by_id[p.trace_id] for p in pick_uncertain_first(cands, k)]
                drawn = [pool[i] for i in rng.permutation(len(pool))[:k]]
                for method, train in (("picker", picked), (DIVERSITY, spread), ("random", drawn)):
                    rows.append({"system": system, "k": k, "draw": d, "n_pool": len(pool), "n_test": len(test),
                                 "method": method, "metric": "step", "value": round(score(train, test, system,
                                                                                          fallback), 4),
                                 "date": date, "machine": machine})
        log.info("%s done (%.0f s CPU)", system, time.process_time() - t0)
    if not rows:
        raise SystemExit("no system of the cache has enough labelled logs yet: nothing measured")
    write_rows(Path(args.csv), rows)
    for system in sorted({r["system"] for r in rows}):
        for k in sorted({r["k"] for r in rows if r["system"] == system}):
            base = [x["value"] for x in rows if (x["system"], x["k"], x["method"]) == (system, k, "random")]
            for m in ("picker", DIVERSITY):
                diff = np.array([x["value"] for x in rows if (x["system"], x["k"], x["method"]) == (system, k, m)]) - base
                se = np.std(diff, ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else float("nan")
                pool = next(x["n_pool"] for x in rows if (x["system"], x["k"]) == (system, k))
                print(f"{system} k={k} (pool {pool}): {m} - random {diff.mean():+.3f} "  # noqa: T201
                      f"± {se:.3f} (SE, {len(diff)} draws; random {np.mean(base):.3f})")


if __name__ == "__main__":
    main()
