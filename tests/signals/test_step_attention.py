"""The op `step_attention` (kernels/step_attention.py, csrc/step_attention/, signals/reference.py, dispatch in
signals/dispatch.py) on every backend available here, against the dense fp64 oracle (signals_oracle.py).

Backends: torch (the reference), cpp (when built), triton (CUDA, or CPU under TRITON_INTERPRET=1 in a
subprocess: test_triton_cases_in_interpreter_subprocess; fp32/fp16 there, bf16 only on a GPU). Fresh random
inputs every run (seed in every message; MASPRISM_TEST_SEED replays), odd lengths (47, 123, 1023), ragged
steps and sequences, every GQA ratio, outputs poisoned with nan. Tolerances: signals_oracle.TOL (explained there).
16-bit at Qwen3-0.6B shapes: test_step_attention_lowp.py.
"""

from __future__ import annotations

import pytest
import torch
from signals_oracle import (
    TOL,
    assert_close,
    backend_params,
    backends,
    check_attention,
    dense_step_mass_per_head,
    device_of,
    make_attn_case,
    poisoned_attn_out,
    run_triton_cases,
)

from masprism_batch import signals
from masprism_batch.signals import reference

BACKENDS = backends()

SHAPES = [  # (lengths packed together, Hq, Hk, D, step pattern)
    ([47], 4, 4, 64, "ragged"),  # GQA ratio 1
    ([123, 47], 4, 2, 64, "ones"),  # ratio 2, 1-token steps
    ([1023], 8, 2, 64, "giant"),  # ratio 4, one giant step
    ([47, 123, 5, 1], 8, 1, 128, "ragged"),  # ratio 8, tiny sequences
]
# the interpreter runs every loaded element through numpy: smaller packs, still every GQA ratio, both head dims
TRITON_SHAPES = [
    ([47], 2, 2, 64, "ragged"),
    ([123, 47, 1], 4, 2, 64, "ones"),
    ([123], 4, 1, 128, "giant"),
    ([47, 9], 8, 1, 64, "ragged"),
]
DTYPES = {"torch": [torch.float32, torch.float64], "cpp": [torch.float32, torch.float64, torch.bfloat16],
          "triton": [torch.float32]}


def _cases(shapes_of, dtypes_of=None):
    out = []
    for be in BACKENDS:
        for shape in shapes_of(be):
            for dt in (dtypes_of(be) if dtypes_of else [None]):
                sid = f"{be}-{shape[0]}-{shape[1]}x{shape[2]}x{shape[3]}-{shape[4]}" + (f"-{dt}" if dt else "")
                out.append(pytest.param(be, *shape, *([dt] if dt else []), id=sid))
    return out


def _call(c, backend, **kw):
    return signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend=backend, **kw)


@pytest.mark.kernel
def test_triton_cases_in_interpreter_subprocess():
    run_triton_cases(__file__)


@pytest.mark.parametrize("backend,lengths,hq,hk,d,pattern,dtype",
                         _cases(lambda be: TRITON_SHAPES if be == "triton" else SHAPES, lambda be: DTYPES[be]))
def test_matches_dense_oracle(backend, lengths, hq, hk, d, pattern, dtype, seed):
    c = make_attn_case(lengths, hq, hk, d, dtype, seed, pattern, device=device_of(backend))
    out = poisoned_attn_out(c, reference.compute_dtype(dtype))
    got = _call(c, backend, block=64, out=out)
    assert all(g is p for g, p in zip(got, out, strict=True)), "out tensors must be the ones returned"
    check_attention(c, got, TOL[dtype])


@pytest.mark.parametrize("backend", backend_params("torch", "cpp"))
def test_bf16_inputs_accumulate_in_fp32(backend, seed):
    c = make_attn_case([123, 47], 8, 2, 64, torch.bfloat16, seed, "ragged")
    got = _call(c, backend)
    assert got[0].dtype == torch.bfloat16 and got[1].dtype == torch.float32 and got[2].dtype == torch.float32
    check_attention(c, got, TOL[torch.bfloat16])


@pytest.mark.parametrize("backend", backend_params("triton"))
def test_triton_long_odd_sequence(backend, seed):
    """T = 1023 with several query blocks per sequence (the launcher itself); one head pair keeps the
    interpreter quick. torch and cpp take T = 1023 in test_matches_dense_oracle."""
    from masprism_batch.kernels import step_attention as tk

    c = make_attn_case([1023], 2, 1, 64, torch.float32, seed, "ragged", device=device_of(backend))
    got = tk.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)
    check_attention(c, got, TOL[torch.float32])


@pytest.mark.parametrize("backend", backend_params())
def test_mass_is_deterministic(backend, seed):
    c = make_attn_case([123, 47], 4, 2, 64, torch.float32, seed, "ragged", device=device_of(backend))
    a, b = _call(c, backend)[2], _call(c, backend)[2]
    assert torch.equal(a, b), "deterministic ownership: two runs must be bit-identical"


@pytest.mark.parametrize("backend", backend_params("cpp"))
def test_mass_independent_of_thread_count(backend, seed):
    c = make_attn_case([123, 47], 8, 2, 64, torch.float32, seed, "ragged")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _call(c, backend)[2]
        torch.set_num_threads(max(2, threads))
        many = _call(c, backend)[2]
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many), "row-owned buffers summed in row order must be bit-identical"


def _raw_op(backend):
    if backend == "cpp":
        from masprism_batch.signals import cpp  # noqa: F401  (registers the fake kernels opcheck needs)

        return torch.ops.masprism.step_attention
    from masprism_batch.signals import triton  # noqa: F401  (registers torch.ops.masprism_triton.*)

    return torch.ops.masprism_triton.step_attention


def _raw_args(c, backend, per_head=False):
    args = (c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, int(c.n_steps.max()))
    return args + ((per_head,) if backend == "triton" else ())


@pytest.mark.parametrize("backend", backend_params("cpp", "triton"))
def test_raw_outputs_fully_defined(backend, seed):
    """The registered op's own allocations (not only the copy into `out`): padding of shorter sequences is 0."""
    c = make_attn_case([47, 123, 1], 4, 2, 64, torch.float32, seed, "ragged", device=device_of(backend))
    o, lse, mass = _raw_op(backend)(*_raw_args(c, backend))
    assert torch.isfinite(o).all() and torch.isfinite(lse).all() and torch.isfinite(mass).all()
    for b, n in enumerate(c.n_steps.tolist()):
        assert not mass[b, n:].any() and not mass[b, :, n:].any()


@pytest.mark.parametrize("backend", backend_params("triton"))
def test_triton_launcher_writes_every_element_of_out(backend, seed):
    """The launcher writes straight into `out` (the registered op allocates fresh tensors): every element of
    poisoned (o, lse, mass) is overwritten with the oracle's values."""
    from masprism_batch.kernels import step_attention as tk

    c = make_attn_case([123, 47, 1], 4, 2, 64, torch.float32, seed, "ragged", device=device_of(backend))
    out = poisoned_attn_out(c)
    got = tk.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, out=out)
    assert all(g is p for g, p in zip(got, out, strict=True))
    check_attention(c, got, TOL[torch.float32])


@pytest.mark.parametrize("backend,per_head",  # no C++ per-head kernel (the dispatcher routes it to the reference)
                         [(be, ph) for be in backends("cpp", "triton") for ph in ([False, True] if be == "triton" else [False])])
def test_opcheck(backend, per_head, seed):
    c = make_attn_case([47, 9], 4, 2, 64, torch.float32, seed, "ragged", device=device_of(backend))
    torch.library.opcheck(_raw_op(backend).default, _raw_args(c, backend, per_head))


@pytest.mark.parametrize("backend", backend_params())
def test_noncontiguous_steps(backend, seed):
    """Step ids that come back after another step (allowed by the API, never produced by render): on triton
    the kernel's read-modify-write path for a step it already stored must still give the oracle's mass."""
    c = make_attn_case([123, 47], 4, 2, 64, torch.float32, seed, "ragged", device=device_of(backend))
    g = torch.Generator().manual_seed(abs(hash(c.desc)) % 2**31)
    sid = c.step_ids.cpu().clone()
    for b, (s, e) in enumerate(zip(c.cu_seqlens.tolist()[:-1], c.cu_seqlens.tolist()[1:], strict=True)):
        n = int(c.n_steps[b])
        if n:  # every token a random step (some -1): steps interleave within and across key tiles
            sid[s:e] = torch.randint(-1, n, (e - s,), generator=g, dtype=torch.int32)
    c.step_ids = sid.to(c.q.device)
    c.desc += " noncontiguous"
    check_attention(c, _call(c, backend, out=poisoned_attn_out(c)), TOL[torch.float32])


# the default (dot) path on rendered-like steps runs in every other triton case; here: the loop fallback, and the
# dot kernel forced onto interleaved ids (windows left and re-opened). Small packs: the interpreter is slow.
@pytest.mark.parametrize("pattern,kernel", [("noncontiguous", "dot"), ("ragged", "loop"), ("noncontiguous", "loop")])
@pytest.mark.parametrize("backend", backend_params("triton"))
def test_triton_mass_kernels_match_oracle(backend, pattern, kernel, seed):
    """Both pass-2 kernels (kernels/step_mass.py): the one-hot dot kernel (the default path, which every other
    triton case takes, 1-token steps included: a key tile then spans BLOCK_N ids, the widest window) forced onto
    interleaved ids, and the per-step loop kernel (the fallback, forced with STEPS=0), per head and head mean,
    against the fp64 oracle."""
    from masprism_batch.kernels import step_attention as tk
    from masprism_batch.kernels import step_plan as sp

    c = make_attn_case([70, 9, 1], 4, 2, 64, torch.float32, seed, "ragged", device=device_of(backend))
    if pattern == "noncontiguous":  # random ids, -1 included: windows are left and re-opened (read-modify-write)
        g = torch.Generator().manual_seed(abs(hash(c.desc)) % 2**31)
        sid = c.step_ids.cpu().clone()
        for b, (s, e) in enumerate(zip(c.cu_seqlens.tolist()[:-1], c.cu_seqlens.tolist()[1:], strict=True)):
            if int(c.n_steps[b]):
                sid[s:e] = torch.randint(-1, int(c.n_steps[b]), (e - s,), generator=g, dtype=torch.int32)
        c.step_ids = sid.to(c.q.device)
        c.desc += " noncontiguous"
    o, lse = tk.attention_lse(c.q, c.k, c.v, c.cu_seqlens, c.scale)
    cfg = tk.mass_config(c.q.dtype, c.q.shape[2], 2, 80, per_head=False)
    plan = sp.Plan(c.cu_seqlens, c.step_ids, c.n_steps, c.q.device)
    if pattern == "ragged":  # rendered-like steps take the dot kernel by default
        assert sp.window_steps(plan.max_span(cfg["BLOCK_N"]), cfg["STEPS"]) > 0, c.desc
    if kernel == "loop":
        cfg["STEPS"] = 0
    else:
        cfg["STEPS"] = 1 << 20  # the dot kernel even where the default would fall back (noncontiguous)
    mass = tk.step_mass(c.q, c.k, lse, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, config=dict(cfg))
    check_attention(c, (o, lse, mass), TOL[torch.float32])
    cfg1 = tk.mass_config(c.q.dtype, c.q.shape[2], 2, 80, per_head=True) | {"STEPS": cfg["STEPS"]}
    heads = tk.step_mass(c.q, c.k, lse, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, config=cfg1, per_head=True)
    want = dense_step_mass_per_head(c)
    rows = want.sum(-1, keepdim=True).clamp_min(1.0)
    assert_close("mass per head", heads.cpu().double() / rows, want / rows, TOL[torch.float32]["mass"], c.desc)


PER_HEAD_SHAPES = SHAPES[:2] + [([47, 123, 5, 1], 8, 2, 64, "ragged")]
TRITON_PER_HEAD_SHAPES = [([123, 47, 1], 4, 2, 64, "ragged"), ([47, 9], 6, 2, 128, "ragged")]


def _per_head_cases():
    out = []
    for be in BACKENDS + ["auto"]:
        for lengths, hq, hk, d, pattern in (TRITON_PER_HEAD_SHAPES if be == "triton" else PER_HEAD_SHAPES):
            out.append(pytest.param(be, lengths, hq, hk, d, pattern, id=f"{be}-{lengths}-{hq}x{hk}x{d}-{pattern}"))
    return out


@pytest.mark.parametrize("backend,lengths,hq,hk,d,pattern", _per_head_cases())
def test_per_head_matches_oracle(backend, lengths, hq, hk, d, pattern, seed):
    """per_head=True: mass per query head [B, Hq, N, N] (GQA, ragged packs), each head's sum (no mean); it
    matches the torch reference's per-head mass, and its head mean is the same backend's default mass."""
    c = make_attn_case(lengths, hq, hk, d, torch.float32, seed, pattern, device=device_of(backend))
    n_max = int(c.n_steps.max())
    out = poisoned_attn_out(c)
    out = (out[0], out[1], torch.full((len(lengths), hq, n_max, n_max), float("nan"), device=c.q.device))
    got = _call(c, backend, block=32, out=out, per_head=True)
    assert got[2] is out[2]
    want = dense_step_mass_per_head(c)
    rows = want.sum(-1, keepdim=True).clamp_min(1.0)
    assert got[2].shape == want.shape
    assert not torch.isnan(got[2]).any(), f"unwritten per-head mass ({c.desc})"
    assert_close("mass per head", got[2] / rows.to(got[2].device), want / rows, TOL[torch.float32]["mass"], c.desc)
    ref = _call(c, "torch", per_head=True)[2]  # the reference's per-head mass (the one cpp routes to)
    assert_close("mass per head vs torch reference", got[2] / rows.to(got[2].device), ref.cpu().double() / rows,
                 2 * TOL[torch.float32]["mass"], c.desc)
    mean = _call(c, backend)[2]
    if backend == "triton":
        torch.testing.assert_close(got[2].mean(1), mean, rtol=1e-5, atol=1e-5)
    else:
        torch.testing.assert_close(got[2].mean(1), mean, rtol=0, atol=1e-5 * float(rows.max()))


# ---- the torch reference's own paths --------------------------------------------------------------------------------
def test_reference_blockwise_fallback_matches_oracle(monkeypatch, seed):
    """The non-CPU path (no fused CPU flash op) is the blockwise softmax; force it here."""
    monkeypatch.setattr(reference, "_flash_cpu", lambda *a: None)
    c = make_attn_case([123, 47], 4, 2, 64, torch.float32, seed, "ragged")
    got = reference.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, block=32)
    check_attention(c, got, TOL[torch.float32])


def test_reference_small_score_budget_gives_same_mass(monkeypatch, seed):
    c = make_attn_case([123], 4, 4, 64, torch.float64, seed, "ragged")
    full = reference.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)[2]
    monkeypatch.setattr(reference, "SCORE_BUDGET", 1)  # forces the minimum block of 16 rows
    small = reference.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale)[2]
    torch.testing.assert_close(small, full, rtol=0, atol=1e-12)


# ---- dispatch -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", backend_params())
def test_bad_inputs_raise_clear_errors(backend, seed):
    c = make_attn_case([47], 4, 2, 64, torch.float32, seed, device=device_of(backend))
    with pytest.raises(ValueError, match="Hq % Hk"):
        signals.step_attention(c.q, c.k[:, :1].expand(-1, 3, -1), c.v[:, :1].expand(-1, 3, -1),
                               c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend=backend)
    with pytest.raises(ValueError, match="cu_seqlens"):
        signals.step_attention(c.q, c.k, c.v, c.cu_seqlens + 1, c.step_ids, c.n_steps, c.scale, backend=backend)
    with pytest.raises(ValueError, match="n_steps"):
        signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps - 1, c.scale, backend=backend)
    with pytest.raises(ValueError, match="unknown signals backend"):
        signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, backend="cuda")


def test_backend_options_are_keyword_only(seed):
    c = make_attn_case([47], 4, 2, 64, torch.float32, seed)
    with pytest.raises(TypeError):
        signals.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, "torch")
    with pytest.raises(TypeError):
        reference.step_attention(c.q, c.k, c.v, c.cu_seqlens, c.step_ids, c.n_steps, c.scale, 64)
