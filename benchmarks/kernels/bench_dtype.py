"""fp32 against bf16 on this CPU: the model's GEMMs, the signal prefill and a plain forward (issue 24).

Why `dtype: auto` is bf16 on CPUs with native bf16 (AVX512-BF16 / AMX): the forward is GEMM-bound and fp32
GEMMs already run near this CPU's fp32 peak, so only a cheaper number format makes it much faster. Each row is
one (dtype, op, length), timed as the median of `--repeats` runs after one warm-up, in one process; `ratio` is
the fp32 time over this dtype's time for the same op (> 1: faster than fp32). Rows are appended to
benchmarks/results/dtype.csv.

    python benchmarks/kernels/bench_dtype.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import psutil
import torch
import torch.nn.functional as F

from masprism_batch.config import ModelConfig, SignalsConfig
from masprism_batch.devices import cpu_has_native_bf16
from masprism_batch.model import load_model

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import append_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "dtype.csv"


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_cases(model) -> dict[str, tuple[int, int]]:
    """(in, out) of the linears one layer runs per token, and the LM head's."""
    a = model.arch
    inter = model.weights.layers[0].gate_up_w.shape[0] // 2
    return {"qkv": (a.hidden_size, (a.num_heads + 2 * a.num_kv_heads) * a.head_dim),
            "mlp_gate_up": (a.hidden_size, 2 * inter), "mlp_down": (inter, a.hidden_size),
            "lm_head": (a.hidden_size, a.vocab_size)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1023, 2047])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--csv", type=Path, default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    hw = (f"{psutil.cpu_count()}-core CPU, torch {torch.__version__}, {args.threads} threads, "
          f"native bf16: {cpu_has_native_bf16()}")
    rng = np.random.default_rng()
    rows, base = [], {}
    for dtype in ("float32", "bfloat16"):
        model = load_model(ModelConfig(name=args.model, dtype=dtype, threads=args.threads), SignalsConfig())
        dt = model.dtype
        for L in args.lengths:
            for op, (n_in, n_out) in gemm_cases(model).items():
                x, w = torch.randn(L, n_in, dtype=dt), torch.randn(n_out, n_in, dtype=dt)
                rows.append((dtype, f"gemm:{op}", L, median_seconds(lambda x=x, w=w: F.linear(x, w), args.repeats)))
            ids = rng.integers(0, model.arch.vocab_size, L).tolist()
            sids = np.sort(rng.integers(0, 23, L)).tolist()  # 23 ragged steps
            rows.append((dtype, "signals", L,
                         median_seconds(lambda m=model, i=ids, s=sids: m.signals([i], [s]), args.repeats)))
            rows.append((dtype, "prefill", L, median_seconds(lambda m=model, i=ids: m.prefill([i]), args.repeats)))
    for dtype, op, L, s in rows:
        base.setdefault((op, L), s) if dtype == "float32" else None
    out = [{"date": date, "hardware": hw, "load_1min": round(os.getloadavg()[0], 1), "model": args.model,
            "dtype": dtype, "op": op, "tokens": L, "seconds": round(s, 4), "tokens_per_s": round(L / s, 1),
            "ratio_vs_fp32": round(base[(op, L)] / s, 3),
            "cmd": f"python benchmarks/kernels/bench_dtype.py --threads {args.threads}"} for dtype, op, L, s in rows]
    for r in out:
        print(json.dumps(r))
    append_rows(args.csv, out)


if __name__ == "__main__":
    main()
