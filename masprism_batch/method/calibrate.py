"""Confidence: P(the blamed step is right), from a verdict's evidence.

`fit_evidence`: logistic regression of held-out hits on the verdict's evidence features (method/confidence.py),
standardised; the weights carry an L2 pull toward 0 and the intercept toward the smoothed base rate, so that 5
labels cannot produce a certainty of 0 or 1: with few labels the calibration says little more than the held-out
hit rate, which is what it knows. verdict/confidence.py applies it at run time, floored at 1/(number of steps).

`fit_monotone`: the same logistic over the few verdict-level features of a fitted system's confidence
(fit/verdict_confidence.py), each oriented so that larger means more confident and its weight kept >= 0: equal
weights (what a fitted system ships: one scale >= 0 for the standardised sum) or one weight per feature (a
feature the data ties the other way is dropped and the rest refitted); where every weight would drop, each keeps a
small floor weight, so the confidence still orders verdicts by their a-priori evidence at the held-out hit rate's
level instead of giving every log one number.
"""

from __future__ import annotations

import math

import numpy as np

PULL = 3.0  # L2 strength of the pull (in units of held-out pairs): 5 labels move it only part way


def fit_evidence(X, hits, names, signs=None, weights: str = "equal") -> dict:
    """{"kind": "evidence", "features", "mean", "std", "w", "b", "n", "base_rate"} from held-out verdicts'
    evidence features X [n, d] (columns `names`) and whether each verdict was right; p = sigmoid(z @ w + b), z
    the standardised features. `signs` (+1 / -1 per feature, default confidence.SIGNS): the direction each
    feature may move the confidence.

    weights "equal" (what ships): every feature counts the same in its a-priori direction (z-sum), and only the
    scale of that sum and the intercept are learned, so that nothing about the systems fitted on (more steps
    meaning more hits there) can invert the evidence on another system; in the leave-one-system-out
    comparison of docs/results.md the learned weights ranked a held-out system's verdicts worse. "fitted": one
    weight per feature, a feature whose weight points against its sign dropped and the rest refitted."""
    from masprism_batch.method.confidence import SIGNS

    X, y = np.asarray(X, dtype=np.float64).reshape(len(hits), len(names)), np.asarray(hits, dtype=np.float64)
    signs = np.array([SIGNS.get(f, 0) for f in names] if signs is None else signs, dtype=np.float64)
    n = len(y)
    rate = (y.sum() + 1.0) / (n + 2.0)
    b0 = math.log(rate / (1 - rate))
    mean = X.mean(0) if n else np.zeros(len(names))
    std = X.std(0) if n else np.ones(len(names))
    std = np.where(std > 1e-9, std, 1.0)
    Z = (X - mean) / std
    if weights == "equal":
        (a,), b = logistic((Z @ signs)[:, None], y, b0) if n else (np.zeros(1), b0)
        full = max(float(a), 0.0) * signs  # a negative scale would invert the evidence: none instead
        if a < 0:
            b = logistic(np.zeros((n, 0)), y, b0)[1]
    else:
        keep = np.ones(len(names), dtype=bool)
        while True:
            w, b = logistic(Z[:, keep], y, b0)
            full = np.zeros(len(names))
            full[keep] = w
            wrong = keep & (signs * full < 0)
            if not wrong.any():
                break
            keep[np.argmin(np.where(wrong, signs * full, np.inf))] = False  # the most inverted first, then refit
    return {"kind": "evidence", "features": list(names), "mean": mean.tolist(), "std": std.tolist(),
            "w": full.tolist(), "b": float(b), "n": n, "base_rate": float(rate), "weights": weights}


FLOOR_W = 0.05  # per standardised feature where the data kept none: an order, at nearly the base rate's level


def fit_monotone(X, hits, names, weights: str = "fitted") -> dict:
    """{"kind": "fitted", "features", "mean", "std", "w", "b", "n", "base_rate"}: fit_evidence's weights with
    every feature's sign +1 (monotone non-decreasing in each), never all zero (FLOOR_W). `weights` "fitted": one
    weight per feature (recorded "monotone"); "equal": the standardised features summed, only the sum's scale
    (>= 0) and the intercept learned (recorded "equal")."""
    cal = fit_evidence(X, hits, names, signs=[1] * len(names), weights=weights)
    if not any(cal["w"]):  # b is then the intercept-only fit: the features are centred, so the level stays there
        cal["w"] = [FLOOR_W] * len(names)
    cal.update(kind="fitted", weights="monotone" if weights == "fitted" else "equal")
    return cal


def logistic(Z: np.ndarray, y: np.ndarray, b0: float, pull: float = PULL,
             pull_b: float | None = None) -> tuple[np.ndarray, float]:
    """Weights pulled toward 0 (L2 `pull`) and the intercept toward b0 (L2 `pull_b`, default `pull`): Newton on a
    strictly convex loss."""
    A = np.concatenate([Z, np.ones((len(y), 1))], axis=1)
    prior = np.append(np.zeros(Z.shape[1]), b0)
    pen = np.append(np.full(Z.shape[1], float(pull)), float(pull if pull_b is None else pull_b))
    theta = prior.copy()
    for _ in range(100):
        p = 1 / (1 + np.exp(-(A @ theta)))
        g = A.T @ (p - y) + pen * (theta - prior)
        H = (A * (p * (1 - p))[:, None]).T @ A + np.diag(pen)
        step = np.linalg.solve(H, g)
        theta = theta - step
        if np.abs(step).sum() < 1e-10:
            break
    return theta[:-1], float(theta[-1])


def accuracy_at_coverage(conf, hits, fractions=(0.25, 0.5, 1.0)) -> dict[float, tuple[int, float | None]]:
    """Accuracy of the most confident `fraction` of verdicts (ties keep input order): {fraction: (n, acc)}."""
    pairs = [(c, h) for c, h in zip(conf, hits, strict=True) if c is not None and h is not None]
    order = sorted(range(len(pairs)), key=lambda i: -pairs[i][0])
    out = {}
    for f in fractions:
        m = max(1, int(math.ceil(f * len(pairs)))) if pairs else 0
        top = [pairs[i][1] for i in order[:m]]
        out[f] = (m, float(np.mean(top)) if top else None)
    return out


def mean(xs) -> float | None:
    """The mean of the values that are not None (a hit rate: a log without an agent label has no agent hit);
    None when there is none. Summed in order, so a rate of k in n is exactly k / n."""
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None
