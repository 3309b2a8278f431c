"""Benchmark of the per-token NLL (LM head + cross-entropy): time and peak memory vs T.

CPU (default): impl = torch (reference backend: token chunks x vocabulary tiles, online LSE), eager (what HF does: full [T, V] fp32 logits, then
cross-entropy). SmolLM2-135M (d 576, V 49,152) and Qwen3-0.6B (d 1024, V 151,936) shapes, random
weights. The rows with impl=cpp_removed in results/token_nll.csv were measured with the C++ kernel (csrc/nll.cpp,
commit 879fa94) before it was removed for not beating the reference; the cpp backend now runs the
reference, so a new run measures only torch and eager.

    python benchmarks/kernels/bench_token_nll.py                 # CPU grid -> results/token_nll.csv
    python benchmarks/kernels/bench_token_nll.py --gpu [--dtypes bf16 fp32]   # CUDA: triton vs eager, do_bench -> results/token_nll_gpu.csv
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.kernels.kernel_benchlib import MODELS, print_table, run_cases, worker_main  # noqa: E402
from benchmarks.rows import RESULTS  # noqa: E402

EAGER_LIMIT = 10 * 2**30  # bytes: logits + log-softmax of [T, V] fp32 must fit the shared machine


def inputs(model: str, T: int, device="cpu", dtype=None):
    import torch

    m = MODELS[model]
    g = torch.Generator(device=device).manual_seed(T)
    dtype = dtype or torch.float32
    hidden = torch.randn(T, m["hidden"], generator=g, device=device, dtype=dtype)
    weight = torch.randn(m["vocab"], m["hidden"], generator=g, device=device, dtype=dtype) * 0.05
    targets = torch.randint(0, m["vocab"], (T,), generator=g, device=device)
    targets[-1] = -100
    return hidden, weight, targets


def eager_nll(hidden, weight, targets):
    import torch.nn.functional as F

    logits = (hidden @ weight.T).float()  # [T, V]: what a full-logits forward returns
    return F.cross_entropy(logits, targets, reduction="none", ignore_index=-100)


def worker(case: dict) -> None:
    import torch

    from masprism_batch import signals

    torch.set_num_threads(case["threads"])
    h, w, t = inputs(case["model"], case["T"])
    fns = {
        "torch": lambda: signals.token_nll(h, w, t, backend="torch"),
        "eager": lambda: eager_nll(h, w, t),
    }
    with torch.inference_mode():
        worker_main(case, fns)


def cpu_cases(threads: int, models, Ts, impls) -> list[dict]:
    cases = []
    for model in models:
        m = MODELS[model]
        for T in Ts:
            c = dict(bench="token_nll", op="token_nll", impls=list(impls), model=model, T=T, threads=threads,
                     repeats=3 if T <= 1024 else 1, warmup=T <= 1024, skips={})
            need = 2 * T * m["vocab"] * 4
            if "eager" in impls and need > EAGER_LIMIT:
                c["skips"]["eager"] = f"needs >= {need / 2**30:.0f} GiB for [T,V] logits + log-softmax"
            cases.append(c)
    return cases


def _gpu_rows(model: str, T: int, dtype_name: str) -> list[dict]:
    import torch
    from masprism_batch.kernels import token_nll as tk

    from benchmarks.kernels.gpu_benchlib import time_impls

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    h, w, t = inputs(model, T, "cuda", dtype)
    flops = 2 * T * MODELS[model]["vocab"] * MODELS[model]["hidden"]
    benches = {"triton": (lambda: tk.token_nll(h, w, t), flops)}
    if 2 * T * MODELS[model]["vocab"] * 4 <= EAGER_LIMIT:
        benches["eager"] = (lambda: eager_nll(h, w, t), flops)
    return time_impls("token_nll", model, T, dtype_name, benches, width=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--threads", type=int, default=1)  # see bench_step_attention.py
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--T", nargs="+", type=int, default=[1024, 2048, 4096, 8192])
    ap.add_argument("--impls", nargs="+", default=["torch", "eager"])
    ap.add_argument("--dtypes", nargs="+", default=["bf16"], choices=["bf16", "fp16", "fp32"], help="--gpu only")
    ap.add_argument("--out", type=Path, default=None, help="CSV (default results/token_nll.csv, with --gpu results/token_nll_gpu.csv)")
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.gpu:
        from benchmarks.kernels.gpu_benchlib import sweep

        sweep(_gpu_rows, args.models, args.T, args.dtypes, args.out or RESULTS / "token_nll_gpu.csv", width=10)
        return
    args.out = args.out or RESULTS / "token_nll.csv"
    rows = run_cases(__file__, cpu_cases(args.threads, args.models, args.T, args.impls), args.out)
    print_table(rows)


if __name__ == "__main__":
    main()
