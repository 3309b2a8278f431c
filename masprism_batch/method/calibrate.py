"""Confidence: P(the blamed step is right), from a verdict's raw top score (issue 23, item 4).

Platt scaling on held-out (raw, hit) pairs: p = sigmoid(a * logit(raw) + b). Both parameters carry a small L2
pull (a toward 0, b toward the smoothed base rate) so that 5 labels cannot produce a certainty of 0 or 1: with
few labels the calibration says little more than the held-out hit rate, which is what it knows.
"""

from __future__ import annotations

import math

import numpy as np

PULL = 3.0  # L2 strength of the pull (in units of held-out pairs): 5 labels move it only part way


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def fit_platt(raw, hits) -> dict:
    """{"a", "b", "n", "base_rate"} from held-out raw confidences and whether each verdict was right."""
    raw, y = np.asarray(raw, dtype=np.float64), np.asarray(hits, dtype=np.float64)
    n = len(y)
    rate = (y.sum() + 1.0) / (n + 2.0)  # Laplace: 0 of 5 is not 0
    b0 = math.log(rate / (1 - rate))
    if n == 0:
        return {"a": 0.0, "b": b0, "n": 0, "base_rate": rate}
    z = _logit(raw)

    a, b = 0.0, b0
    for _ in range(50):  # Newton on two parameters (the log loss plus the pull is strictly convex)
        s_ = a * z + b
        p = 1 / (1 + np.exp(-s_))
        g = np.array([float((p - y) @ z) + PULL * a, float((p - y).sum()) + PULL * (b - b0)])
        w = p * (1 - p)
        H = np.array([[float(w @ (z * z)) + PULL, float(w @ z)], [float(w @ z), float(w.sum()) + PULL]])
        da, db = np.linalg.solve(H, g)
        a, b = a - da, b - db
        if abs(da) + abs(db) < 1e-10:
            break
    return {"a": a, "b": b, "n": n, "base_rate": float(rate)}


def apply(cal: dict | None, raw: float) -> float | None:
    if cal is None or raw is None or not math.isfinite(raw):
        return None
    s = cal["a"] * float(_logit(np.array([raw]))[0]) + cal["b"]
    return float(1 / (1 + math.exp(-s)))


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
