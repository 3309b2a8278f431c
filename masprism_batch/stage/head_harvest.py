"""Refit head weights on a team's own unlabelled logs: the stage's counterfactuals are the training target.

Per trace: pass 1 (windows), pass 2 with per-head attention and the K/V cache, counterfactual effects of the
first `method.counterfactual_k` candidates (method/counterfactual.py); pairs (A_h[k -> c], D[k, c]) of every
trace are pooled and fitted (heads.fit_weights). No label is read: any folder of failed runs will do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np

from masprism_batch.method import heads as hd
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)


def harvest(traces: Iterable[Trace], model, cfg, progress=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Training pairs of each trace (traces that yield none, e.g. one step, are skipped)."""
    from masprism_batch.stage.attribute import attribute_traces

    fit_cfg = cfg.model_copy(update={"method": cfg.method.model_copy(
        update={"name": "masprism", "learned_heads": True, "counterfactual_k": max(cfg.method.counterfactual_k, 1)})})
    samples = []
    for t in traces:
        raw: dict = {}
        attribute_traces([t], model, fit_cfg, raw_sink=lambda _t, d, raw=raw: raw.update(d))  # bound now (B023)
        s2, D = raw.get("sig2"), raw.get("cf")
        if s2 is not None and D is not None and s2.step_attn_heads is not None:
            X, y = hd.pairs(s2.step_attn_heads.astype(np.float64), D)
            if y.size:
                samples.append((X, y))
        if progress is not None:
            progress(t)
    return samples


def fit_model_heads(traces: Iterable[Trace], model, cfg, progress=None) -> hd.HeadWeights:
    samples = harvest(traces, model, cfg, progress)
    shape = (len(model.instrument_layers), model.arch.num_heads)
    hw = hd.fit_weights(samples, shape, model.model_id)
    log.info("head weights for %s from %d pairs of %d traces", model.model_id, hw.n_pairs, hw.n_traces)
    return hw
