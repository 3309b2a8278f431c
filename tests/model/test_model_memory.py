"""The signal path never materializes a T x T (or larger) tensor at T = 4096, and is deterministic."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from masprism_batch.config import ModelConfig, SignalsConfig
from masprism_batch.model import load_model


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any aten op returns (every intermediate passes through here)."""

    def __init__(self):
        super().__init__()
        self.max_numel, self.max_op = 0, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.numel() > self.max_numel:
                self.max_numel, self.max_op = t.numel(), str(func)
        return out


@pytest.fixture(scope="module")
def tiny():
    return load_model(ModelConfig(name="tiny-random", device="cpu"), SignalsConfig(backend="torch"))


def test_probe_sees_a_square_allocation():
    # the probe itself must be able to fail
    with LargestTensor() as probe:
        torch.randn(300, 8).matmul(torch.randn(8, 300))
    assert probe.max_numel == 300 * 300


def test_no_txt_tensor_at_4096(tiny):
    T = 4096
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))
    # two sequences whose total is T: the pack as a whole must not go quadratic either
    lengths = [T - 1000, 1000]
    seqs = [torch.randint(0, 256, (n,), generator=g).tolist() for n in lengths]
    sids = [[t * 40 // n for t in range(n)] for n in lengths]  # 40 steps each
    with LargestTensor() as probe:
        out = tiny.signals(seqs, sids)
    assert probe.max_numel < T * T, f"{probe.max_op} returned {probe.max_numel} elements (T^2 = {T * T})"
    assert [o.n_tokens for o in out] == lengths and out[0].step_attn.shape == (40, 40)
    assert np.isfinite(out[0].token_nll[1:]).all()


def test_same_input_bit_identical(tiny):
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))
    seqs = [torch.randint(0, 256, (n,), generator=g).tolist() for n in (37, 120, 5)]
    sids = [[t // 9 for t in range(len(s))] for s in seqs]
    a, b = tiny.signals(seqs, sids), tiny.signals(seqs, sids)
    again = load_model(ModelConfig(name="tiny-random", device="cpu"), SignalsConfig(backend="torch"))
    c = again.signals(seqs, sids)
    for x, y, z in zip(a, b, c, strict=True):
        assert np.array_equal(x.token_nll, y.token_nll, equal_nan=True)
        assert np.array_equal(x.step_attn, y.step_attn)
        assert np.array_equal(x.token_nll, z.token_nll, equal_nan=True)
        assert np.array_equal(x.step_attn, z.step_attn)


def test_bfloat16_path_runs_close_to_fp32(tiny):
    # the GPU dtype, exercised on CPU: same code path except flash-attn
    bf = load_model(ModelConfig(name="tiny-random", dtype="bfloat16"), SignalsConfig(backend="torch"))
    assert bf.weights.embed.dtype == torch.bfloat16
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,))))
    seq = torch.randint(0, 256, (150,), generator=g).tolist()
    sid = [t // 13 for t in range(150)]
    (a,), (b,) = tiny.signals([seq], [sid]), bf.signals([seq], [sid])
    assert a.token_nll.dtype == b.token_nll.dtype == np.float32
    assert np.nanmean(np.abs(a.token_nll - b.token_nll)) < 0.1 * np.nanmean(a.token_nll)
    assert np.abs(a.step_attn - b.step_attn).max() < 0.05
