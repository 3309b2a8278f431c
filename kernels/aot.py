"""Ahead-of-time compile of the project's Triton kernels for real GPU targets, on a machine without a GPU.

The launchers (`step_attention.step_attention`, `nll.token_nll`) are driven with small CPU tensors while
their kernels are replaced by a recorder, so each recorded launch carries exactly the arguments, block sizes,
warps and stages a GPU of the given compute capability would get (the launchers pick configs per target
through `_capability`, patched here). Each launch is then specialised by Triton's own JIT binder (the same
integer/pointer divisibility attributes the JIT computes at a real launch) and compiled with
`triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`, using the ptxas bundled in the Triton
wheel. Shared memory comes from the compiled kernel's metadata; registers and stack (spill) bytes from
`cuobjdump -res-usage` on the cubin (the kernels use no local arrays, so stack bytes are spill slots).

    python -m masprism_batch.kernels.aot [--compact] [--json rows.json]
        # markdown table: kernel x target x dtype -> shared memory, registers, spill bytes; exit 1 on a problem

The table and the problem check on the compiled rows are `kernels/aot_report.py`.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field

import torch
from masprism_batch.kernels.aot_report import compact_markdown, markdown, problems

# Max dynamic shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin).
SMEM_LIMIT = {80: 166_912, 90: 232_448}
TARGETS = (80, 90)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Attention and LM-head shapes of the two models the project runs (head dims 128 and 64, GQA 2 and 3).
MODELS = {
    "qwen3-0.6b": dict(hq=16, hk=8, d=128, hidden=1024, vocab=151_936, inter=3072),
    "smollm2-135m": dict(hq=9, hk=3, d=64, hidden=576, vocab=49_152, inter=1536),
}
KERNELS = {"_attn_fwd": "masprism_batch.kernels.step_attention",
           "_step_mass": "masprism_batch.kernels.step_mass",
           "_step_mass_dot": "masprism_batch.kernels.step_mass",
           "_sum_step_rows": "masprism_batch.kernels.step_plan",
           "_nll_partial": "masprism_batch.kernels.token_nll",
           "_rms_norm": "masprism_batch.kernels.elementwise",
           "_qk_norm_rope": "masprism_batch.kernels.elementwise",
           "_silu_mul": "masprism_batch.kernels.elementwise"}
# Qwen3 has q/k norms (fused into the RoPE kernel); SmolLM2 (Llama) has none
QK_NORM = {"qwen3-0.6b": True, "smollm2-135m": False}


def unavailable() -> str | None:
    """None when AOT compiles can run here, else why not."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        return "TRITON_INTERPRET=1: kernels are interpreted functions, nothing to compile"
    try:
        import triton  # noqa: F401
        from triton.backends import backends
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource, make_backend  # noqa: F401
        from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"triton AOT API not importable ({exc})"
    if "nvidia" not in backends:
        return "the installed Triton has no CUDA (nvidia) backend"
    return None


@dataclass
class Launch:
    kernel: str
    label: str  # model / dtype / variant
    dtype: str
    capability: int
    grid: tuple
    signature: dict
    constexprs: dict
    attrs: dict
    options: dict = field(repr=False)

    @property
    def key(self):
        # dtype included: a kernel whose launch does not depend on the model dtype (_sum_step_rows reads fp32
        # R) still gets a row per dtype, so every dtype's table lists every kernel
        return (self.kernel, self.dtype, self.capability, repr(sorted(self.signature.items())),
                repr(sorted(self.constexprs.items())), repr(sorted(self.attrs.items())),
                self.options.get("num_warps"), self.options.get("num_stages"))


class _Recorder:
    def __init__(self, fn, sink):
        self.fn, self.sink = fn, sink

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.sink.append((self.fn, tuple(grid), args, kwargs))
        return launch


@contextlib.contextmanager
def intercept(capability: int):
    """Inside: the three kernels record their launches instead of running; configs are those of `capability`."""
    from masprism_batch.kernels import step_attention, token_nll

    calls: list = []
    saved = []
    for mod in (step_attention, token_nll):
        saved.append((mod, "_capability", mod._capability))
        mod._capability = lambda device, _c=capability: _c
    for name, modname in KERNELS.items():
        mod = importlib.import_module(modname)
        saved.append((mod, name, getattr(mod, name)))
        setattr(mod, name, _Recorder(getattr(mod, name), calls))
    try:
        yield calls
    finally:
        for mod, name, val in reversed(saved):
            setattr(mod, name, val)


def _specialise(fn, args, kwargs, capability: int):
    """What JITFunction.run computes before compiling, for a CUDA target of this capability."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", capability, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(kwargs)
    kwargs.setdefault("debug", False)
    bound, spec, opts = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, opts)
    return signature, constexprs, attrs, dict(options.__dict__)


def _attn_inputs(model: str, dtype, lengths=(700, 300, 23)):
    m = MODELS[model]
    T = sum(lengths)
    q = torch.empty(T, m["hq"], m["d"], dtype=dtype)
    k = torch.empty(T, m["hk"], m["d"], dtype=dtype)
    v = torch.empty(T, m["hk"], m["d"], dtype=dtype)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    step_ids = (torch.arange(T) % 97 // 10).to(torch.int32)  # any valid ids: the kernels are not run
    n_steps = torch.full((len(lengths),), 10, dtype=torch.int32)
    return q, k, v, cu, step_ids, n_steps, m["d"] ** -0.5


def collect_launches(capability: int, dtypes=tuple(DTYPES), models=tuple(MODELS)) -> list[Launch]:
    """Every distinct kernel specialisation the launchers request on a GPU of this capability."""
    from masprism_batch.kernels import elementwise, step_attention, token_nll

    out: dict = {}
    for dname in dtypes:
        dtype = DTYPES[dname]
        for model in models:
            variants = []
            with intercept(capability) as calls:
                q, k, v, cu, sid, ns, scale = _attn_inputs(model, dtype)
                step_attention.step_attention(q, k, v, cu, sid, ns, scale)
                variants += [(c, model) for c in calls]
            lse = torch.empty(q.shape[1], q.shape[0])
            with intercept(capability) as calls:
                step_attention.step_mass(q, k, lse, cu, sid, ns, scale, per_head=True)
                variants += [(c, f"{model} per_head") for c in calls]
            # the dot kernel's widest window (steps of BLOCK_N / STEPS tokens: a key tile spans STEPS ids) and the
            # loop kernel, the fallback for packs whose tiles span more
            cfg = step_attention.mass_config(dtype, MODELS[model]["d"], MODELS[model]["hq"] // MODELS[model]["hk"],
                                             capability, per_head=False)
            width = max(1, cfg["BLOCK_N"] // cfg["STEPS"])
            wide = torch.cat([torch.arange(n) // width for n in torch.diff(cu).tolist()]).to(torch.int32)
            with intercept(capability) as calls:
                step_attention.step_mass(q, k, lse, cu, wide, torch.diff(cu).to(torch.int32), scale)
                variants += [(c, f"{model} widest window") for c in calls]
            with intercept(capability) as calls:
                step_attention.step_mass(q, k, lse, cu, sid, ns, scale, config={**cfg, "STEPS": 0})
                variants += [(c, f"{model} loop fallback") for c in calls]
            with intercept(capability) as calls:
                m = MODELS[model]
                T = 1023
                token_nll.token_nll(torch.empty(T, m["hidden"], dtype=dtype), torch.empty(m["vocab"], m["hidden"], dtype=dtype),
                              torch.zeros(T, dtype=torch.int64))
                variants += [(c, model) for c in calls]
            with intercept(capability) as calls:
                m = MODELS[model]
                T = 1023
                elementwise.rms_norm(torch.empty(T, m["hidden"], dtype=dtype), torch.empty(m["hidden"], dtype=dtype), 1e-6)
                hn, d = m["hq"] + m["hk"], m["d"]
                qkv = torch.empty(T, (hn + m["hk"]) * d, dtype=dtype)
                cos = torch.empty(T, d // 2, dtype=dtype)
                elementwise.qk_norm_rope(qkv[:, : hn * d].view(T, hn, d),
                                         torch.empty(hn, d, dtype=dtype) if QK_NORM[model] else None, 1e-6, cos, cos)
                elementwise.silu_mul(torch.empty(T, 2 * m["inter"], dtype=dtype))
                variants += [(c, model) for c in calls]
            for (fn, grid, args, kwargs), label in variants:
                sig, constexprs, attrs, options = _specialise(fn, args, kwargs, capability)
                launch = Launch(fn.__name__, label, dname, capability, grid, sig, constexprs, attrs, options)
                if launch.key in out:  # the same specialisation serves several shapes: name them all
                    if label not in out[launch.key].label.split(" & "):
                        out[launch.key].label += f" & {label}"
                else:
                    out[launch.key] = launch
    return list(out.values())


def _res_usage(cubin: bytes) -> tuple[int, int]:
    """(registers per thread, stack bytes) from cuobjdump -res-usage."""
    from triton.knobs import nvidia

    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        text = subprocess.run([nvidia.cuobjdump.path, "-res-usage", f.name], capture_output=True, text=True,
                              check=True).stdout
    finally:
        os.unlink(f.name)
    regs = re.search(r"REG:(\d+)", text)
    stack = re.search(r"STACK:(\d+)", text)
    if regs is None or stack is None:
        raise RuntimeError(f"cannot parse cuobjdump -res-usage output:\n{text}")
    return int(regs.group(1)), int(stack.group(1))


def compile_launch(launch: Launch) -> dict:
    """Compile one recorded launch for its target; returns shared memory, registers and spill bytes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(KERNELS[launch.kernel]), launch.kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TRITON_DEFAULT_FP_FUSION notice
        k = triton.compile(ASTSource(fn, launch.signature, launch.constexprs, launch.attrs),
                           target=GPUTarget("cuda", launch.capability, 32), options=launch.options)
    regs, stack = _res_usage(k.asm["cubin"])
    return dict(kernel=launch.kernel, label=launch.label, dtype=launch.dtype, target=f"sm_{launch.capability}",
                capability=launch.capability, shared=int(k.metadata.shared), regs=regs, spill=stack,
                num_warps=k.metadata.num_warps, num_stages=k.metadata.num_stages,
                blocks={str(k): v for k, v in launch.constexprs.items() if isinstance(v, int)},
                smem_limit=SMEM_LIMIT.get(launch.capability))


def _worker(launch: Launch):
    try:
        return compile_launch(launch)
    except Exception as exc:  # noqa: BLE001 - reported per launch by the caller
        return dict(kernel=launch.kernel, label=launch.label, dtype=launch.dtype,
                    target=f"sm_{launch.capability}", capability=launch.capability,
                    error=f"{type(exc).__name__}: {str(exc)[:2000]}")


def compile_all(launches: list[Launch], workers: int | None = None) -> list[dict]:
    """Compile in a small process pool (ptxas and LLVM are single-threaded); results in launch order."""
    workers = workers or min(2, os.cpu_count() or 1)
    if workers <= 1 or len(launches) <= 1:
        return [_worker(x) for x in launches]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        return list(pool.map(_worker, launches))


def main(argv=None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="AOT-compile every Triton kernel launch for sm_80 and sm_90")
    ap.add_argument("--compact", action="store_true", help="one line per kernel variant (README table)")
    ap.add_argument("--json", default=None, help="also write every compiled row to this JSON file")
    args = ap.parse_args(argv)
    if (why := unavailable()) is not None:
        print(f"AOT compile unavailable: {why}", file=sys.stderr)
        return 2
    launches = [x for cap in TARGETS for x in collect_launches(cap)]
    rows = compile_all(launches)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    print(compact_markdown(rows, list(KERNELS)) if args.compact else markdown(rows))
    bad = [(r, p) for r in rows for p in problems(r)]
    for r, p in bad:
        print(f"FAIL {r['kernel']} {r['label']} {r['target']} {r['dtype']}: {p}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
