"""How a fitted confidence's calibration spreads held-out verdicts, by the form of the calibration (issue 59).

    python benchmarks/accuracy/confidence_variants.py --work DIR --counterfactual-k 0 --no-learned-heads --draws 10

The learning curve's draws (bench_learning_curve.system_draws: k = 10, 20, 40 random labelled logs of a system,
and the first DRAWS of its 5-fold "all" draws), each fitted by the product's fit; the fit's held-out verdicts
(what it calibrates on) and the draw's test verdicts are read as the fit and a run see them. The kept
confidence's order is the same in every variant, only its calibration differs:
- "ranked" (shipped): a logistic of the score's percentile among the held-out verdicts' scores, its scale matched
  to the AUROC the fit measured on its folds (fit/verdict_confidence.rank_calibration);
- "normal scores": the same with the percentile's normal score Phi^-1(u) (clipped at +-3) in place of u;
- "shrunk, leave-one-system-out prior": "ranked" with the measured AUROC shrunk toward a prior (empirical Bayes:
  A0 + t^2 / (t^2 + SE^2) (A - A0), SE^2 = (P + N + 1) / (12 P N) the AUROC's variance at 0.5 with P right and
  N wrong held-out verdicts), A0 the other systems' mean test AUROC under "ranked" and t the spread (std) of the
  systems' means: what a new system could be given;
- "shrunk, pooled 0.60 prior" (t = 0.1): the same toward a prior that reads the held-out system too (not honest
  held out; for comparison).
- "smoothed AUROC": "ranked" with the measured AUROC smoothed as the hit rate is, one pseudo verdict of each
  outcome ranked in the middle (`smoothed`).
Per system and k, on the test logs (held out): the draws whose test AUROC >= 0.6 that have an interquartile range
>= 0.1, the mean AUROC and IQR, and the mean confidence minus the hit rate (all / more / less confident half).
Writes tidy rows to benchmarks/results/confidence_variants.csv.
"""

from __future__ import annotations

import argparse
import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from statistics import NormalDist

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))
from benchmarks.accuracy import bench_learning_curve as blc
from benchmarks.accuracy.accuracy_cases import add_cache_args, cached_cases, fit_cases
from benchmarks.accuracy.fitted_confidence import loso_calibrations
from benchmarks.rows import write_rows
from masprism_batch.fit import fitting as ft
from masprism_batch.fit import verdict_confidence as vc
from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict import rules as zr

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("confidence_variants")
VARIANTS = ("ranked", "normal scores", "shrunk, leave-one-system-out prior", "shrunk, pooled 0.60 prior",
            "smoothed AUROC")
Z_CLIP = 3.0


@contextmanager
def recording(rec: dict):
    """The fit's held-out confidence inputs and each test verdict's features, as the fit and a run read them."""
    fit, apply = vc.fit, vconf.apply

    def fit_rec(feats, hits, folds, zero_cal):
        cal, fig = fit(feats, hits, folds, zero_cal)
        rec.update(held=(feats, np.asarray(hits, dtype=bool)), fig=fig, names=list(cal["features"]))
        return cal, fig

    def apply_rec(cal, c, order, probs=None, scores=None):
        rec.setdefault("test", []).append((vconf.features(c, order, probs, scores, cal.get("zero_training")), order[0]))
        return apply(cal, c, order, probs, scores)

    vc.fit, vconf.apply = fit_rec, apply_rec
    try:
        yield
    finally:
        vc.fit, vconf.apply = fit, apply


def _normal(cal: dict, X, y, target) -> callable:
    """The "ranked" calibration with normal scores: (features -> confidence)."""
    ranked = vc.rank_calibration(cal, X, y, target)
    if ranked.get("kind") != "ranked":
        return lambda x: vconf.of_features(ranked, x, 10**9)
    nd = NormalDist()

    def z(u):
        return float(np.clip(nd.inv_cdf(min(max(u, 1e-9), 1 - 1e-9)), -Z_CLIP, Z_CLIP))

    s = vc._score(ranked, X)
    zs = np.array([z(vconf.percentile(ranked, v)) for v in s])
    rate = ranked["base_rate"]
    a = 0.05 if target is None or target <= 0.5 else max(vc._scale_for(zs, rate, float(target), 10.0), 0.05)
    b = vc._level(zs, a, rate)

    def conf(x):
        v = (np.array([x[f] for f in ranked["features"]]) - ranked["mean"]) / np.asarray(ranked["std"]) @ ranked["w"]
        return 1 / (1 + np.exp(-(a * z(vconf.percentile(ranked, float(v))) + b)))
    return conf


def shrink(a, hits, a0: float, tau: float):
    """The measured AUROC `a` shrunk toward a0 by its sampling variance at 0.5 (None stays None)."""
    p, n = int(np.sum(hits)), int(len(hits) - np.sum(hits))
    if a is None or not p or not n:
        return a
    se2 = (p + n + 1) / (12.0 * p * n)
    return a0 + tau**2 / (tau**2 + se2) * (a - a0)


def smoothed(a, hits):
    """The measured AUROC with one pseudo verdict of each outcome ranked in the middle (as the hit rate is
    smoothed, (right + 1) / (verdicts + 2)): (A P N + (P + N + 1) / 2) / ((P + 1) (N + 1))."""
    p, n = int(np.sum(hits)), int(len(hits) - np.sum(hits))
    return None if a is None else (a * p * n + (p + n + 1) / 2.0) / ((p + 1) * (n + 1))


def confidences(d: dict, variant: str, prior: tuple[float, float] | None) -> np.ndarray:
    feats, y = d["held"]
    names = d["names"]
    X = np.array([[x[f] for f in names] for x in feats], dtype=np.float64)
    base = calibrate.fit_monotone(X, y, names, vc.WEIGHTS)
    target = d["fig"]["auroc"]
    test = [x for x, _ in d["test"]]
    if variant == "normal scores":
        conf = _normal(base, X, y, target)
        return np.array([conf(x) for x in test])
    if prior is not None:
        target = shrink(target, y, *prior)
    if variant == "smoothed AUROC":
        target = smoothed(target, y)
    cal = vc.rank_calibration(base, X, y, target)
    return np.array([vconf.of_features(cal, x, 10**9) for x in test])


def stats(conf: np.ndarray, hits: np.ndarray) -> dict:
    o = np.argsort(-conf, kind="stable")
    top, bottom = o[: len(o) // 2], o[len(o) // 2:]
    return {"auroc": cf.auroc(conf, hits), "iqr": float(np.subtract(*np.percentile(conf, [75, 25]))),
            "bias": float(conf.mean() - hits.mean()),
            "bias_top": float(conf[top].mean() - hits[top].mean()) if top.size else None,
            "bias_bottom": float(conf[bottom].mean() - hits[bottom].mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cache_args(ap)
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "confidence_variants.csv"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    cases, _ = cached_cases(args)
    fb = zr.read_fallback(None)
    zero_cals = loso_calibrations(cases, fb.rule)
    got = []
    for system in sorted({c.system for c in cases}):
        fc = fit_cases([c for c in cases if c.system == system], fb.rule)
        for k in (10, 20, 40, "all"):
            for d, (train, test) in enumerate(blc.system_draws(fc, system, k, args.draws)):
                if d >= args.draws:
                    break
                rec: dict = {}
                with recording(rec):
                    blc.evaluate(train, test, system, fb.rule, fb.agent_rule, (), zero_cals.get(system))
                if "fig" not in rec or not rec.get("test"):
                    continue
                rec["hits"] = np.array([ft.hit(c, step) for (_, step), c in zip(rec["test"], test, strict=True)])
                got.append({"system": system, "k": k, "draw": d, **rec})
            log.info("%s k=%s done", system, k)
    ranked = {}
    for g in got:
        if (a := cf.auroc(confidences(g, "ranked", None), g["hits"])) is not None:
            ranked.setdefault(g["system"], []).append(a)
    means = {s: float(np.mean(v)) for s, v in ranked.items()}
    tau = float(np.std(list(means.values()), ddof=1)) if len(means) > 1 else 0.1
    rows = []
    for g in got:
        loso = float(np.mean([m for s, m in means.items() if s != g["system"]] or [0.5]))
        for v in VARIANTS:
            prior = {"shrunk, leave-one-system-out prior": (loso, tau), "shrunk, pooled 0.60 prior": (0.6, 0.1)}.get(v)
            st = stats(confidences(g, v, prior), g["hits"])
            rows += [{"system": g["system"], "k": g["k"], "draw": g["draw"], "variant": v, "metric": m,
                      "value": round(x, 4)} for m, x in st.items() if x is not None]
    write_rows(Path(args.csv), rows)
    total: dict[str, list[int]] = {}
    for v in VARIANTS:
        cells = []
        for s in sorted({r["system"] for r in rows}):
            by = {}
            for r in rows:
                if r["variant"] == v and r["system"] == s:
                    by.setdefault((r["k"], r["draw"]), {})[r["metric"]] = r["value"]
            ok = [x for x in by.values() if x.get("auroc", 0) >= 0.6]
            cells.append(f"{s} {sum(x['iqr'] >= 0.1 for x in ok)} of {len(ok)}")
            total[v] = [total.get(v, [0, 0])[0] + sum(x["iqr"] >= 0.1 for x in ok), total.get(v, [0, 0])[1] + len(ok)]
        log.info("%s: %d of %d draws ranked >= 0.6 with an IQR >= 0.1 (%s)", v, *total[v], "; ".join(cells))
    log.info("systems' mean test AUROC under 'ranked' %s (the prior of each: the others' mean), tau %.3f",
             {s: round(m, 3) for s, m in means.items()}, tau)


if __name__ == "__main__":
    main()
