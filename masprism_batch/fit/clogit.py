"""Conditional logit over each log's steps (the solver behind fit/fitting.py): maximise the log probability of a
log's gold steps under a softmax over its steps, with a per-column L2 penalty. Stacked arrays and damped Newton
steps: a 200-log fit is a fraction of a second (numpy only)."""

from __future__ import annotations

import numpy as np


def solve(xs: list[np.ndarray], golds: list[list[int]], offs: list[np.ndarray], pen: np.ndarray,
          iters: int = 50) -> np.ndarray:
    """w minimising mean over logs of -log sum_gold softmax(off + X w) + 0.5 w·diag(pen)·w; `xs` already scaled."""
    X = np.concatenate(xs)
    off = np.concatenate(offs)
    starts = np.cumsum([0] + [len(x) for x in xs])[:-1]
    seg = np.repeat(np.arange(len(xs)), [len(x) for x in xs])
    gold = np.zeros(len(X), dtype=bool)
    for s0, g in zip(starts, golds, strict=True):
        gold[s0 + np.asarray(g)] = True
    n, d = len(xs), X.shape[1]
    P = np.diag(np.asarray(pen, dtype=np.float64))

    def soft(s, mask):
        sm = np.where(mask, s, -np.inf)
        e = np.where(mask, np.exp(sm - np.maximum.reduceat(sm, starts)[seg]), 0.0)
        z = np.add.reduceat(e, starts)
        return e / z[seg]

    def objective(w):
        s = off + X @ w
        mx = np.maximum.reduceat(s, starts)
        z = np.add.reduceat(np.exp(s - mx[seg]), starts)
        sg = np.where(gold, s, -np.inf)  # log-sum-exp over the gold steps with their own maximum: no underflow
        mg = np.maximum.reduceat(sg, starts)
        zg = np.add.reduceat(np.exp(sg - mg[seg]), starts)
        return float(np.sum(np.log(z) + mx - np.log(zg) - mg)) / n + 0.5 * float(w @ P @ w)

    w = np.zeros(d)
    f = objective(w)
    everything = np.ones(len(X), dtype=bool)
    for _ in range(iters):
        s = off + X @ w
        p, q = soft(s, everything), soft(s, gold)
        grad = X.T @ (p - q) / n + P @ w
        # Hessian: covariance of X under p minus under q (per log), plus the penalty
        mp_, mq = np.add.reduceat(p[:, None] * X, starts), np.add.reduceat(q[:, None] * X, starts)
        H = (X.T @ (p[:, None] * X) - mp_.T @ mp_ - X.T @ (q[:, None] * X) + mq.T @ mq) / n + P
        try:
            step = np.linalg.solve(H + 1e-6 * np.eye(d), grad)
        except np.linalg.LinAlgError:
            step = grad
        t = 1.0
        while t > 1e-4:
            f_new = objective(w - t * step)
            if f_new <= f - 1e-4 * t * float(grad @ step):
                break
            t *= 0.5
        if t <= 1e-4:
            break
        w, f_old, f = w - t * step, f, f_new
        if abs(f_old - f) < 1e-9:
            break
    return w
