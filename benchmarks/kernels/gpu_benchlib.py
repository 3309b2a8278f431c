"""Tidy CSV rows (written by benchmarks/rows.py) for the CUDA benchmarks (bench_step_attention.py --gpu, bench_token_nll.py --gpu, gpu_smoke.sh).

One row per (op, impl, model, T, dtype): median ms from triton.testing.do_bench, the op's useful FLOPs,
TFLOP/s and MFU against the device's dense peak for that dtype (datasheet numbers, no sparsity).
"""

from __future__ import annotations

import datetime as dt

from benchmarks.rows import commit

GPU_FIELDS = ["bench", "op", "impl", "model", "T", "dtype", "ms", "tflops", "mfu", "peak_tflops", "device",
              "torch", "triton", "commit", "date"]

# dense (non-sparse) tensor-core peaks, TFLOP/s; fp32 = the non-tensor-core FP32 rate (IEEE dots)
PEAKS = {
    "H100 SXM": {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "fp32": 51.2},
    "H100 NVL": {"bf16": 835.0, "fp16": 835.0, "fp32": 60.0},
    "H200": {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
}


def peak_tflops(device_name: str, dtype: str) -> float:
    name = device_name.upper()
    for key in ("H100 PCIe", "H100 NVL", "H100 SXM", "H200", "A100"):
        if all(part.upper() in name for part in key.split()):
            return PEAKS[key][dtype]
    if "H100" in name:  # "NVIDIA H100 80GB HBM3" is the SXM part
        return PEAKS["H100 SXM"][dtype]
    return float("nan")


def gpu_row(bench: str, op: str, impl: str, model: str, T: int, dtype: str, ms: float, flops: float) -> dict:
    import torch
    import triton

    name = torch.cuda.get_device_name()
    peak = peak_tflops(name, dtype)
    tflops = flops / (ms * 1e-3) / 1e12
    return dict(bench=bench, op=op, impl=impl, model=model, T=T, dtype=dtype, ms=round(ms, 4),
                tflops=round(tflops, 2), mfu=round(tflops / peak, 4) if peak == peak else "", peak_tflops=peak,
                device=name, torch=torch.__version__, triton=triton.__version__, commit=commit(),
                date=dt.date.today().isoformat())


def time_impls(op: str, model: str, T: int, dtype: str, benches: dict, width: int) -> list[dict]:
    """One row per implementation: `benches` {impl: (fn, useful FLOPs)} timed by triton.testing.do_bench,
    each printed as a line of the table `sweep` heads."""
    import triton

    rows = []
    for impl, (fn, flops) in benches.items():
        ms = triton.testing.do_bench(fn)
        r = gpu_row(op, op, impl, model, T, dtype, ms, flops)
        rows.append(r)
        print(f"{model:<14}{T:>7} {dtype:<5} {impl:<{width}}{ms:9.3f}{r['tflops']:9.1f}{r['mfu'] or float('nan'):7.1%}")
    return rows


def sweep(rows_of, models, Ts, dtypes, out, width: int) -> None:
    """CUDA: `rows_of(model, T, dtype)` for every case (each kernel alone), one printed table, tidy rows appended
    to `out` as each case ends."""
    import torch

    from benchmarks.rows import append_rows

    print(f"# {torch.cuda.get_device_name()}")
    print(f"{'model':<14}{'T':>7} {'dtype':<5} {'impl':<{width}}{'ms':>9}{'TFLOP/s':>9}{'MFU':>7}")
    for dtype in dtypes:
        for model in models:
            for T in Ts:
                append_rows(out, rows_of(model, T, dtype), GPU_FIELDS)
                torch.cuda.empty_cache()
