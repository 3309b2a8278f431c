"""What else might rank a fitted system's verdicts (issue 48)? Three probes beside the shipped confidence, each
read only from what a fit may know (its training logs) or what a run may read (the log), never from the test
logs' labels:

    python benchmarks/accuracy/confidence_probes.py --counterfactual-k 0 --no-learned-heads \
        [--cache DIR] [--second-cache DIR --second-model gemma3-270m]

- "refit vote": the share of REFITS rankers, each refitted on a random SUBSAMPLE of the training logs with the
  shipped ranker's own offset and strength, that blame the same step (the verdict's stability; only where the
  fit ships a ranker);
- "step model": a pointwise logistic over the training logs' steps (is this step labelled?) on the ranker's own
  features and the rule's order, L2 STEP_L2 per training log; its logit of the blamed step minus the log's
  log-sum-exp (how much of the log's error mass that step holds). A log's listwise ranker spreads its target over
  TRAIL's several labelled spans; this one asks the question a TRAIL hit asks (is the blamed span one of them);
- "second reader": another model's zero-training score of the same blamed step (its own signal cache, its
  leave-one-system-out calibration): whether a second reading agrees.

The protocol is fitted_confidence.py's: the product's fit 5-fold within each system x fold seeds, AUROC within
each test fold averaged by right-wrong pairs. Each probe is scored alone and added to the shipped confidence
(both standardised within the test fold, which reads no label, and summed), on the verdicts it exists for, beside
the shipped confidence on those same verdicts, with a 95% bootstrap interval of the difference (logs resampled
within folds, paired). Writes tidy rows to benchmarks/results/confidence_probes.csv.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import math
import platform
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy.accuracy_cases import (
    FOLD_SEEDS,
    add_cache_args,
    cached_cases,
    fit_cases,
    kfold_rows,
    load_cases,
)
from benchmarks.accuracy.fitted_confidence import BOOT, fold_auroc, intervals, loso_calibrations
from benchmarks.rows import write_rows  # noqa: E402
from masprism_batch.fit import fitting as ft
from masprism_batch.fit import system as fs
from masprism_batch.method import calibrate
from masprism_batch.verdict import case as vcase
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict.correction import evidence
from masprism_batch.verdict.rankfile import SystemRanker

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("confidence_probes")
PROBES = ("refit vote", "step model", "second reader")
REFITS, SUBSAMPLE = 10, 0.8  # without replacement: a repeated log would see its own label in the prior features
STEP_L2 = 1.0  # per training log, on standardised features (chosen a priori, not tuned)


def _step_x(c: vcase.LogCase, priors: vcase.Priors, loo: bool) -> np.ndarray:
    return np.c_[vcase.design(c, priors, loo=loo), vcase.rule_offset(len(c.trace.steps), c.ranked, 1.0)]


def step_model(train: list[vcase.LogCase], test: list[vcase.LogCase], tops: list[int]) -> list[float]:
    """Each test verdict's share (log) of its log's error mass under a pointwise model fitted on `train`'s steps."""
    priors = vcase.Priors.count(train)
    X = np.concatenate([_step_x(c, priors, True) for c in train])
    y = np.concatenate([[float(i in c.gold) for i in range(len(c.trace.steps))] for c in train])
    mu, sd = X.mean(0), X.std(0)
    sd = np.where(sd > 1e-9, sd, 1.0)
    w, b = calibrate.logistic((X - mu) / sd, y, 0.0, STEP_L2 * len(train), pull_b=1e-6)  # the intercept ~free
    out = []
    for c, t in zip(test, tops, strict=True):
        s = (_step_x(c, priors, False) - mu) / sd @ w + b
        out.append(float(s[t] - (s.max() + np.log(np.exp(s - s.max()).sum()))))
    return out


def refit_vote(train: list[vcase.LogCase], entry: dict, test: list[vcase.LogCase], tops: list[int],
               rng: np.random.Generator) -> list[float] | None:
    """The share of REFITS subsample refits of the shipped ranker that blame each test verdict's step."""
    if entry.get("verdict") != "ranker":
        return None
    fits = [ft.fit_correction([train[i] for i in rng.choice(len(train), max(2, round(SUBSAMPLE * len(train))),
                                                              replace=False)], entry["l2"], entry["offset"])
            for _ in range(REFITS)]
    return [float(np.mean([ft.top_of(m.probs(c)) == t for m in fits])) for c, t in zip(test, tops, strict=True)]


def measure(cases, rule: str, rule_agent: str, zero_cals: dict, seeds=FOLD_SEEDS, second=None,
            second_cals=None) -> dict:
    """{system: [fold, ...]}, each fold a list of verdict dicts: hit, shipped and each probe it has; the folds
    are accuracy_cases.kfold_rows' (those of fitted_confidence.py)."""
    second_fc = {c.trace.trace_id: c for c in fit_cases(second, rule)} if second else {}
    out: dict[str, list] = {}
    for seed in seeds:
        fold_no: dict[str, int] = {}

        def rows_of(system, train, test, seed=seed, fold_no=fold_no) -> dict:
            f = fold_no[system] = fold_no.get(system, -1) + 1  # kfold_rows calls each system's folds in order
            train, test = fit_cases(train, rule), fit_cases(test, rule)
            if train and test:
                out.setdefault(system, []).append(_fold(train, test, system, rule, rule_agent, zero_cals,
                                                        np.random.default_rng([seed, f]), second_fc, second_cals))
            return {}

        kfold_rows(cases, rows_of, 5, seed)
    return out


def _fold(train, test, system, rule, rule_agent, zero_cals, rng, second_fc, second_cals) -> list[dict]:
    """One test fold's verdicts under the product's fit on `train`, with each probe it has."""
    entry = fs.fit_system(train, system, rule=rule, rule_agent=rule_agent, zero_cal=zero_cals.get(system)).entry
    sr = SystemRanker(entry, "")
    got = [sr.apply(c.trace, c.rows, c.ranked) for c in test]
    tops = [g[0][0] for g in got]
    rows = [{"hit": ft.hit(c, t), "shipped": g[3]} for c, t, g in zip(test, tops, got, strict=True)]
    votes = refit_vote(train, entry, test, tops, rng)
    steps = step_model(train, test, tops)
    for i, (c, t) in enumerate(zip(test, tops, strict=True)):
        rows[i]["step model"] = steps[i]
        if votes is not None:
            rows[i]["refit vote"] = votes[i]
        two = second_fc.get(c.trace.trace_id)
        if two is not None and len(two.trace.steps) == len(c.trace.steps):
            ev = evidence(two, [t] + [k for k in two.ranked if k != t])
            rows[i]["second reader"] = vconf.zero_training_score((second_cals or {}).get(system), ev)
    return rows


def _z(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 1e-12 else np.zeros(len(x))


def views(folds: list[list[dict]], probe: str) -> dict[str, list[tuple[list, list]]]:
    """(confidences, hits) per fold of the probe alone, the probe added to the shipped confidence, and the shipped
    confidence, all on the verdicts the probe exists for."""
    out: dict[str, list] = {"alone": [], "added": [], "shipped": []}
    for rows in folds:
        rows = [r for r in rows if probe in r and r["shipped"] is not None]
        if not rows:
            continue
        h = [r["hit"] for r in rows]
        p = np.array([r[probe] for r in rows], dtype=np.float64)
        s = np.array([r["shipped"] for r in rows], dtype=np.float64)
        out["alone"].append((p.tolist(), h))
        out["added"].append(((_z(p) + _z(s)).tolist(), h))
        out["shipped"].append((s.tolist(), h))
    return out


def summary(got: dict, boot: int = BOOT) -> list[dict]:
    rows = []
    for system in sorted(got):
        for probe in PROBES:
            v = views(got[system], probe)
            if not v["alone"]:
                continue
            hits = [x for _, h in v["alone"] for x in h]
            lo, hi = intervals(v, boot, kinds=("added", "shipped"))["difference"]
            alone, added, shipped = (fold_auroc(v[k]) for k in ("alone", "added", "shipped"))
            rows.append({"system": system, "probe": probe, "auroc_alone": alone, "auroc_added": added,
                         "auroc_shipped_same_verdicts": shipped,
                         "added_minus_shipped": added - shipped if added is not None and shipped is not None
                         else None, "ci_low": lo, "ci_high": hi, "folds": len(v["alone"]), "verdicts": len(hits),
                         "right": int(sum(hits))})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cache_args(ap)
    ap.add_argument("--seeds", type=int, default=len(FOLD_SEEDS))
    ap.add_argument("--second-cache", default=None, help="another model's signal cache (the second reader)")
    ap.add_argument("--second-model", default="gemma3-270m", help="the second reader's name in the rows")
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "confidence_probes.csv"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from masprism_batch.verdict import rules

    fb = rules.read_fallback(None)
    cases, _ = cached_cases(args)
    second = load_cases(Path(args.data), Path(args.second_cache)) if args.second_cache else None
    got = measure(cases, fb.rule, fb.agent_rule, loso_calibrations(cases, fb.rule), FOLD_SEEDS[: args.seeds],
                  second, loso_calibrations(second, fb.rule) if second else None)
    stamp = {"date": dt.date.today().isoformat(), "hardware": f"{platform.machine()} CPU", "seeds": args.seeds,
             "model": args.model, "second_model": args.second_model if second else ""}
    rows = summary(got)
    for r in rows:
        r.update(stamp)
        for k, v in r.items():
            r[k] = ("" if not math.isfinite(v) else round(v, 4)) if isinstance(v, float) else ("" if v is None else v)
        log.info("%-34s %-14s alone %s added %s shipped %s [%s, %s]", r["system"], r["probe"], r["auroc_alone"],
                 r["auroc_added"], r["auroc_shipped_same_verdicts"], r["ci_low"], r["ci_high"])
    write_rows(Path(args.csv), rows)
    log.info("wrote %s", args.csv)


if __name__ == "__main__":
    main()
