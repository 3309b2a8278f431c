"""No glue in the packed forward (issue 33 item 4): the torch profiler counts the copy/index ops of one packed
signals forward of tiny-random, every nested call included (a copy inside an op's implementation counts too),
so per-layer scatters, GQA repeats, K/V copies and per-sequence re-indexing cannot creep back.

Before the fix one forward of this pack made ~24-27 such calls per layer (rms_norm's Python-scalar operands
converted per call, a copy per sequence out of SDPA, q/k/v made contiguous, the C++ op copying K/V per
sequence and q and O per block, per-sequence index/bincount in the split, the NLL targets scattered); now
the C++ op permutes q once and writes O once per pack and the host bookkeeping is numpy.
"""

from __future__ import annotations

import collections

import pytest
import torch

from masprism_batch import signals
from masprism_batch.config import SignalsConfig
from masprism_batch.model.loader import build_model
from masprism_batch.model.tiny import tiny_config, tiny_state_dict, tiny_tokenizer

GLUE = ("aten::copy_", "aten::clone", "aten::index", "aten::index_put_", "aten::repeat_interleave")
MAX_PER_LAYER = 4


def _glue_of_one_forward(model, seqs, sids, **kw) -> collections.Counter:
    from torch.profiler import ProfilerActivity, profile

    model.signals(seqs, sids, **kw)  # warm: one-time caches are not the forward's glue
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model.signals(seqs, sids, **kw)
    return collections.Counter(e.name for e in prof.events() if e.name in GLUE)


def _pack(seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = [47, 123, 300, 1]  # ragged, odd, a 1-token sequence
    seqs = [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]
    sids = []
    for n in lengths:  # contiguous steps of random lengths with -1 gaps
        cuts = torch.randint(3, 30, (n,), generator=g).cumsum(0)
        step = torch.searchsorted(cuts, torch.arange(n), right=True)
        sids.append(torch.where(torch.rand(n, generator=g) < 0.1, -1, step).tolist())
    return seqs, sids


def test_packed_forward_glue_ops_per_layer(seed):
    if (why := signals.cpp_available()) is not None:  # the CPU production path is the C++ op
        pytest.skip(f"C++ extension not built: {why}")
    cfg = tiny_config()
    model = build_model(cfg, tiny_state_dict(cfg), tiny_tokenizer(), SignalsConfig(backend="cpp"), model_id="tiny")
    seqs, sids = _pack(seed)
    counts = _glue_of_one_forward(model, seqs, sids)
    per_layer = sum(counts.values()) / model.num_layers
    assert per_layer <= MAX_PER_LAYER, f"{per_layer:.2f} glue ops per layer > {MAX_PER_LAYER}: {dict(counts)} (seed {seed})"
