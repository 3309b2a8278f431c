"""Which attention heads carry blame, learned without labels (AT2's recipe on MASPrism's step attention).

The paper averages every head of the last 20% of layers. Here each (instrumented layer, head) keeps its own
step-to-step attention A_h[k -> c], and weights w_h are fitted so that sum_h w_h A_h[k -> c] predicts the
counterfactual effect D[k, c] (method/counterfactual.py: how much step k's NLL rises when step c's content is
removed). The target needs no label, only logs, so a team refits on its own unlabelled logs with
`masprism-batch fit-heads LOGS... -o heads.json` (cli) or benchmarks/accuracy/bench_accuracy.py.
Fit: ridge least squares on per-trace standardised targets; weights are stored per model (the head layout
is the model's) and checked against the model at load.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from masprism_batch.method import weights_dir

log = logging.getLogger(__name__)


@dataclass
class HeadWeights:
    model_id: str
    weights: np.ndarray  # [L_instr, Hq]
    n_pairs: int = 0
    n_traces: int = 0

    def apply(self, Ah: np.ndarray) -> np.ndarray:
        """A_h [L, H, N, N] -> learned step attention [N, N]."""
        if Ah.shape[:2] != self.weights.shape:
            raise ValueError(f"head weights {self.weights.shape} do not match attention heads {Ah.shape[:2]}")
        return np.tensordot(self.weights, Ah, axes=([0, 1], [0, 1]))

    def to_json(self) -> str:
        return json.dumps({"model_id": self.model_id, "weights": self.weights.round(6).tolist(),
                           "n_pairs": self.n_pairs, "n_traces": self.n_traces}, indent=1)

    @classmethod
    def load(cls, path: str | Path) -> HeadWeights:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(d["model_id"], np.asarray(d["weights"], dtype=np.float64), d.get("n_pairs", 0),
                   d.get("n_traces", 0))


def pairs(Ah: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Training pairs of one trace: X [P, L*H] = A_h[k -> c], y [P] = D[k, c] standardised within the trace."""
    ks, cs = np.nonzero(np.isfinite(D))
    if ks.size < 2:
        return np.zeros((0, Ah.shape[0] * Ah.shape[1])), np.zeros(0)
    y = D[ks, cs].astype(np.float64)
    y = (y - y.mean()) / (y.std() if y.std() > 1e-9 else 1.0)
    X = Ah[:, :, ks, cs].reshape(-1, ks.size).T.astype(np.float64)
    return X, y


def fit_weights(samples: list[tuple[np.ndarray, np.ndarray]], shape: tuple[int, int], model_id: str,
        l2: float = 1.0) -> HeadWeights:
    """Ridge fit of y on X over all traces' pairs; weights scaled to sum |w| = 1 (only ranks matter)."""
    X = np.concatenate([x for x, _ in samples]) if samples else np.zeros((0, shape[0] * shape[1]))
    y = np.concatenate([t for _, t in samples]) if samples else np.zeros(0)
    if X.shape[0] < X.shape[1]:
        raise ValueError(f"{X.shape[0]} ablation pairs are too few to fit {X.shape[1]} head weights")
    sd = X.std(0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    Xs = (X - X.mean(0)) / sd
    w = np.linalg.solve(Xs.T @ Xs + l2 * len(y) * 1e-3 * np.eye(X.shape[1]), Xs.T @ (y - y.mean())) / sd
    w = w / max(np.abs(w).sum(), 1e-12)
    return HeadWeights(model_id, w.reshape(shape), int(X.shape[0]), len(samples))


def wanted(cfg, model) -> bool:
    return bool(cfg.method.learned_heads)


_CACHE: dict[str, HeadWeights | None] = {}


def packaged_path(model_id: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model_id)[:80]
    return weights_dir() / f"heads-{safe}.json"


def load_for(cfg, model) -> HeadWeights | None:
    """The configured head weights, else the packaged ones of this model, else None (feature left empty)."""
    path = Path(cfg.method.head_weights) if cfg.method.head_weights else packaged_path(model.model_id)
    key = str(path)
    if key not in _CACHE:
        hw = None
        if path.is_file():
            hw = HeadWeights.load(path)
            n_layers, n_heads = len(model.instrument_layers), model.arch.num_heads
            if hw.weights.shape != (n_layers, n_heads):
                log.warning("head weights %s are for %s heads, model has %s: not used", path, hw.weights.shape,
                            (n_layers, n_heads))
                hw = None
        elif cfg.method.head_weights:
            raise FileNotFoundError(f"head weights not found: {path} (fit them with `masprism-batch fit-heads`)")
        else:
            log.info("no packaged head weights for %s: learned-head features left empty", model.model_id)
        _CACHE[key] = hw
    return _CACHE[key]
