"""Dense fp64 oracles and random packed inputs for the signal-op tests (shared by every backend's tests).

The oracles form the full T x T attention and T x V logits in fp64: only ever used at test sizes.
Inputs are fresh random each run: tests hand their `seed` fixture (tests/conftest.py) to the case builders; the seed
is part of every case's message and a failing test's report names the MASPRISM_TEST_SEED that replays it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

# Tolerances paired with the input dtype, with why:
# - fp64: the kernels accumulate in fp64; only summation order differs -> ~1e-13 relative.
# - fp32: fp32 accumulation over up to ~1k keys / 2k vocab entries and exp/log of O(10) arguments:
#   relative error ~ sqrt(n) * 6e-8 plus the exp argument rounding (|s| * 6e-8 with |s| <= ~40), so
#   1e-4 absolute on LSE/NLL (values O(1..10)) and 2e-5 per unit of row mass leave a ~10x margin.
# - bf16/fp16 inputs: compared against fp64 math on the same (rounded) input values, so only the
#   output rounding of O (bf16 eps 7.8e-3) is extra; LSE and mass are fp32 accumulated.
TOL = {
    torch.float64: dict(o=1e-10, lse=1e-10, mass=1e-11, nll=1e-10),
    torch.float32: dict(o=2e-5, lse=1e-4, mass=2e-5, nll=1e-4),
    torch.bfloat16: dict(o=2e-2, lse=2e-3, mass=1e-3, nll=2e-3),
}


@dataclass
class AttnCase:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cu_seqlens: torch.Tensor
    step_ids: torch.Tensor
    n_steps: torch.Tensor
    scale: float
    desc: str


def _steps_for(length: int, pattern: str, g: torch.Generator) -> tuple[list[int], int]:
    """Step id per token: a -1 preamble, then steps of the given pattern, sometimes -1 gaps."""
    ids: list[int] = []
    pre = int(torch.randint(0, min(5, length), (1,), generator=g))
    ids += [-1] * pre
    n = 0
    while len(ids) < length:
        left = length - len(ids)
        if pattern == "ones":
            size = 1
        elif pattern == "giant":
            size = left if n == 0 else 1
        else:  # ragged: mostly short steps, some 1-token steps, an occasional long one
            size = int(torch.randint(1, 3, (1,), generator=g)) if n % 3 == 1 else \
                int(torch.randint(1, max(2, left // 2 + 1), (1,), generator=g))
        size = min(size, left)
        ids += [n] * size
        n += 1
        if pattern == "ragged" and len(ids) < length and float(torch.rand(1, generator=g)) < 0.2:
            ids += [-1]  # a header token outside every step
    return ids[:length], n


def make_attn_case(lengths, hq, hk, d, dtype, seed, pattern="ragged", device="cpu", q_gain=2.0) -> AttnCase:
    g = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    # q_gain > 1 makes softmax rows peaked (not near-uniform), so wrong masks or scales show up
    q = (torch.randn(T, hq, d, generator=g, dtype=torch.float64) * q_gain).to(dtype)
    k = torch.randn(T, hk, d, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(T, hk, d, generator=g, dtype=torch.float64).to(dtype)
    steps, n_steps = [], []
    for i, L in enumerate(lengths):
        ids, n = _steps_for(L, pattern if i % 2 == 0 else "ragged", g)
        steps += ids
        n_steps.append(n)
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)
    desc = f"seed={seed} lengths={lengths} hq={hq} hk={hk} d={d} {dtype} pattern={pattern}"
    return AttnCase(q.to(device), k.to(device), v.to(device), cu.to(device),
                    torch.tensor(steps, dtype=torch.int32, device=device),
                    torch.tensor(n_steps, dtype=torch.int32, device=device), d ** -0.5, desc)


def dense_step_attention(c: AttnCase):
    """fp64 oracle: full softmax per sequence; returns o [T,Hq,D], lse [Hq,T], mass [B,Nmax,Nmax] in fp64."""
    q, k, v = (x.cpu().double() for x in (c.q, c.k, c.v))
    T, hq, d = q.shape
    groups = hq // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    bounds = c.cu_seqlens.tolist()
    n_steps = c.n_steps.tolist()
    n_max = max(n_steps, default=0)
    o = torch.zeros(T, hq, d, dtype=torch.float64)
    lse = torch.zeros(hq, T, dtype=torch.float64)
    mass = torch.zeros(len(n_steps), n_max, n_max, dtype=torch.float64)
    for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        if e == s:
            continue
        scores = torch.einsum("thd,uhd->htu", q[s:e], k[s:e]) * c.scale
        scores.masked_fill_(torch.ones(e - s, e - s, dtype=torch.bool).triu(1), float("-inf"))
        lse[:, s:e] = torch.logsumexp(scores, -1)
        p = torch.softmax(scores, -1)
        o[s:e] = torch.einsum("htu,uhd->thd", p, v[s:e])
        sid = c.step_ids[s:e].cpu().long()
        n = n_steps[b]
        onehot = torch.zeros(e - s, n, dtype=torch.float64)
        keep = sid >= 0
        onehot[keep.nonzero()[:, 0], sid[keep]] = 1.0
        mass[b, :n, :n] = onehot.T @ p.mean(0) @ onehot
    return o, lse, mass


def make_nll_case(T, d, V, dtype, seed, device="cpu", ignore_index=-100):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(T, d, generator=g, dtype=torch.float64).to(dtype)
    weight = (torch.randn(V, d, generator=g, dtype=torch.float64) * 0.3).to(dtype)
    targets = torch.randint(0, V, (T,), generator=g)
    targets[torch.rand(T, generator=g) < 0.1] = ignore_index  # some ignored positions
    return hidden.to(device), weight.to(device), targets.to(device)


def dense_nll(hidden, weight, targets, ignore_index=-100):
    logits = hidden.cpu().double() @ weight.cpu().double().T
    t = targets.cpu().long()
    nll = torch.logsumexp(logits, -1) - logits.gather(1, t.clamp_min(0)[:, None])[:, 0]
    return torch.where(t == ignore_index, torch.full_like(nll, float("nan")), nll)


def poisoned_attn_out(c: AttnCase, lse_mass_dtype=torch.float32):
    T, hq, d = c.q.shape
    n_max = int(c.n_steps.max()) if c.n_steps.numel() else 0
    dev = c.q.device
    return (torch.full_like(c.q, float("nan")),
            torch.full((hq, T), float("nan"), dtype=lse_mass_dtype, device=dev),
            torch.full((c.n_steps.numel(), n_max, n_max), float("nan"), dtype=lse_mass_dtype, device=dev))


def assert_close(name, got, want, atol, desc, rtol=0.0):
    got64 = got.detach().cpu().double()
    assert got64.shape == want.shape, f"{name}: shape {tuple(got64.shape)} != {tuple(want.shape)} ({desc})"
    both_nan = torch.isnan(got64) & torch.isnan(want)
    assert not bool((torch.isnan(got64) & ~both_nan).any()), f"{name}: unexpected nan ({desc})"
    err = (got64 - want).abs().masked_fill(both_nan, 0.0)
    bound = atol + rtol * want.abs().masked_fill(both_nan, 0.0)
    worst = float((err - bound).max()) if err.numel() else -1.0
    assert worst <= 0, f"{name}: max abs err {float(err.max()):.3e} exceeds tol (atol={atol}, rtol={rtol}) ({desc})"


def check_attention(c: AttnCase, got, tol):
    o, lse, mass = dense_step_attention(c)
    assert_close("o", got[0], o, tol["o"], c.desc, rtol=tol["o"])
    assert_close("lse", got[1], lse, tol["lse"], c.desc, rtol=tol["lse"])
    # the mass of step row i sums up to |T_i|; scale the tolerance by the row's token count
    rows = mass.sum(-1, keepdim=True).clamp_min(1.0)
    # the oracle lives on the CPU; a CUDA mass is brought to it (not the other way: rows is fp64)
    assert_close("mass", got[2].detach().cpu().double() / rows, mass / rows, tol["mass"], c.desc)


def dense_step_mass_per_head(c: AttnCase):
    """fp64 oracle of the per-head mass [B, Hq, Nmax, Nmax]: per head h, sum over (t in i, u in j) of p_h(t, u)."""
    q, k = c.q.cpu().double(), c.k.cpu().double()
    hq = q.shape[1]
    k = k.repeat_interleave(hq // k.shape[1], 1)
    n_steps = c.n_steps.tolist()
    n_max = max(n_steps, default=0)
    mass = torch.zeros(len(n_steps), hq, n_max, n_max, dtype=torch.float64)
    bounds = c.cu_seqlens.tolist()
    for b, (s, e) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        n = n_steps[b]
        if e == s or n == 0:
            continue
        scores = torch.einsum("thd,uhd->htu", q[s:e], k[s:e]) * c.scale
        scores.masked_fill_(torch.ones(e - s, e - s, dtype=torch.bool).triu(1), float("-inf"))
        p = torch.softmax(scores, -1)
        sid = c.step_ids[s:e].cpu().long()
        onehot = torch.zeros(e - s, n, dtype=torch.float64)
        keep = sid >= 0
        onehot[keep.nonzero()[:, 0], sid[keep]] = 1.0
        mass[b, :, :n, :n] = onehot.T @ p @ onehot
    return mass


# ---- backends ------------------------------------------------------------------------------------------------
# Every op test is parametrised over the backends that can run in this process: torch (the reference), cpp
# when the extension is built, triton on CUDA or under TRITON_INTERPRET=1 (fp32/fp16 on CPU). On a CPU-only
# machine the triton cases run in a subprocess (`run_triton_cases`): TRITON_INTERPRET must be set before triton
# is first imported, and by the time a test module runs, torch/transformers have imported it.
def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def backends(*only: str) -> list[str]:
    """The backends available in this process (restricted to `only` when given)."""
    from masprism_batch import signals

    out = ["torch"]
    if signals.cpp_available() is None:
        out.append("cpp")
    if signals.triton_available() is None and (torch.cuda.is_available() or _interpreting()):
        out.append("triton")
    return [b for b in out if not only or b in only]


def backend_params(*only: str) -> list:
    """For parametrize: the available backends, and each unavailable one as a skipped case that says why
    (triton without CUDA runs in a TRITON_INTERPRET=1 subprocess: see run_triton_cases)."""
    import pytest

    from masprism_batch import signals

    have = backends(*only)
    out = []
    for b in [b for b in ("torch", "cpp", "triton") if not only or b in only]:
        if b in have:
            out.append(b)
            continue
        why = signals.cpp_available() if b == "cpp" else signals.triton_available()
        reason = (f"{b} backend unavailable here: {why}" if why is not None else
                  "triton without CUDA needs TRITON_INTERPRET=1 at import: these cases run in the interpreter "
                  "subprocess of run_triton_cases (test_triton_cases_in_interpreter_subprocess)")
        out.append(pytest.param(b, marks=pytest.mark.skip(reason=reason)))
    return out


def device_of(backend: str) -> str:
    return "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"


def run_triton_cases(test_file) -> None:
    """Run `test_file`'s triton cases (`-k triton`) in a fresh interpreter with TRITON_INTERPRET=1; every one
    must pass and none may be skipped. Skips on CUDA, where they run in this process, and without triton."""
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    from masprism_batch import signals

    if (why := signals.triton_available()) is not None:
        pytest.skip(f"triton cannot run here: {why}")
    if torch.cuda.is_available() or _interpreting():
        pytest.skip("the triton cases run in this process (CUDA, or already interpreting)")
    here = Path(test_file).parent
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(test_file), "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=",
         "--rootdir", str(here), "-k", "triton and not subprocess"],
        cwd=here, env=env, capture_output=True, text=True, timeout=900)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"triton cases failed (rc={proc.returncode}):\n{tail}"
    assert " passed" in tail and "skipped" not in tail, f"triton cases did not all run:\n{tail}"
