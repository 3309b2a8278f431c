"""Step sets with a stated coverage (issue 59), measured held out on the dev signal cache.

    python benchmarks/accuracy/bench_stepset.py --work /tmp/masprism-accuracy --counterfactual-k 0 --no-learned-heads \
        [--write-dev] [--write-packaged] [--no-fitted]

- **Zero-training** (what a log of a system nobody fitted gets): the zero-training rule's reading order
  (fallback.json's rule, then the unranked steps by each tail of verdict/stepset.TAILS) and each nonconformity
  score (`rank`, `share`), calibrated **leave-one-system-out**: the scores of the other dev systems calibrate the
  sets of the fourth. The (score, tail) that ships is the one whose worst held-out miss of the 0.8 level over the
  systems is smallest (then the smallest mean set share): what travels across systems. `--write-dev` writes it,
  calibrated on every dev system, as the packaged `weights/stepset.json` a run applies.
- **Fitted** (`masprism-batch fit` on a system's own labels: fit/system.py, called here through
  accuracy_cases.system_fit): 5-fold within each system x 8 seeds; the fit on 4/5 calibrates the sets
  (fit/stepset_fit.py, cross-conformal on its internal folds) and the held-out fifth measures coverage.
- **Fitted on 10 or 20 labels** (stepset_draws.py): the learning curve's 20 draws of k labelled logs of a
  system, fitted by the product's fit and tested on the system's other logs: what a team's first fit gets.
- **From step 0**: the share of each log a reader needs to cover the same share of the held-out logs reading
  from the first step, the same conformal rule on the same splits (the baseline a set must beat).

`--write-packaged` refreshes the packaged rankers' step sets and confidence from the product's refit
(packaged_refresh.py). Rows (one measurement each) go to benchmarks/results/stepset.csv.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))
from benchmarks.accuracy.accuracy_cases import (
    FOLD_SEEDS,
    add_cache_args,
    cached_cases,
    fit_cases,
    gold_of,
    kfold_rows,
    system_fit,
)
from benchmarks.accuracy.packaged_refresh import write_packaged
from benchmarks.accuracy.stepset_draws import draw_rows, measured, step0_cal, verdict_steps
from benchmarks.rows import commit, write_rows
from masprism_batch.method import weights_dir
from masprism_batch.verdict import rules
from masprism_batch.verdict import stepset as ss
from masprism_batch.verdict.rankfile import SystemRanker

ROOT = Path(__file__).resolve().parents[2]
LEVELS = (0.5, 0.8, 0.9)
TARGET = 0.8
log = logging.getLogger("bench_stepset")


def zero_scores(cases, rule: str, score: str, tail: str, lead: str = "ranked") -> dict[str, list[tuple[float, int]]]:
    """{system: [(score, steps)]} of the zero-training verdicts' reading orders on the labelled logs."""
    out: dict[str, list] = {}
    for c in cases:
        gold = gold_of(c.trace)
        if not gold:
            continue
        n = len(c.trace.steps)
        ranked = rules.order(rule, c.rows, [int(k) for k in c.meta["ranking"]["ranked"]])
        order = ss.reading_order(ranked or [c.meta["attribution"]["pred_step"]], n, tail, c.rows, lead)
        out.setdefault(c.system, []).append((ss.score_of(order, gold, n, score), n))
    return out


def step0_scores(cases) -> dict[str, list[tuple[float, int]]]:
    out: dict[str, list] = {}
    for c in cases:
        gold = gold_of(c.trace)
        if gold:
            n = len(c.trace.steps)
            out.setdefault(c.system, []).append((ss.score_of(list(range(n)), gold, n, "share"), n))
    return out


def apply(cal, test: list[tuple[float, int]], level: float, score: str) -> tuple[float, float]:
    """(coverage, mean set share) on `test` of the conformal sets calibrated on `cal` (a list of scores, or a
    calibration dict with its pool)."""
    q = ss.quantile_of(cal if isinstance(cal, dict) else {"scores": cal}, level)
    hits = [s <= q + ss.EPS for s, _ in test]
    shares = [ss.size_of(q, n, score) / n for _, n in test]
    return float(np.mean(hits)), float(np.mean(shares))


def calibration(per: dict, score: str, tail: str, pool: str, leave_out: str | None = None, lead: str = "ranked") -> dict:
    """The calibration dict of `per`'s systems but `leave_out`: every score, and each system's as a group."""
    groups = {o: [s for s, _ in v] for o, v in sorted(per.items()) if o != leave_out}
    return {"score": score, "tail": tail, "lead": lead, "pool": pool,
            "scores": sorted(s for g in groups.values() for s in g), "groups": groups}


def zero_training_rows(cases, rule: str) -> tuple[list[dict], tuple[str, str, str, str]]:
    """Leave-one-system-out rows of every (score, tail, pool, lead), and the one that travels best: the smallest
    worst miss of the 0.8 level over the held-out systems (to 0.01: closer is noise on 18-78 logs), then the
    smallest mean set share."""
    rows, worst = [], {}
    base = step0_scores(cases)
    for score, tail, lead in [(sc, t, ld) for ld in ss.LEADS for t in ss.TAILS for sc in ss.SCORES]:
        per = zero_scores(cases, rule, score, tail, lead)
        for pool in ss.POOLS:
            misses, shares = [], []
            for system in sorted(per):
                cal = calibration(per, score, tail, pool, system, lead)
                for level in LEVELS:
                    cov, share = apply(cal, per[system], level, score)
                    _, b_share = apply(calibration(base, "share", "index", pool, system), base[system], level,
                                       "share")
                    row = _row("zero-training LOSO", system, level, score, tail, cov, share, b_share,
                               len(per[system]))
                    rows.append({**row, "pool": pool, "lead": lead})
                    if level == TARGET:
                        misses.append(abs(cov - level))
                        shares.append(share)
            worst[(score, tail, pool, lead)] = (round(max(misses), 2), float(np.mean(shares)))
    best = min(worst, key=lambda k: worst[k])
    for k in sorted(worst, key=lambda k: worst[k]):
        log.info("zero-training LOSO %s: worst |coverage - 0.8| %.2f, mean set share %.3f", k, *worst[k])
    log.info("ships %s", best)
    return rows, best


def fitted_rows(cases, rule: str, rule_agent: str, seeds=FOLD_SEEDS) -> list[dict]:
    """5-fold x seeds within each system: the fit's own calibration applied to its held-out fifth."""
    per: dict[tuple, list] = {}

    def rows_of(system, train, test):
        if not fit_cases(train, rule) or not test:
            return {}
        entry = system_fit(train, system, rule, rule_agent).entry
        sr = SystemRanker(entry, "")
        base = step0_cal(train)
        return {c.trace.trace_id: {"system": system, "case": c, "order": verdict_steps(sr, c),
                                   "cal": entry.get("stepset"), "step0_cal": base} for c in fit_cases(test, rule)}

    for seed in seeds:
        got = kfold_rows(cases, rows_of, 5, seed)
        for r in got.values():
            for level in LEVELS:
                per.setdefault((r["system"], level, seed), []).append(
                    measured(r["order"], r["case"], r["cal"], level, ss.quantile(r["step0_cal"], level)))
    rows = []
    for system in sorted({k[0] for k in per}):
        for level in LEVELS:
            runs = [per[(system, level, s)] for s in seeds if (system, level, s) in per]
            cov = [np.mean([h for h, _, _ in r]) for r in runs]
            share = [np.mean([x for _, x, _ in r]) for r in runs]
            base = [np.mean([b for _, _, b in r]) for r in runs]
            row = _row(f"fitted 5-fold x{len(seeds)} seeds", system, level, "", "", float(np.mean(cov)),
                       float(np.mean(share)), float(np.mean(base)), len(runs[0]))
            row["coverage_sd"] = round(float(np.std(cov)), 4)
            rows.append(row)
    return rows


def _key(r: dict) -> tuple:
    return r["score"], r["tail"], r["pool"], r["lead"]


def _row(protocol, system, level, score, tail, cov, share, base, n) -> dict:
    return {"protocol": protocol, "system": system, "coverage_level": level, "score": score, "tail": tail, "pool": "",
            "lead": "",
            "coverage": round(cov, 4), "coverage_sd": "", "mean_set_share": round(share, 4),
            "step0_share": round(base, 4), "logs": n, "set_seconds": "", "attribute_seconds": "", "cost_share": "",
            "commit": commit(), "date": dt.date.today().isoformat()}


def cost_row(cases, rule: str, repeats: int = 20) -> dict:
    """The set's CPU cost per log (the run's own call, verdict/stepset.for_verdict on the zero-training verdict
    and the log's rows), against the log's recorded attribute seconds (pass 1 + pass 2, the cache's): issue 59's
    "attribute's CPU cost rises <= 5%"."""
    import time
    from types import SimpleNamespace

    work = []
    for c in cases:
        ranked = rules.order(rule, c.rows, [int(k) for k in c.meta["ranking"]["ranked"]])
        work.append((c.trace, c.rows, SimpleNamespace(order=ranked or [c.meta["attribution"]["pred_step"]])))
    t0 = time.process_time()
    for _ in range(repeats):
        for t, rows, v in work:
            ss.for_verdict(t, rows, v, None, TARGET)
    per = (time.process_time() - t0) / (repeats * max(len(work), 1))
    run = float(np.mean([c.meta["attribution"]["seconds_pass1"] + c.meta["attribution"]["seconds_pass2"]
                         for c in cases]))
    row = _row("cost: set per log (CPU s)", "all", TARGET, "", "", 0.0, 0.0, 0.0, len(work))
    row.update(coverage="", mean_set_share="", step0_share="", set_seconds=per, attribute_seconds=run,
               cost_share=per / run)
    log.info("set: %.1f us CPU per log against %.1f s of attribute per log (%.5f%%)", per * 1e6, run, 100 * per / run)
    return row


def write_dev(cases, rule: str, choice: tuple[str, str, str, str], loso: list[dict], path: Path) -> None:
    """The packaged zero-training calibration: every dev system's (zero-training, so held-out) scores, each
    system a group, pooled as `choice` says."""
    score, tail, pool, lead = choice
    per = zero_scores(cases, rule, score, tail, lead)
    held = {f"{r['system']}|{r['coverage_level']}": {"coverage": r["coverage"], "mean_set_share": r["mean_set_share"]}
            for r in loso if _key(r) == choice}
    d = {"format": ss.FORMAT, "version": 1, "source": "dev", "rule": rule,
         **calibration(per, score, tail, pool, None, lead),
         "systems": {k: len(v) for k, v in sorted(per.items())},
         "heldout_loso": held, "date": dt.date.today().isoformat(), "commit": commit(),
         "written_by": "benchmarks/accuracy/bench_stepset.py --write-dev"}
    path.write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
    log.info("wrote %s: %d scores, %s", path, len(d["scores"]), d["systems"])
    ss._dev.cache_clear()  # this process's later fits read the file just written


def markdown(rows: list[dict], choice: tuple[str, str, str]) -> str:
    """The tables docs/accuracy.md quotes: coverage and mean set share per system and level, beside the share
    reading from step 0 needs for the same coverage."""
    out = ["| protocol | system (labelled logs) | coverage at 0.5 / 0.8 / 0.9 | mean set share at 0.8 | from step 0 at 0.8 |",
           "|---|---|---|---|---|"]
    keep = [r for r in rows if r["coverage"] != "" and (r["protocol"].startswith("fitted")
                                                        or _key(r) == choice)]
    for (proto, system) in sorted({(r["protocol"], r["system"]) for r in keep}, key=lambda k: (k[0][0] != "z", k)):
        by = {r["coverage_level"]: r for r in keep if (r["protocol"], r["system"]) == (proto, system)}
        cov = " / ".join(f"{by[lv]['coverage']:.3f}" + (f" ± {by[lv]['coverage_sd']:.3f}" if by[lv]["coverage_sd"] != ""
                                                         else "") for lv in LEVELS if lv in by)
        t = by.get(TARGET)
        out.append(f"| {proto} | {system} ({t['logs']}) | {cov} | {t['mean_set_share']:.3f} | {t['step0_share']:.3f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cache_args(ap)
    ap.add_argument("--write-dev", action="store_true", help="write the packaged weights/stepset.json")
    ap.add_argument("--write-packaged", action="store_true",
                    help="refresh each packaged ranker's step-set calibration and confidence in weights/rankers.json "
                         "from the product's refit, its verdicts unchanged (needs the full cache the rankers were "
                         "fitted on)")
    ap.add_argument("--no-fitted", action="store_true", help="only the zero-training rows (seconds, not minutes)")
    ap.add_argument("--seeds", type=int, default=len(FOLD_SEEDS))
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "stepset.csv"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("masprism_batch.fit.system").setLevel(logging.WARNING)  # each fold's notes: thousands of lines
    cases, _ = cached_cases(args)
    fb = rules.read_fallback(None)
    counts = {s: sum(1 for c in cases if c.system == s and gold_of(c.trace)) for s in sorted({c.system for c in cases})}
    log.info("%d cached logs, labelled per system: %s", len(cases), counts)
    rows, choice = zero_training_rows(cases, fb.rule)
    if args.write_dev:
        write_dev(cases, fb.rule, choice, rows, weights_dir() / ss.DEV_FILE)
    if args.write_packaged:
        write_packaged(cases, fb, weights_dir() / "rankers.json")  # benchmarks/accuracy/packaged_refresh.py
    rows.append(cost_row(cases, fb.rule))
    if not args.no_fitted:
        rows += fitted_rows(cases, fb.rule, fb.agent_rule, tuple(range(args.seeds)))
        rows += draw_rows(cases, fb.rule, fb.agent_rule, row=lambda p, s, lv, cov, share, base, n: _row(
            p, s, lv, "", "", cov, share, base, n))  # stepset_draws.py: a fit on 10 or 20 labels
    write_rows(Path(args.csv), rows)
    print(markdown(rows, choice))
    for r in rows:
        if r["coverage_level"] == TARGET and r["coverage"] != "" and (not r["tail"] or _key(r) == choice):
            print(f"{r['protocol']:28s} {r['system']:36s} coverage {r['coverage']:.3f} share {r['mean_set_share']:.3f}"
                  f" (from step 0 {r['step0_share']:.3f}, {r['logs']} logs)")


if __name__ == "__main__":
    main()
