"""The raw top-share Platt calibration the evidence confidence replaced (issue 32), kept only as the accuracy
benchmark's comparison row ("raw top share, Platt"): p = sigmoid(a * logit(raw) + b) on one raw score, the
top candidate's share of the zero-training rule's scores. No product verdict reads it.
"""

from __future__ import annotations

import math

import numpy as np

from masprism_batch.method.calibrate import PULL
from masprism_batch.verdict.case import LogCase


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-4, 1 - 1e-4)
    return np.log(p / (1 - p))


def raw_confidence(c: LogCase) -> float:
    """The top candidate's share of the rule's scores (non-negative), else 1 / (number of candidates)."""
    scores = [max(float(r.get("score") or 0.0), 0.0) for r in c.rows]
    vals = [scores[k] for k in c.ranked]
    tot = sum(vals)
    return vals[0] / tot if vals and tot > 0 else (1.0 / max(len(c.ranked), 1))


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
