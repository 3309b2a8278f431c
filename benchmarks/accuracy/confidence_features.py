"""Which evidence ranks a zero-training verdict's correctness within each dev system, and how sure each figure is.

    python benchmarks/accuracy/confidence_features.py --counterfactual-k 0 --no-learned-heads [--cache DIR]

For the zero-training verdict (rule `faithful`) of every labelled cached log, the AUROC against a right step
(Who&When top-1, TRAIL P@1) within each system of:
- each shipped evidence feature (method/confidence.py), in the direction fixed a priori (confidence.SIGNS);
- candidate features that were considered and not shipped (agreement of pass 1 alone or of the `earliest` rule
  with the verdict, the blamed step's relative position, symptom / failure-word density, fewer candidates, the
  blamed step's own NLL against its log's (the paper's unsurprising root cause), fewer symptoms, a shorter
  blamed step, and the label-free batch consensus (how many of the system's other verdicts name the same step); on a
  cache extracted with --counterfactual-k > 0 also the blamed step's counterfactual effect, z-scored in its log);
- the shipped confidence, calibrated leave-one-system-out (the figure of docs/results.md), with a 95% bootstrap
  interval over the system's logs (2,000 resamples, seed 0), and its mean beside the system's hit rate;
- whole feature sets (the shipped six, with the two latest leads added or swapped in), each with equal weights
  and the other systems' scales, and the set chosen leave-one-system-out among them;
- whether choosing features could do better: an equal-weight sum of up to three features (shipped or
  considered) chosen leave-one-system-out (best worst-case AUROC over the other systems, each of them scored
  with the remaining ones' scales), and the ceiling: the subset chosen on all four systems at once (in-sample,
  an upper bound of what selection among these features can give, not a protocol).
A feature is portable only if it ranks every system the same way; one that helps one system and inverts another
would be tuning on the dev systems. Writes tidy rows to benchmarks/results/confidence_features.csv.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import logging
import platform
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy.accuracy_cases import add_cache_args, cached_cases, fit_cases
from benchmarks.rows import write_rows
from masprism_batch.fit import fitting as ft
from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict import case as vcase
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict import correction as vcorr
from masprism_batch.verdict import rules as zr

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("confidence_features")
SHIPPED = "confidence (shipped, LOSO-calibrated)"


def candidate_features(c, f: vcase.LogCase, with_cf: bool = False) -> dict[str, float]:
    """Features considered beside the shipped ones, each signed so that larger should mean more confident."""
    top = f.ranked[0]
    cands = [int(x) for x in c.arr["candidates"]]
    h = {r["step"]: r["h_score"] or 0.0 for r in c.rows}
    p1 = sorted(cands, key=lambda k: (-h[k], k))
    earliest = zr.order("earliest", c.rows, [int(k) for k in c.meta["ranking"]["ranked"]])
    n = len(f.trace.steps)
    cfz = {}
    if with_cf:  # a cache extracted with --counterfactual-k > 0: the blamed step's effect, z-scored within the log
        eff = {r["step"]: r.get("cf_effect") for r in c.rows}
        vals = [v for v in eff.values() if v is not None and np.isfinite(v)]
        e = eff.get(top)  # (-1 when it was not among the first k pass-1 candidates replayed)
        ok = e is not None and np.isfinite(e) and len(vals) > 1
        cfz = {"counterfactual effect of the blamed step (z)": (e - np.mean(vals)) / (np.std(vals) + 1e-9) if ok
               else -1.0}
    nll = cf.step_nll(c.rows)
    sd = float(np.nanstd(nll))
    nll_z = (nll[top] - float(np.nanmean(nll))) / sd if sd > 1e-9 and np.isfinite(nll[top]) else 0.0
    n_symptoms = sum(bool(r.get("is_symptom")) for r in c.rows)
    tokens = {r["step"]: r.get("tokens_pass1") or 0 for r in c.rows}
    return {**cfz, "agrees with pass 1 alone": float(bool(p1) and p1[0] == top),
            SHORT: -float(np.log1p(tokens.get(top, 0))), QUIET: -nll_z, FEW: -float(np.log1p(n_symptoms)),
            "agrees with rule earliest": float(earliest[0] == top),
            "earlier blamed step (-relative position)": -top / max(n - 1, 1),
            "symptom density": n_symptoms / n,
            "failure-word density": sum(bool(r.get("has_failure_word")) for r in c.rows) / n,
            "fewer candidates": -float(len(cands))}


def subset_auroc(per: dict, sub: tuple, train: list[str], test: str) -> float:
    """AUROC within `test` of the equal-weight sum of the signed features `sub`, each scaled by its spread
    over the `train` systems (as calibrate.fit_evidence's equal weights)."""
    X = np.array([[r[f] for f in sub] for s in train for r, _ in per[s]])
    sd = np.where(X.std(0) > 1e-9, X.std(0), 1.0)
    return cf.auroc([float(np.dot([r[f] for f in sub], 1 / sd)) for r, _ in per[test]], [h for _, h in per[test]])


def worst_auroc(per: dict, sub: tuple, within: list[str]) -> float:
    """The lowest AUROC over the systems of `within`, each scored with the scales of the others of `within`."""
    aucs = [subset_auroc(per, sub, [u for u in within if u != t], t) for t in within]
    return min((a for a in aucs if a is not None), default=0.5)  # None: a system without both outcomes


def selection_rows(per: dict, max_size: int = 3) -> list[dict]:
    """The feature subset chosen leave-one-system-out, and the in-sample ceiling, with their AUROC per system."""
    systems = sorted(per)
    names = list(per[systems[0]][0][0])
    subs = [c for k in range(1, max_size + 1) for c in itertools.combinations(names, k)]

    rows = []
    for s in systems:
        others = [t for t in systems if t != s]
        sub = max(subs, key=lambda c: worst_auroc(per, c, others))
        rows.append({"system": s, "feature": "subset chosen leave-one-system-out: " + " + ".join(sub),
                     "kind": "selection, held out", "auroc": subset_auroc(per, sub, others, s)})
    best = max(subs, key=lambda c: worst_auroc(per, c, systems))
    for s in systems:
        rows.append({"system": s, "feature": "ceiling, subset chosen on all systems: " + " + ".join(best),
                     "kind": "selection, in-sample", "auroc": subset_auroc(per, best, [t for t in systems if t != s],
                                                                           s)})
    return rows


QUIET, FEW = "unsurprising blamed step (-NLL z in its log)", "fewer symptoms (-log count)"
SHORT = "shorter blamed step (-log pass-1 tokens)"
CONSENSUS = "batch consensus (share of the system's other verdicts at the same step)"


def add_consensus(per: dict) -> None:
    """Label-free: the share of the other logs of the same system whose verdict names the same step index
    (a team's nightly batch could compute it; it is the unsupervised cousin of the label prior)."""
    for v in per.values():
        tops = [r[4] for r in v]
        for i, r in enumerate(v):
            r[1][CONSENSUS] = (sum(t == tops[i] for t in tops) - 1) / max(len(tops) - 1, 1)
# the shipped six with the two 2026-11-27 leads: sets compared as a whole (equal weights, LOSO scales)
VARIANTS = {"shipped six": cf.FEATURES,
            "six + unsurprising blamed step + fewer symptoms": (*cf.FEATURES, QUIET, FEW),
            "six, nll_contrast -> unsurprising blamed step": (*(f for f in cf.FEATURES if f != "nll_contrast"), QUIET),
            "six, nll_contrast -> both": (*(f for f in cf.FEATURES if f != "nll_contrast"), QUIET, FEW),
            "six + batch consensus": (*cf.FEATURES, CONSENSUS),
            "six + batch consensus + unsurprising blamed step + fewer symptoms": (*cf.FEATURES, CONSENSUS, QUIET, FEW)}


def variant_rows(per: dict) -> list[dict]:
    """Each feature set of VARIANTS scored on every system with the other systems' scales (equal weights, as
    what ships), and the set chosen leave-one-system-out: best on its worst other system, each of those scored
    with the scales of the remaining ones."""
    systems = sorted(per)
    rows = [{"system": s, "feature": f"feature set: {name}", "kind": "feature set, held out",
             "auroc": subset_auroc(per, sub, [t for t in systems if t != s], s)}
            for name, sub in VARIANTS.items() for s in systems]
    for s in systems:
        others = [t for t in systems if t != s]
        name = max(VARIANTS, key=lambda k: worst_auroc(per, VARIANTS[k], others))
        rows.append({"system": s, "feature": f"feature set chosen leave-one-system-out: {name}",
                     "kind": "selection, held out", "auroc": subset_auroc(per, VARIANTS[name], others, s)})
    return rows


def bootstrap(conf, hits, n=2000, seed=0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n):
        idx = rng.integers(0, len(conf), len(conf))
        a = cf.auroc([conf[i] for i in idx], [hits[i] for i in idx])
        if a is not None:
            vals.append(a)
    if not vals:  # a system without both outcomes (a small cache): no AUROC to bound
        return float("nan"), float("nan")
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cache_args(ap)
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "confidence_features.csv"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cases, _ = cached_cases(args)
    by_id = {c.trace.trace_id: c for c in cases}
    per: dict[str, list] = {}
    with_cf = any(r.get("cf_effect") is not None for c in cases for r in c.rows)
    for f in fit_cases(cases, "faithful"):
        if not f.ranked:
            continue
        c = by_id[f.trace.trace_id]
        feats = vcorr.evidence(f, f.ranked)
        per.setdefault(c.system, []).append((feats, candidate_features(c, f, with_cf), ft.hit(f, f.ranked[0]),
                                             len(f.trace.steps), f.ranked[0]))
    add_consensus(per)
    stamp = {"date": dt.date.today().isoformat(), "hardware": f"{platform.machine()} CPU"}
    rows = []
    for system in sorted(per):
        hits = [r[2] for r in per[system]]
        for name in cf.FEATURES:
            vals = [cf.SIGNS[name] * r[0][name] for r in per[system]]
            rows.append({"system": system, "feature": name, "kind": "shipped feature",
                         "auroc": cf.auroc(vals, hits), "ci_low": "", "ci_high": ""})
        for name in per[system][0][1]:
            rows.append({"system": system, "feature": name, "kind": "considered, not shipped",
                         "auroc": cf.auroc([r[1][name] for r in per[system]], hits), "ci_low": "", "ci_high": ""})
        train = [r for s, v in per.items() if s != system for r in v]
        cal = calibrate.fit_evidence([cf.vector(r[0]) for r in train], [r[2] for r in train], cf.FEATURES)
        conf = [vconf.confidence(cal, r[0], r[3]) for r in per[system]]
        lo, hi = bootstrap(conf, hits)
        # its level beside the hit rate: the calibration of other systems need not fit this one's
        rows.append({"system": system, "feature": SHIPPED, "kind": "shipped", "auroc": cf.auroc(conf, hits),
                     "ci_low": lo, "ci_high": hi, "mean_confidence": float(np.mean(conf)),
                     "hit_rate": float(np.mean(hits))})
    signed = {s: [({**{f: cf.SIGNS[f] * r[0][f] for f in cf.FEATURES}, **r[1]}, r[2]) for r in v]
              for s, v in per.items()}
    rows += [dict(r, ci_low="", ci_high="") for r in selection_rows(signed) + variant_rows(signed)]
    for r in rows:
        r.update(stamp, n_logs=len(per[r["system"]]), right=sum(x[2] for x in per[r["system"]]))
        r.setdefault("mean_confidence", "")
        r.setdefault("hit_rate", "")
        for k in ("auroc", "ci_low", "ci_high", "mean_confidence", "hit_rate"):
            r[k] = round(r[k], 3) if isinstance(r[k], float) else r[k]
        log.info("%-34s %-44s %s", r["system"], r["feature"], r["auroc"])
    write_rows(Path(args.csv), rows)
    log.info("wrote %s", args.csv)


if __name__ == "__main__":
    main()
