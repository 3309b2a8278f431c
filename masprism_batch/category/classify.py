"""From evidence to a failure kind: one multinomial-logistic layer over the model's and the log's evidence.

logit_k = a * z_k + b_k + W_k . f, where z_k = -(pmi_k - mean_j pmi_j) is the model's evidence for kind k
(evidence.description_pmi, centred per step: only how kinds compare at this step counts) and f the log's
(log_signals.NAMES). Zero-training on a taxonomy no one calibrated: a = 1, b = W = 0, the description the log
makes most likely. The TRAIL taxonomy ships a, b, W calibrated on the TRAIL dev errors (benchmarks/accuracy/
bench_category.py; held-out figures in docs/results.md); `fit` refits them on a team's own labels.

The verdict is hierarchical, so its family and kind never disagree: the family with the largest summed
probability, then the kind of that family with the largest probability; `category_confidence` is that kind's
probability.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from masprism_batch.category.log_signals import NAMES
from masprism_batch.category.taxonomy import Taxonomy

FORMAT = "masprism-category/1"
MIN_FAMILY_CASES = 20
MAX_WEIGHTS_BYTES = 16 << 20  # MAX_KINDS kinds x a handful of features: well under 1 MB


def model_evidence(pmi: np.ndarray) -> np.ndarray:
    """[n, K] pmi (nan: not read) -> z, centred per row; a row never read is all 0 (no model evidence)."""
    pmi = np.atleast_2d(np.asarray(pmi, dtype=np.float64))
    z = np.zeros_like(pmi)
    ok = np.isfinite(pmi).all(axis=1)
    if ok.any():
        z[ok] = -(pmi[ok] - pmi[ok].mean(axis=1, keepdims=True))
    return z


@dataclass
class CategoryModel:
    taxonomy_digest: str
    a: float
    b: np.ndarray  # [K]
    W: np.ndarray  # [K, F]
    fitted_on: str = "zero-training"

    @classmethod
    def zero(cls, taxonomy: Taxonomy) -> CategoryModel:
        k = len(taxonomy.kinds)
        return cls(taxonomy.digest(), 1.0, np.zeros(k), np.zeros((k, len(NAMES))))

    def reads_log(self) -> bool:
        """Whether the log's evidence moves these weights' answer (zero-training: it does not)."""
        return bool(np.any(self.W != 0))

    def logits(self, z: np.ndarray, f: np.ndarray) -> np.ndarray:
        return self.a * z + self.b[None, :] + np.asarray(f, dtype=np.float64) @ self.W.T

    def probs(self, pmi: np.ndarray, f: np.ndarray) -> np.ndarray:
        return softmax(self.logits(model_evidence(pmi), np.atleast_2d(f)))

    def to_json(self) -> dict:
        return {"format": FORMAT, "taxonomy_digest": self.taxonomy_digest, "features": list(NAMES),
                "a": self.a, "b": self.b.tolist(), "W": self.W.tolist(), "fitted_on": self.fitted_on}

    @classmethod
    def from_json(cls, d: dict, taxonomy: Taxonomy) -> CategoryModel:
        if d.get("format") != FORMAT or d.get("features") != list(NAMES):
            raise ValueError(f"category weights: format {d.get('format')!r} / features differ from {FORMAT}")
        if d.get("taxonomy_digest") != taxonomy.digest():
            raise ValueError("category weights were fitted for another taxonomy (its digest differs)")
        b, W = np.asarray(d["b"], dtype=np.float64), np.asarray(d["W"], dtype=np.float64)
        if b.shape != (len(taxonomy.kinds),) or W.shape != (len(taxonomy.kinds), len(NAMES)) or \
                not (np.isfinite(b).all() and np.isfinite(W).all() and np.isfinite(d["a"])):
            raise ValueError("category weights: shapes or values do not fit the taxonomy")
        return cls(d["taxonomy_digest"], float(d["a"]), b, W, str(d.get("fitted_on", "")))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def decide(p: np.ndarray, taxonomy: Taxonomy) -> tuple[str, str, float]:
    """One step's kind probabilities -> (category, family, category_confidence), hierarchical."""
    fam_p: dict[str, float] = {}  # one pass over the kinds (a sum per family over every kind: kinds x families)
    for k, x in zip(taxonomy.kinds, p, strict=True):
        fam_p[k.family] = fam_p.get(k.family, 0.0) + float(x)
    fam = max(fam_p, key=fam_p.__getitem__)  # ties: the family listed first (dicts keep first-seen order)
    i = max((i for i, k in enumerate(taxonomy.kinds) if k.family == fam), key=lambda i: p[i])
    return taxonomy.kinds[i].name, fam, float(p[i])


def fit(z: np.ndarray, f: np.ndarray, y: np.ndarray, n_kinds: int, digest: str, l2: float = 10.0,
        iters: int = 400, fitted_on: str = "", weight: np.ndarray | None = None,
        prior: CategoryModel | None = None) -> CategoryModel:
    """Multinomial logistic regression of kind y (index) on (z, f): full-batch gradient descent with Adam from
    `prior` (None: zero-training), L2 toward it of l2 / n per parameter, so a small label set moves little from
    where it starts. weight: per case (e.g. family-balanced), normalised to mean 1. Deterministic."""
    z, f, y = np.asarray(z, float), np.asarray(f, float), np.asarray(y, int)
    n, F = f.shape
    start = prior or CategoryModel(digest, 1.0, np.zeros(n_kinds), np.zeros((n_kinds, F)))
    a0, b0, W0 = start.a, start.b.copy(), start.W.copy()
    a, b, W = a0, b0.copy(), W0.copy()
    w = np.ones(n) if weight is None else np.asarray(weight, float) / np.mean(weight)
    Y = np.zeros((n, n_kinds))
    Y[np.arange(n), y] = 1.0
    m = [0.0, np.zeros_like(b), np.zeros_like(W)]
    v = [0.0, np.zeros_like(b), np.zeros_like(W)]
    lr, b1, b2 = 0.05, 0.9, 0.999
    for t in range(1, iters + 1):
        P = softmax(a * z + b + f @ W.T)
        G = (P - Y) * w[:, None] / n
        grads = [float((G * z).sum()) + l2 * (a - a0) / n, G.sum(0) + l2 * (b - b0) / n, G.T @ f + l2 * (W - W0) / n]
        params = [a, b, W]
        for j, g in enumerate(grads):
            m[j] = b1 * m[j] + (1 - b1) * g
            v[j] = b2 * v[j] + (1 - b2) * g * g
            params[j] = params[j] - lr * (m[j] / (1 - b1 ** t)) / (np.sqrt(v[j] / (1 - b2 ** t)) + 1e-8)
        a, b, W = params
    return CategoryModel(digest, float(a), b, W, fitted_on)


def family_weights(y: np.ndarray, taxonomy: Taxonomy) -> np.ndarray:
    """Per case 1 / (cases of its family, at least MIN_FAMILY_CASES): every family counts the same in the fit (the verdict's family is
    judged by balanced accuracy; a constant already gets the majority family's share of plain accuracy)."""
    fam = np.array([taxonomy.kinds[i].family for i in y])
    counts = {f: int((fam == f).sum()) for f in set(fam)}
    # a family seen a handful of times is not given the weight of a whole one: a few cases would steer it
    return np.array([1.0 / max(counts[f], MIN_FAMILY_CASES) for f in fam])


def load_model(taxonomy: Taxonomy, model_id: str, path: str | Path | None = None) -> CategoryModel:
    """The weights for this taxonomy and model: `path` if given, else the packaged ones when they match (TRAIL,
    the model the benchmark calibrated), else zero-training."""
    packaged = path is None
    if packaged:
        from masprism_batch.method import weights_dir

        path = weights_dir() / f"category-{taxonomy.name}-{model_id.replace('/', '_')}.json"
        if not path.is_file():
            return CategoryModel.zero(taxonomy)
    from masprism_batch.config_checks import read_regular

    raw, size = read_regular(path, MAX_WEIGHTS_BYTES)  # an operator file: a FIFO never blocks (NotRegularFile)
    if max(size, len(raw)) > MAX_WEIGHTS_BYTES:
        raise ValueError(f"category weights {path}: {max(size, len(raw)):,} bytes; at most {MAX_WEIGHTS_BYTES:,}")
    d = json.loads(raw.decode("utf-8"))
    if not isinstance(d, dict):
        raise ValueError(f"category weights {path}: a JSON {type(d).__name__}; expected the object `fit` writes")
    try:
        return CategoryModel.from_json(d, taxonomy)
    except ValueError:
        if packaged:  # the packaged weights are for TRAIL's own words: another wording is zero-training
            return CategoryModel.zero(taxonomy)
        raise
