"""The confidence of a fitted system's verdict: the log's evidence and the ranker's own certainty, calibrated on
the system's held-out folds.

A fitted ranker's top probability alone ordered nothing within a system (held-out AUROC 0.50-0.55, issue 48),
while the zero-training confidence, read from the log's own evidence, ranked a known system's verdicts. A fitted
verdict's confidence therefore reads (FEATURES, each oriented a priori so that larger means more confident):

- zero_training: the zero-training confidence's score (its calibration's logit, `method/confidence.py`'s
  evidence under MASPrism's Score) of the blamed step: how clearly the log's signals single it out;
- top_prob: the blamed step's share of the scores that ordered the verdict (a ranker's step probability; the
  rule's or the label prior's scores as a share of their sum);
- log_odds: log(top_prob / the next step's share): how far ahead of the runner-up, in log-odds.

`fit` (fit/system.py) calibrates it on the system's held-out verdicts (its internal folds, never the logs a
verdict was fitted on): a logistic of the features' standardised sum with equal weights (calibrate.fit_monotone,
WEIGHTS), so no dev system's data can turn a feature against its meaning. It measures, on the same folds, the
AUROC and top-quarter lift of this confidence (each fold's verdicts ordered by the weights of a calibration fitted
on the other folds) beside the zero-training confidence's, and keeps the one that ranked them better (`keep`):
never one that ranked its own folds worse (issue 59: a 20-label fit printed 0.40 against 0.56 and kept the 0.40).

The kept confidence is shipped as a "ranked" calibration (`rank_calibration`): a new verdict's score (the kept
features' standardised sum) is placed among the held-out verdicts' scores, as its mid-rank percentile u
(interpolated between them, the sorted scores stored, at most MAX_KNOTS), and its confidence is
sigmoid(a (u - 1/2) + b): `a` the scale at which this confidence would itself rank the held-out verdicts as well as
they were measured to rank (its expected AUROC equal to the measured one), `b` putting their mean at the smoothed
held-out hit rate. fit_monotone's own scale is pulled toward 0, so 20 labels gave every held-out log 0.28-0.32
(issue 59), and a scale matched on the raw scores (`match_scale`, issue 59's first round) spread the verdicts by
the scores' skew (log-odds): half the draws whose test logs it ranked at AUROC >= 0.6 had an interquartile range
under 0.1. Percentiles of new verdicts are spread evenly whatever the scores' skew, so the spread follows the
measured AUROC and hit rate alone: a confidence spreads as far as it ranked, not further. A logistic of the
percentile rather than of its normal score (Phi^-1(u)): for the same AUROC it puts more of the spread into the
middle half of the verdicts (interquartile range 0.13 against 0.10 at AUROC 0.6 and hit rate 0.3), since nothing
says the scores' tails are surer than the middle; measured beside it in docs/accuracy.md.
"""

from __future__ import annotations

import numpy as np

from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict.confidence import FEATURES, OWN

WEIGHTS = "equal"  # calibrate.fit_monotone's weights: as the zero-training confidence's, a priori
BOOT, BOOT_SEED = 1000, 0  # the report's bootstrap: a fixed seed, so the same labels give the same file
MAX_CELLS = 10_000_000  # resamples x verdicts held at once (~80 MB an array)


def lift(conf, hits, fraction: float = 0.25) -> float | None:
    """Hit rate of the most confident `fraction` over the overall hit rate (1.0: no better than all)."""
    acc = calibrate.accuracy_at_coverage(conf, hits, (fraction, 1.0))
    top, every = acc[fraction][1], acc[1.0][1]
    return top / every if top is not None and every else None


def boot_aurocs(scores: list[np.ndarray], hits, n: int = BOOT, seed: int = BOOT_SEED) -> list[np.ndarray]:
    """Each score's AUROC against `hits` (ties count half) on n bootstrap resamples of the verdicts, the same
    resamples for every score (so their differences are paired); resamples with one outcome only are dropped;
    a score with a non-finite value gets none. Vectorised by ranks (Mann-Whitney): 0.05 s for 100 labelled logs,
    about 2 s for 3,000 (2-core CPU); past MAX_CELLS resampled verdicts fewer resamples (at least 200), so a
    system with tens of thousands of labels stays within a few hundred MB."""
    y = np.asarray(hits, dtype=bool)
    if not y.size:
        return [np.zeros(0) for _ in scores]
    n = min(n, max(200, MAX_CELLS // len(y)))
    idx = np.random.default_rng(seed).integers(0, len(y), (n, len(y)))
    Y = y[idx]
    P = Y.sum(1)
    N = len(y) - P
    ok = (P > 0) & (N > 0)
    out = []
    for s in scores:
        s = np.asarray(s, dtype=np.float64)
        if not np.isfinite(s).all():  # no figure rather than a NaN in the ranker file (which refuses one)
            out.append(np.zeros(0))
            continue
        span = float(s.max() - s.min()) if s.size else 0.0
        # each resample's scores in its own interval [row, row + 0.5]: one sort ranks every row at once
        S = (s[idx] - s.min()) / (span if span > 0 else 1.0) * 0.5 + np.arange(n)[:, None]
        flat = np.sort(S, axis=None)
        below = np.searchsorted(flat, S, "left") - np.arange(n)[:, None] * len(y)
        upto = np.searchsorted(flat, S, "right") - np.arange(n)[:, None] * len(y)
        rank = (below + upto + 1) / 2.0  # 1-based average rank within the resample
        u = (rank * Y).sum(1) - P * (P + 1) / 2.0
        out.append(u[ok] / (P[ok] * N[ok]))
    return out


def interval(x: np.ndarray) -> list[float] | None:
    """The central 95% of bootstrap figures `x` (None without any)."""
    return [float(v) for v in np.percentile(x, [2.5, 97.5])] if len(x) else None


def crossfit(F: np.ndarray, hits: np.ndarray, folds: np.ndarray, names) -> np.ndarray:
    """Each held-out verdict's score under the weights of a calibration fitted on the other folds' verdicts only:
    ((x - mean) / std) @ w with the weights scaled to sum to 1, the part that orders verdicts. Its intercept and
    scale are left out: they are common to a fold's verdicts and differ between folds by the folds' hit rates, so
    with leave-one-out (each fold one log) the intercept alone made a confidence that orders nothing look
    inverted (AUROC 0.0 on 9 logs: leaving a right verdict out lowers the level it is scored at), and the scale,
    times features that were not centred, shifted whole folds against each other when they are scored together
    (on the dev data, mean of 40 fits' internal AUROC: GAIA 0.609 against 0.644 centred on one scale,
    Hand-Crafted 0.476 against 0.531, issue 48). The centring uses the training folds' means, which read no
    label."""
    out = np.zeros(len(hits))
    for f in sorted(set(folds.tolist())):
        train, test = folds != f, folds == f
        if not train.any():  # one labelled log: nothing to fit its score on (it stays 0, as a constant orders)
            continue
        cal = calibrate.fit_monotone(F[train], hits[train], names, WEIGHTS)
        # a feature constant on the training folds orders nothing: its weight (a floor or fitting noise) differs
        # between folds with the verdict left out, and times a constant it alone ranked identical verdicts
        varies = F[train].std(0) > 1e-9
        w = np.asarray(cal["w"]) / sum(cal["w"])  # never all 0 (fit_monotone's floor)
        z = (F[test] - np.asarray(cal["mean"])) / np.asarray(cal["std"])
        out[test] = z[:, varies] @ w[varies]
    return out


MAX_SCALE = 10.0  # the steepest scale match_scale sets, per unit of the weighted mean of standardised features
MAX_MATCH = 2000  # verdicts match_scale reads (evenly spaced in score order past it): O(n log n) per step anyway


def keep(fitted_auroc: float | None, zero_auroc: float | None) -> str:
    """Which confidence a fit keeps: "fitted", unless the zero-training one ranked the same held-out verdicts
    strictly better ("zero-training"); a tie or no figure keeps the fitted (it reads the zero-training score too)."""
    if zero_auroc is not None and (fitted_auroc is None or zero_auroc > fitted_auroc):
        return "zero-training"
    return "fitted"


def expected_auroc(u: np.ndarray, p: np.ndarray) -> float:
    """The AUROC a score u would reach if each verdict were right with probability p (expected pairs over
    expected pairs; ties count half)."""
    o = np.argsort(u, kind="stable")
    u, p = u[o], p[o]
    q = 1.0 - p
    # for each verdict, the mass of wrong verdicts strictly below it and tied with it
    uniq, start, count = np.unique(u, return_index=True, return_counts=True)
    cq = np.concatenate([[0.0], np.cumsum(q)])
    below = np.repeat(cq[start], count)
    tied = np.repeat(cq[start + count] - cq[start], count) - q  # a verdict is never paired with itself
    num = float(p @ (below + 0.5 * tied))
    den = float(p.sum() * q.sum() - p @ q)
    return num / den if den > 0 else 0.5


def _level(u: np.ndarray, a: float, rate: float) -> float:
    """b with mean(sigmoid(a u + b)) = rate (bisection: the mean rises with b)."""
    lo, hi = -60.0, 60.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if np.mean(1 / (1 + np.exp(-np.clip(a * u + mid, -60, 60)))) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _scale_for(u: np.ndarray, rate: float, target: float, top: float) -> float:
    """The scale a in [0, top] at which sigmoid(a u + b), b putting the mean at `rate`, has expected AUROC
    `target` on scores u (bisection: the expected AUROC rises with the scale); `top` where even it falls short."""

    def auroc_at(a: float) -> float:
        return expected_auroc(u, 1 / (1 + np.exp(-np.clip(a * u + _level(u, a, rate), -60, 60))))

    lo, hi = 0.0, top
    if auroc_at(hi) <= target:
        return top
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if auroc_at(mid) < target else (lo, mid)
    return (lo + hi) / 2


def _thin(u: np.ndarray, cap: int) -> np.ndarray:
    """`u` as it is, or past `cap` values that many, evenly spaced in score order (ends kept)."""
    return np.sort(u)[np.linspace(0, u.size - 1, cap).round().astype(int)] if u.size > cap else u


def match_scale(cal: dict, X: np.ndarray, hits, target: float | None) -> dict:
    """`cal` (fit_monotone's, over X's columns) with its scale set so that the confidence it gives these verdicts
    would rank them with expected AUROC `target` (the measured held-out one), and its intercept so that their
    mean confidence is the smoothed hit rate; unchanged where `target` is None or <= 0.5 (the features' floor
    order then stands at the hit rate's level) or the verdicts' scores do not vary. The weights keep their
    proportions (equal: one scale). Issue 59's first round shipped it; `fit` now ships `rank_calibration`."""
    y = np.asarray(hits, dtype=np.float64)
    w = np.asarray(cal["w"], dtype=np.float64)
    if target is None or target <= 0.5 or not y.size or w.sum() <= 0:
        return cal
    u = _score(cal, X)
    if np.ptp(u) <= 1e-12:
        return cal
    u = _thin(u, MAX_MATCH)
    rate = (y.sum() + 1.0) / (y.size + 2.0)
    a = _scale_for(u, rate, float(target), MAX_SCALE)
    return {**cal, "w": (a * w / w.sum()).tolist(), "b": _level(u, a, rate), "scale": "matched",
            "matched_auroc": float(target)}


def _score(cal: dict, X) -> np.ndarray:
    """The verdicts' score under `cal`'s standardisation and weights, the weights scaled to sum to 1."""
    w = np.asarray(cal["w"], dtype=np.float64)
    return ((np.asarray(X, dtype=np.float64) - np.asarray(cal["mean"])) / np.asarray(cal["std"])) @ (w / w.sum())


MAX_KNOTS = 200  # held-out scores a "ranked" calibration stores (evenly spaced in score order past it)
RANK_MAX_SCALE = 40.0  # the steepest `a` per unit of percentile (an AUROC of ~0.99 at a hit rate of 0.5)
# the scale where nothing was measured to rank (no figure, or an AUROC <= 0.5): the features' a-priori order at
# the hit rate's level, flat-ish (an interquartile range of about 0.01-0.025 at hit rates of 0.1-0.5), never
# ties that would sort the verdicts in input order
RANK_MIN_SCALE = 0.2


def percentiles(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct scores in `u`, sorted; each one's mid-rank percentile among u: (mid-rank - 1/2) / n, tied
    scores sharing theirs). Percentiles of the verdicts themselves then average 1/2 and lie in (0, 1)."""
    knots, count = np.unique(np.asarray(u, dtype=np.float64), return_counts=True)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    return knots, (first + count / 2.0) / u.size


def rank_calibration(cal: dict, X: np.ndarray, hits, target: float | None) -> dict:
    """A "ranked" calibration from fit_monotone's `cal` over X's columns (its standardisation and the weights'
    proportions; the scale and intercept are set here): the held-out verdicts' scores as knots with their
    mid-rank percentiles u (at most MAX_KNOTS, ends kept), and sigmoid(a (u - 1/2) + b) with `a` matched to
    `target` on the held-out verdicts' percentiles (RANK_MIN_SCALE where `target` is None or <= 0.5) and `b`
    putting their mean confidence at the smoothed hit rate. Where the scores do not vary (fewer than two
    distinct), `match_scale`'s "fitted" calibration instead: there is nothing to place a verdict among."""
    y = np.asarray(hits, dtype=np.float64)
    w = np.asarray(cal["w"], dtype=np.float64)
    if not y.size or w.sum() <= 0:
        return cal
    s = _score(cal, X)
    knots, u = percentiles(s)
    if knots.size < 2 or np.ptp(knots) <= 1e-12:
        return match_scale(cal, X, hits, target)
    own = np.interp(s, knots, u) - 0.5  # each held-out verdict's own centred percentile
    rate = (y.sum() + 1.0) / (y.size + 2.0)
    thin = _thin(own, MAX_MATCH)
    a = RANK_MIN_SCALE if target is None or target <= 0.5 else max(
        _scale_for(thin, rate, float(target), RANK_MAX_SCALE), RANK_MIN_SCALE)
    if knots.size > MAX_KNOTS:
        keep_at = np.linspace(0, knots.size - 1, MAX_KNOTS).round().astype(int)
        knots, u = knots[keep_at], u[keep_at]
    return {"kind": "ranked", "features": list(cal["features"]), "mean": list(cal["mean"]),
            "std": list(cal["std"]), "w": (w / w.sum()).tolist(), "knots": knots.tolist(), "u": u.tolist(),
            "a": float(a), "b": _level(own, a, rate), "n": int(y.size), "base_rate": float(rate),
            "weights": cal.get("weights", "equal"), "matched_auroc": None if target is None else float(target)}


def fit(feats: list[dict], hits: list[bool], folds, zero_cal: dict | None) -> tuple[dict, dict]:
    """(the calibration to ship, held-out figures) from a system's held-out verdicts: their features `feats`
    (FEATURES at least), whether each was right and the internal fold each was held out in. Figures: fitted_auroc /
    fitted_top_quarter_lift (scores cross-fitted over the folds), zero_training_auroc /
    zero_training_top_quarter_lift (its score as it comes: nothing of it is fitted on this system), auroc /
    top_quarter_lift / auroc_interval (the kept one's) and confidence_kept (`keep`: "fitted" or
    "zero-training"); verdicts and right (how many held-out verdicts, how many right); 95% bootstrap intervals
    (verdicts resampled, BOOT times) of both AUROCs and of their paired difference (fitted_auroc_interval,
    zero_training_auroc_interval, fitted_minus_zero_training_interval; None where no resample holds both
    outcomes). The kept calibration reads FEATURES ("fitted") or OWN ("zero-training": the zero-training score's
    order at this system's level), shipped as a "ranked" calibration whose scale is matched to the kept one's
    AUROC (`rank_calibration`)."""
    y = np.asarray(hits, dtype=bool)
    folds = np.asarray(folds)
    F = {names: np.array([[x[f] for f in names] for x in feats], dtype=np.float64).reshape(len(y), len(names))
         for names in (FEATURES, OWN)}
    fitted = crossfit(F[FEATURES], y, folds, FEATURES)
    zero = F[OWN][:, 0] if zero_cal is not None else crossfit(F[OWN], y, folds, OWN)
    fig = {"fitted_auroc": cf.auroc(fitted, y), "fitted_top_quarter_lift": lift(fitted, y),
           "zero_training_auroc": cf.auroc(zero, y), "zero_training_top_quarter_lift": lift(zero, y),
           "verdicts": int(len(y)), "right": int(y.sum())}
    # how far a team can lean on these figures: a few dozen labelled logs leave AUROCs +-0.1 apart by chance
    a, z = boot_aurocs([fitted, zero], y)
    fig.update(fitted_auroc_interval=interval(a), zero_training_auroc_interval=interval(z),
               fitted_minus_zero_training_interval=interval(a - z) if a.size == z.size else None)
    kept = keep(fig["fitted_auroc"], fig["zero_training_auroc"])
    pre = "fitted" if kept == "fitted" else "zero_training"
    names = FEATURES if kept == "fitted" else OWN
    cal = calibrate.fit_monotone(F[names], y, names, WEIGHTS)
    cal = rank_calibration(cal, F[names], y, fig[f"{pre}_auroc"])
    cal["zero_training"] = zero_cal
    fig.update(confidence_kept=kept, auroc=fig[f"{pre}_auroc"], top_quarter_lift=fig[f"{pre}_top_quarter_lift"],
               auroc_interval=fig[f"{pre}_auroc_interval"])
    return cal, fig
