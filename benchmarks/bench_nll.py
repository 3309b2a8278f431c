"""Benchmark of the per-token NLL (LM head + cross-entropy): time and peak memory vs T.

CPU (default): impl = torch (reference backend: token chunks x vocabulary tiles, online LSE), eager (what HF does: full [T, V] fp32 logits, then
cross-entropy). SmolLM2-135M (d 576, V 49,152) and Qwen3-0.6B (d 1024, V 151,936) shapes, random
weights. The rows with impl=cpp_removed in results/nll.csv were measured with the C++ kernel (csrc/nll.cpp,
commit 879fa94) before it was removed for not beating the reference; the cpp backend now runs the
reference, so a new run measures only torch and eager.

    python benchmarks/bench_nll.py                 # CPU grid -> results/nll.csv
    python benchmarks/bench_nll.py --gpu           # CUDA: triton kernel vs eager, do_bench
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_benchlib import MODELS, RESULTS, print_table, run_cases, worker_main  # noqa: E402

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
            c = dict(bench="nll", op="token_nll", impls=list(impls), model=model, T=T, threads=threads,
                     repeats=3 if T <= 1024 else 1, warmup=T <= 1024, skips={})
            need = 2 * T * m["vocab"] * 4
            if "eager" in impls and need > EAGER_LIMIT:
                c["skips"]["eager"] = f"needs >= {need / 2**30:.0f} GiB for [T,V] logits + log-softmax"
            cases.append(c)
    return cases


def _gpu_rows(model: str, T: int) -> None:
    import torch
    import triton
    from masprism_batch.kernels import nll as tk

    h, w, t = inputs(model, T, "cuda", torch.bfloat16)
    flops = 2 * T * MODELS[model]["vocab"] * MODELS[model]["hidden"]
    for name, fn in {"triton": lambda: tk.token_nll(h, w, t), "eager": lambda: eager_nll(h, w, t)}.items():
        ms = triton.testing.do_bench(fn)
        print(f"{model:<14}{T:>7} {name:<10}{ms:9.3f}{flops / ms / 1e9:9.1f}")


def gpu_main() -> None:
    print(f"{'model':<14}{'T':>7} {'impl':<10}{'ms':>9}{'TFLOP/s':>9}")
    for model in MODELS:
        for T in (1024, 4096, 16384, 32768):
            _gpu_rows(model, T)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--threads", type=int, default=1)  # see bench_step_attention.py
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--T", nargs="+", type=int, default=[1024, 2048, 4096, 8192])
    ap.add_argument("--impls", nargs="+", default=["torch", "eager"])
    ap.add_argument("--out", type=Path, default=RESULTS / "nll.csv")
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.gpu:
        gpu_main()
        return
    rows = run_cases(__file__, cpu_cases(args.threads, args.models, args.T, args.impls), args.out)
    print_table(rows)


if __name__ == "__main__":
    main()
