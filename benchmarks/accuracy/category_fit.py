"""The category classifier as the category benchmarks fit and score it (bench_category.py, category_end_to_end.py):
a calibration on a split's labelled errors, its leaf predictions, and the family / leaf metrics."""

from __future__ import annotations

import numpy as np

from masprism_batch.category import classify
from masprism_batch.category.taxonomy import TRAIL

L2 = 10.0  # the calibration's penalty, as bench_category.py has always fitted it


def subset(d: dict, mask: np.ndarray) -> dict:
    idx = np.flatnonzero(mask)
    return {k: (v[idx] if isinstance(v, np.ndarray) else [v[i] for i in idx] if isinstance(v, list) else v)
            for k, v in d.items()}


def family_idx(y: np.ndarray) -> np.ndarray:
    fams = TRAIL.families
    return np.array([fams.index(TRAIL.kinds[i].family) for i in y])


def metrics(y: np.ndarray, pred: np.ndarray) -> dict:
    fy, fp = family_idx(y), family_idx(pred)
    bal = float(np.mean([(fp[fy == f] == f).mean() for f in np.unique(fy)]))
    f1 = []
    for k in np.union1d(np.unique(y), np.unique(pred)):
        tp = float(((pred == k) & (y == k)).sum())
        p, r = tp / max(1, (pred == k).sum()), tp / max(1, (y == k).sum())
        f1.append(0.0 if p + r == 0 else 2 * p * r / (p + r))
    return {"family_balanced_accuracy": bal, "leaf_macro_f1": float(np.mean(f1)),
            "leaf_accuracy": float((pred == y).mean())}


def predict(m: classify.CategoryModel, d: dict, idx=None) -> np.ndarray:
    idx = np.arange(len(d["y"])) if idx is None else idx
    probs = m.probs(d["pmi"][idx], d["log"][idx])
    return np.array([TRAIL.index(classify.decide(p, TRAIL)[0]) for p in probs])


def calibrate(d: dict, name: str, use_model: bool = True, prior=None, idx=None) -> classify.CategoryModel:
    idx = np.arange(len(d["y"])) if idx is None else idx
    z = classify.model_evidence(d["pmi"][idx]) if use_model else np.zeros((len(idx), len(TRAIL.kinds)))
    y = d["y"][idx]
    m = classify.fit(z, d["log"][idx], y, len(TRAIL.kinds), TRAIL.digest(), l2=L2, fitted_on=name,
                     weight=classify.family_weights(y, TRAIL), prior=prior)
    if not use_model:
        m.a = 0.0
    return m
