"""The C++ CPU backend (masprism_batch._C) against the dense fp64 oracle, plus torch.library.opcheck."""

from __future__ import annotations

import pytest
import torch
from signals_oracle import (
    TOL,
    check_attention,
    dense_nll,
    make_attn_case,
    make_nll_case,
    new_seed,
    poisoned_attn_out,
)

from masprism_batch import signals
from masprism_batch.signals import reference

pytestmark = pytest.mark.skipif(signals.cpp_available() is not None,
                                reason=f"C++ extension not built: {signals.cpp_available()}")
if signals.cpp_available() is None:
    from masprism_batch.signals import cpp  # noqa: F401  (registers the fake kernels opcheck needs)

SHAPES = [  # (lengths packed together, Hq, Hk, D, step pattern): GQA ratios 1/2/4/8, odd lengths
    ([47], 4, 4, 64, "ragged"),
    ([123, 47], 4, 2, 64, "ones"),
    ([1023], 8, 2, 64, "giant"),
    ([47, 123, 5, 1], 8, 1, 128, "ragged"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("lengths,hq,hk,d,pattern", SHAPES)
def test_cpp_step_attention_matches_dense_oracle(lengths, hq, hk, d, pattern, dtype):
    c = make_attn_case(lengths, hq, hk, d, dtype, new_seed(), pattern)
    out = poisoned_attn_out(c, reference.compute_dtype(dtype))
    got = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="cpp", out=out)
    check_attention(c, got, TOL[dtype])


def test_cpp_raw_outputs_fully_defined():
    """The op's own allocations (not only the copy into `out`): padding of shorter sequences is 0."""
    c = make_attn_case([47, 123, 1], 4, 2, 64, torch.float32, new_seed(), "ragged")
    o, lse, mass = torch.ops.masprism.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps,
                                                     c.scale, int(c.n_steps.max()))
    assert torch.isfinite(o).all() and torch.isfinite(lse).all() and torch.isfinite(mass).all()
    for b, n in enumerate(c.n_steps.tolist()):
        assert not mass[b, n:].any() and not mass[b, :, n:].any()


def test_cpp_mass_independent_of_thread_count():
    c = make_attn_case([123, 47], 8, 2, 64, torch.float32, new_seed(), "ragged")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="cpp")[2]
        torch.set_num_threads(max(2, threads))
        many = signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="cpp")[2]
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many), "row-owned buffers summed in row order must be bit-identical"


def test_cpp_backend_token_nll_is_the_reference():
    """No C++ NLL kernel is kept (it did not beat the reference); the cpp backend must still be correct."""
    hidden, weight, targets = make_nll_case(47, 64, 1237, torch.float32, new_seed())
    got = signals.token_nll(hidden, weight, targets, backend="cpp", chunk=16)
    torch.testing.assert_close(got.double(), dense_nll(hidden, weight, targets), rtol=0, atol=TOL[torch.float32]["nll"],
                               equal_nan=True)


def test_opcheck_step_attention():
    c = make_attn_case([47, 9], 4, 2, 64, torch.float32, new_seed(), "ragged")
    args = (c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, int(c.n_steps.max()))
    torch.library.opcheck(torch.ops.masprism.step_attention.default, args)
