"""Ahead-of-time compile of every Triton kernel the project launches, for A100 (sm_80) and H100 (sm_90),
on this CPU-only machine (no GPU is needed: Triton compiles to a cubin with the ptxas its wheel bundles).

The real launchers are driven with CPU tensors while a recorder stands in for each kernel
(masprism_batch.kernels.aot), so the compiled specialisation (block sizes, warps, stages, integer and
pointer attributes) is the one a GPU of that target would get. Asserted per compiled kernel:
  - it compiles (LLVM + ptxas) for the target;
  - shared memory <= the target's opt-in limit per block (166,912 B sm_80, 232,448 B sm_90);
  - no register spills (cuobjdump STACK bytes) in bf16/fp16; fp32 spills are allowed and reported
    (fp32 is a debugging path on GPU: IEEE dot products run on CUDA cores, not tensor cores).
fp32 is included because the dispatcher takes the model's dtype as is, so an fp32 model on GPU launches it.
This checks compile-time resources only: numerics are checked under the interpreter (tests/signals/test_step_attention.py,
tests/signals/test_token_nll.py) and bf16 numerics are NOT checked anywhere without a GPU (the interpreter's bf16 dot
is unreliable, triton-lang/triton#11584).

The first run compiles ~50 kernels in a 2-process pool (~1 CPU-minute each way); Triton's on-disk cache
(~/.triton/cache) makes later runs a few seconds.
"""

from __future__ import annotations

import pytest
import torch
from masprism_batch.kernels import aot, aot_report

pytestmark = pytest.mark.kernel  # the kernels' tests (Triton interpreter, AOT compile, GPU runbook): -m 'not kernel' skips


@pytest.fixture(scope="module")
def compiled():
    if (why := aot.unavailable()) is not None:
        pytest.skip(f"AOT compile cannot run here: {why}")
    launches = [x for cap in aot.TARGETS for x in aot.collect_launches(cap)]
    return aot.compile_all(launches)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_kernels_compile_within_target_limits(compiled, target, dtype):
    rows = [r for r in compiled if r["target"] == target and r["dtype"] == dtype]
    # every kernel the project launches is covered, for both models' shapes
    assert {r["kernel"] for r in rows} == {"_attn_fwd", "_step_mass_dot", "_step_mass", "_sum_step_rows",
                                            "_nll_partial", "_rms_norm", "_qk_norm_rope", "_silu_mul"}
    labels = " & ".join(r["label"] for r in rows if r["kernel"] == "_step_mass_dot").split(" & ")
    assert {"qwen3-0.6b", "qwen3-0.6b per_head", "qwen3-0.6b widest window", "smollm2-135m", "smollm2-135m per_head",
            "smollm2-135m widest window"} <= set(labels)
    # the loop kernel is the fallback for packs whose key tiles span more step ids than the window holds
    labels = " & ".join(r["label"] for r in rows if r["kernel"] == "_step_mass").split(" & ")
    assert {"qwen3-0.6b loop fallback", "smollm2-135m loop fallback"} <= set(labels)
    bad = [f"{r['kernel']} [{r['label']}]: {p}" for r in rows for p in aot_report.problems(r)]
    table = aot_report.markdown(rows)
    assert not bad, f"{target} {dtype}:\n" + "\n".join(bad) + "\n" + table


def test_oversized_config_is_caught():
    """Negative control: the pre-fix pass-1 config (64x64 tiles, 4 warps, 3 stages) in fp32 at D=128 needs
    ~180 KB of shared memory, over the A100's 166,912 B, so the check above must reject it."""
    if (why := aot.unavailable()) is not None:
        pytest.skip(f"AOT compile cannot run here: {why}")
    from masprism_batch.kernels import step_attention as sa

    q, k, v, cu, _sid, _ns, scale = aot._attn_inputs("qwen3-0.6b", torch.float32)
    with aot.intercept(80) as calls:
        sa.attention_lse(q, k, v, cu, scale, config=dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3))
    (fn, grid, args, kwargs), = calls
    sig, constexprs, attrs, options = aot._specialise(fn, args, kwargs, 80)
    row = aot.compile_launch(aot.Launch(fn.__name__, "oversized", "fp32", 80, grid, sig, constexprs, attrs, options))
    assert row["shared"] > aot.SMEM_LIMIT[80]
    assert any("shared memory" in p for p in aot_report.problems(row)), row
