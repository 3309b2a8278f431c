"""Conditional logit over each log's steps (the solver behind fit/fitting.py): a softmax over a log's steps fitted
to its gold steps, with a per-column L2 penalty. Stacked arrays and damped Newton steps: a 200-log fit is a
fraction of a second (numpy only).

A log may have several gold steps (TRAIL annotates every error span). The target is then the uniform
distribution over them (cross-entropy to it: -mean over gold of log softmax), not the probability of "any gold
step" (-log of the summed gold probabilities): the first is convex, so Newton's step always descends and the
optimum is unique; the second is not, its Newton step pointed uphill on about a third of multi-gold fits and the
solver stopped at w = 0, the ranker silently equal to the order it corrects; on the dev cache it was also the more
accurate target (docs/accuracy.md, "The ranker's target"). A log with one gold step has the same objective either way.
"""

from __future__ import annotations

import numpy as np


def solve(xs: list[np.ndarray], golds: list[list[int]], offs: list[np.ndarray], pen: np.ndarray,
          iters: int = 100) -> np.ndarray:
    """w minimising mean over logs of (logsumexp(off + X w) - mean over gold g of (off + X w)_g) + 0.5 w·diag(pen)·w;
    `xs` already scaled."""
    X = np.concatenate(xs)
    off = np.concatenate(offs)
    starts = np.cumsum([0] + [len(x) for x in xs])[:-1]
    seg = np.repeat(np.arange(len(xs)), [len(x) for x in xs])
    target = np.zeros(len(X))
    for i, (s0, g) in enumerate(zip(starts, golds, strict=True)):
        g = np.unique(np.asarray(g, dtype=np.int64))
        if g.size == 0:  # callers fit labelled logs only: a log without a gold step says nothing to fit
            raise ValueError(f"log {i} has no gold step")
        target[s0 + g] = 1.0 / len(g)
    n, d = len(xs), X.shape[1]
    P = np.diag(np.asarray(pen, dtype=np.float64))

    def soft(s):
        e = np.exp(s - np.maximum.reduceat(s, starts)[seg])
        return e / np.add.reduceat(e, starts)[seg]

    def objective(w):
        s = off + X @ w
        mx = np.maximum.reduceat(s, starts)
        z = np.add.reduceat(np.exp(s - mx[seg]), starts)
        return float(np.sum(np.log(z) + mx) - target @ s) / n + 0.5 * float(w @ P @ w)

    w = np.zeros(d)
    f = objective(w)
    for _ in range(iters):
        p = soft(off + X @ w)
        grad = X.T @ (p - target) / n + P @ w
        # Hessian: the covariance of X under p within each log, plus the penalty (positive definite)
        mp_ = np.add.reduceat(p[:, None] * X, starts)
        H = (X.T @ (p[:, None] * X) - mp_.T @ mp_) / n + P
        try:
            step = np.linalg.solve(H + 1e-9 * np.eye(d), grad)
        except np.linalg.LinAlgError:
            step = grad
        t, slope = 1.0, float(grad @ step)
        while t > 1e-10:
            f_new = objective(w - t * step)
            if f_new <= f - 1e-4 * t * slope:
                break
            t *= 0.5
        if t <= 1e-10:
            break
        w, f_old, f = w - t * step, f, f_new
        if abs(f_old - f) < 1e-12:
            break
    return w
