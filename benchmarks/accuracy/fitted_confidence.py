"""Does a fitted system's confidence rank its verdicts, and better than the zero-training confidence would?

    python benchmarks/accuracy/fitted_confidence.py --counterfactual-k 0 --no-learned-heads [--cache DIR]

The product's fit (`masprism-batch fit`: fit/system.py) 5-fold within each dev system x FOLD_SEEDS, every fit
given the zero-training confidence's calibration fitted on the *other* systems (leave-one-system-out, as a new
system's team gets fallback.json). On each test fold, against a right step (Who&When top-1, TRAIL any labelled
span), within the fold (pooling folds would score how the folds' intercepts differ):
- "fitted": the confidence the fit ships (fit/verdict_confidence.py: calibrated on the fit's internal folds);
- "zero-training, same verdicts": the zero-training confidence of the same blamed step (what the log would get
  before a fit), against the same hits;
- "zero-training rule, own verdicts": the zero-training verdict's own confidence against its own hits (the
  figure a system gets before any fit).
Per system: the AUROC (each fold's weighted by its pairs of one right and one wrong verdict, averaged), the
top-quarter lift (the hit rate of each fold's most confident quarter, pooled, over the overall hit rate), a 95%
bootstrap interval of the AUROC (logs resampled within their folds, 1,000 resamples, seed 0) and of the
fitted-minus-zero-training difference on the same verdicts. All held out: no figure reads a label of the logs it
scores. Writes tidy rows to benchmarks/results/fitted_confidence.csv; bench_accuracy.py calls `measure` for
accuracy.csv and docs/results.md.
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
    KFOLD,
    Case,
    _kfold_scores,
    _unlabelled,
    add_cache_args,
    cached_cases,
    fit_cases,
    fitted_rows,
)
from benchmarks.rows import write_rows  # noqa: E402
from masprism_batch.fit import fitting as ft
from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict import correction as vcorr

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("fitted_confidence")
KINDS = ("fitted", "zero-training, same verdicts", "zero-training rule, own verdicts")
BOOT = 1000


def loso_calibrations(cases: list[Case], rule: str) -> dict[str, dict]:
    """Per system, the zero-training confidence's calibration fitted on the other systems' verdicts (as shipped:
    equal weights, calibrate.fit_evidence)."""
    fc = [c for c in fit_cases(cases, rule) if c.ranked]
    sys_of = {c.trace.trace_id: c.system for c in cases}
    out = {}
    for held in sorted({c.system for c in cases}):
        train = [c for c in fc if sys_of[c.trace.trace_id] != held]
        out[held] = calibrate.fit_evidence([cf.vector(vcorr.evidence(c, c.ranked)) for c in train],
                                           [ft.hit(c, c.ranked[0]) for c in train], cf.FEATURES)
    return out


def measure(cases: list[Case], rule: str, rule_agent: str, zero_cals: dict[str, dict], seeds=FOLD_SEEDS,
            on_rows=None):
    """(the fit's k-fold scores as accuracy_cases._kfold_scores returns them, {system: {kind: [fold, ...]}} with
    each fold a (confidences, hits) pair); `on_rows`: passed on to _kfold_scores (each seed's held-out rows)."""
    folds: dict[str, dict[str, list]] = {}

    def rows_of(system, train, test) -> dict:
        zc = zero_cals.get(system)
        rows = fitted_rows(train, test, system, rule, rule_agent, zc) if test and fit_cases(train) else {}
        gold = [c for c in fit_cases(test, rule) if c.trace.trace_id in rows]
        got = folds.setdefault(system, {k: [] for k in KINDS})
        steps = [rows[c.trace.trace_id]["pred_step"] for c in gold]
        hits = [ft.hit(c, s) for c, s in zip(gold, steps, strict=True)]
        got["fitted"].append(([rows[c.trace.trace_id]["confidence"] for c in gold], hits))
        got[KINDS[1]].append(([vconf.zero_training_confidence(c, s, zc) for c, s in zip(gold, steps, strict=True)],
                              hits))
        own = [c for c in gold if c.ranked]
        got[KINDS[2]].append(([vconf.zero_training_confidence(c, c.ranked[0], zc) for c in own],
                              [ft.hit(c, c.ranked[0]) for c in own]))
        return rows

    return _kfold_scores(cases, rows_of, 5, seeds, on_rows), folds


def fold_auroc(folds: list[tuple[list, list]]) -> float | None:
    """The folds' AUROCs averaged, each weighted by its pairs of one right and one wrong verdict."""
    got = [(a, sum(h) * (len(h) - sum(h))) for c, h in folds if (a := cf.auroc(c, h)) is not None]
    return float(np.average([a for a, _ in got], weights=[w for _, w in got])) if got else None


def fold_lift(folds: list[tuple[list, list]], fraction: float = 0.25) -> float | None:
    """Hit rate of each fold's most confident `fraction` (at least one verdict), pooled, over the overall rate."""
    top, every = [], []
    for c, h in folds:
        if not h:
            continue
        order = sorted(range(len(h)), key=lambda i: -c[i])
        top += [h[i] for i in order[: max(1, math.ceil(fraction * len(h)))]]
        every += list(h)
    rate = float(np.mean(every)) if every else 0.0
    return float(np.mean(top)) / rate if top and rate > 0 else None


def _resample(folds, rng):
    out = []
    for c, h in folds:
        idx = rng.integers(0, len(h), len(h)) if h else np.zeros(0, dtype=int)
        out.append(([c[i] for i in idx], [h[i] for i in idx]))
    return out


def intervals(per: dict[str, list], n: int = BOOT, seed: int = 0, kinds=KINDS) -> dict[str, tuple[float, float]]:
    """95% bootstrap intervals of each of `kinds`' AUROC and of the first minus the second (fitted minus
    zero-training, same verdicts): the logs resampled within their folds, the same draw for every kind of a
    resample (paired; the kinds' folds hold the same logs)."""
    rng = np.random.default_rng(seed)
    vals: dict[str, list[float]] = {k: [] for k in (*kinds, "difference")}
    for _ in range(n):
        state = rng.bit_generator.state
        got = {}
        for k in kinds:
            rng.bit_generator.state = state  # the same logs drawn for every kind
            got[k] = fold_auroc(_resample(per[k], rng))
        for k in kinds:
            if got[k] is not None:
                vals[k].append(got[k])
        if got[kinds[0]] is not None and got[kinds[1]] is not None:
            vals["difference"].append(got[kinds[0]] - got[kinds[1]])
    return {k: tuple(float(x) for x in np.percentile(v, [2.5, 97.5])) if v else (float("nan"),) * 2
            for k, v in vals.items()}


def summary(folds: dict[str, dict[str, list]], boot: int = BOOT) -> list[dict]:
    """Tidy rows: per system and kind, the AUROC with its interval, the top-quarter lift, logs and right ones."""
    rows = []
    for system in sorted(folds):
        per = folds[system]
        ci = intervals(per, boot)
        for k in KINDS:
            hits = [x for _, h in per[k] for x in h]
            rows.append({"system": system, "confidence": k, "protocol": f"{KFOLD}, held out",
                         "auroc": fold_auroc(per[k]), "ci_low": ci[k][0], "ci_high": ci[k][1],
                         "top_quarter_lift": fold_lift(per[k]), "hit_rate": float(np.mean(hits)) if hits else None,
                         "verdicts": len(hits), "right": int(sum(hits))})
        rows.append({"system": system, "confidence": "fitted minus zero-training, same verdicts",
                     "protocol": f"{KFOLD}, held out",
                     "auroc": _minus(rows[-3]["auroc"], rows[-2]["auroc"]), "ci_low": ci["difference"][0],
                     "ci_high": ci["difference"][1], "top_quarter_lift": _minus(rows[-3]["top_quarter_lift"],
                                                                               rows[-2]["top_quarter_lift"]),
                     "hit_rate": None, "verdicts": rows[-3]["verdicts"], "right": rows[-3]["right"]})
    return rows


def _minus(a, b):
    return a - b if a is not None and b is not None else None


def same_verdicts(cases: list[Case], old: Path, rule: str) -> list[str]:
    """The cached logs whose verdict (blamed step or agent) differs between ranker file `old` and the packaged
    rankers.json (logged: how many logs, how many confidences moved); [] when only confidences moved."""
    from masprism_batch.method import weights_dir
    from masprism_batch.verdict.rankfile import PACKAGED, RankerFile

    files = [RankerFile.read(old), RankerFile.read(weights_dir() / PACKAGED)]
    differ, moved, n = [], 0, 0
    for c in fit_cases(cases, rule) + _unlabelled(cases, rule):
        got = []
        for rf in files:
            sr = rf.for_trace(c.trace)
            got.append(sr.apply(c.trace, c.rows, c.ranked) if sr is not None else None)
        if got[0] is None or got[1] is None:
            continue
        n += 1
        (o1, _, a1, c1), (o2, _, a2, c2) = got
        if o1[0] != o2[0] or a1 != a2:
            differ.append(f"{c.trace.trace_id}: step {o1[0]} -> {o2[0]}, agent {a1} -> {a2}")
        moved += c1 != c2
    log.info("%d cached logs: %d verdicts differ, %d confidences moved", n, len(differ), moved)
    for d in differ:
        log.warning("verdict differs: %s", d)
    return differ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cache_args(ap)
    ap.add_argument("--rule", default=None, help="zero-training step rule (default: fallback.json's)")
    ap.add_argument("--agent-rule", default=None, help="zero-training agent rule (default: fallback.json's)")
    ap.add_argument("--seeds", type=int, default=len(FOLD_SEEDS))
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "fitted_confidence.csv"))
    ap.add_argument("--verdicts-against", default=None, metavar="OLD_RANKERS_JSON",
                    help="only check that the packaged rankers.json gives every cached log the verdict OLD gave it "
                         "(exit 1 naming the logs where a step or an agent differs)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from masprism_batch.verdict import rules

    fb = rules.read_fallback(None)
    rule, agent_rule = args.rule or fb.rule, args.agent_rule or fb.agent_rule
    cases, _ = cached_cases(args)
    if args.verdicts_against:
        sys.exit(1 if same_verdicts(cases, Path(args.verdicts_against), rule) else 0)
    _, folds = measure(cases, rule, agent_rule, loso_calibrations(cases, rule), FOLD_SEEDS[: args.seeds])
    stamp = {"date": dt.date.today().isoformat(), "hardware": f"{platform.machine()} CPU", "seeds": args.seeds}
    rows = summary(folds)
    for r in rows:
        r.update(stamp)
        for k, v in r.items():  # an AUROC without both outcomes, or an interval without one: empty
            r[k] = ("" if not math.isfinite(v) else round(v, 4)) if isinstance(v, float) else ("" if v is None else v)
        log.info("%-34s %-44s AUROC %s [%s, %s] lift %s", r["system"], r["confidence"], r["auroc"], r["ci_low"],
                 r["ci_high"], r["top_quarter_lift"])
    write_rows(Path(args.csv), rows)
    log.info("wrote %s", args.csv)


if __name__ == "__main__":
    main()
