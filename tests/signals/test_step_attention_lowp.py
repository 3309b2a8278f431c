"""The op `step_attention` in 16-bit at Qwen3-0.6B shapes (triton; the other cases: test_step_attention.py).

On CPU the cases run under TRITON_INTERPRET=1 in a subprocess (test_triton_cases_in_interpreter_subprocess), fp16
only; on a GPU in this process, bf16 too.
"""

from __future__ import annotations

import pytest
import torch
from signals_oracle import (
    backend_params,
    dense_step_attention,
    device_of,
    make_attn_case,
    poisoned_attn_out,
    run_triton_cases,
)

from masprism_batch import signals


@pytest.mark.kernel
def test_triton_cases_in_interpreter_subprocess():
    run_triton_cases(__file__)


def _call(c, backend, **kw):
    return signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend=backend, **kw)


# Tolerance rule (flash-attention's): the kernel's error against the fp64 oracle (computed on the same
# 16-bit-rounded inputs) must be at most 2x the error of a plain PyTorch implementation run in that dtype on
# those inputs, plus a floor of one rounding of the output (2^-11 relative in fp16) for the cases where plain
# 16-bit happens to be exact. The kernels accumulate in fp32, so they should sit far below the bound; a wrong
# mask, scale or accumulation dtype does not. bf16 is NOT checked numerically on the interpreter: its bf16 dot
# is wrong (triton-lang/triton#11584); bf16 is covered by the AOT compile test only, and by gpu_smoke.sh on a GPU.
QWEN3 = dict(hq=16, hk=8, d=128)
EPS = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}  # unit roundoff of the output dtype
LOW_DTYPES = [torch.float16] + ([torch.bfloat16] if torch.cuda.is_available() else [])


def _plain_lowp_attention(c):
    """Eager attention in the inputs' 16-bit dtype: scores, softmax, P@V, LSE and mass all in that dtype."""
    q, k, v = c.q.cpu(), c.k.cpu(), c.v.cpu()
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    bounds, n_steps = c.cu_seqlens.tolist(), c.n_steps.tolist()
    o = torch.zeros_like(q)
    lse = torch.zeros(q.shape[1], q.shape[0], dtype=q.dtype)
    mass = torch.zeros(len(n_steps), max(n_steps), max(n_steps), dtype=q.dtype)
    for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        scores = torch.einsum("thd,uhd->htu", q[s:e], k[s:e]) * torch.tensor(c.scale, dtype=q.dtype)
        scores.masked_fill_(torch.ones(e - s, e - s, dtype=torch.bool).triu(1), float("-inf"))
        lse[:, s:e] = torch.logsumexp(scores, -1)
        p = torch.softmax(scores, -1)
        o[s:e] = torch.einsum("htu,uhd->thd", p, v[s:e])
        n = n_steps[b]
        sid = c.step_ids[s:e].cpu().long()
        onehot = torch.zeros(e - s, n, dtype=q.dtype)
        keep = sid >= 0
        onehot[keep.nonzero()[:, 0], sid[keep]] = 1.0
        mass[b, :n, :n] = onehot.T @ p.mean(0) @ onehot
    return o, lse, mass


def _err(got, want, rows=None):
    got, want = got.detach().cpu().double(), want.double()
    if rows is not None:
        got, want = got / rows, want / rows
    return float((got - want).abs().max())


@pytest.mark.parametrize("dtype", LOW_DTYPES)
@pytest.mark.parametrize("backend", backend_params("triton"))
def test_16bit_qwen3_shapes_within_2x_plain(backend, dtype, seed):
    # 200 tokens = two 128-row query blocks, the second with unmasked key tiles; ragged pack with a 1-token sequence
    c = make_attn_case([200, 47, 1], QWEN3["hq"], QWEN3["hk"], QWEN3["d"], dtype, seed, "ragged",
                       device=device_of(backend))
    out = poisoned_attn_out(c)
    got = _call(c, backend, out=out)
    o64, lse64, mass64 = dense_step_attention(c)
    plain = _plain_lowp_attention(c)
    rows = mass64.sum(-1, keepdim=True).clamp_min(1.0)
    for name, g, p, want, r, scale in (("o", got[0], plain[0], o64, None, float(o64.abs().max())),
                                       ("lse", got[1], plain[1], lse64, None, float(lse64.abs().max())),
                                       ("mass", got[2], plain[2], mass64, rows, 1.0)):
        assert not bool(torch.isnan(g).any()), f"{name}: nan left in the output ({c.desc})"
        e_kernel, e_plain = _err(g, want, r), _err(p, want, r)
        bound = 2 * e_plain + EPS[dtype] * scale
        assert e_kernel <= bound, f"{name}: err {e_kernel:.3e} > 2 x plain {dtype} {e_plain:.3e} + floor ({c.desc})"
