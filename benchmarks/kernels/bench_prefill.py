"""Whole-model prefill benchmark: the signals forward vs a plain forward vs HF eager.

impl = signals_cpp / signals_torch (masprism_batch.model PrefillModel.signals with that backend: token
NLL + step attention on the instrumented layers), sdpa (PrefillModel.prefill: the same runtime, plain
SDPA attention everywhere, no logits, no signals), sdpa_logits (the same plus the full [T, V] logits, as
an HF forward returns them), eager (transformers with attn_implementation="eager",
output_attentions=True and full logits, then the NLL and the step mass from them: what a straightforward
implementation does), eager_stream (the same eager forward and full logits, but each instrumented layer's
[H, T, T] probabilities are folded into the step mass by a forward hook and dropped, and
output_attentions is off: the same FLOPs as eager with the memory of one layer, so a LOWER bound on eager's
time at the T where eager itself cannot fit in RAM). Random weights with the shapes of SmolLM2-135M, Gemma 3 270M
(15 of 18 layers sliding-window, 262k vocabulary; signals from its one full-attention layer of the last 20%) and
Qwen3-0.6B; one sequence of
T random tokens in steps of 80 tokens. A `model@NL` variant keeps only N layers (peak memory of an
inference forward is per layer, so it gives the memory-vs-T slope at long T in minutes, not hours).

    python benchmarks/kernels/bench_prefill.py                       # CPU grid -> results/prefill.csv
    python benchmarks/kernels/bench_prefill.py --gpu [--peak-tflops 989]   # CUDA: tokens/s, TFLOP/s, MFU
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.kernels.kernel_benchlib import mem_total, print_table, run_cases, worker_main  # noqa: E402
from benchmarks.rows import RESULTS  # noqa: E402

# eager keeps every layer's attentions plus transient copies of one layer's: leave room for those
EAGER_LIMIT = int(0.55 * mem_total())


def hf_config(name: str):
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen3Config

    base, _, layers = name.partition("@")
    if base == "smollm2-135m":
        cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                          num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=32768,
                          rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
                          tie_word_embeddings=True)
    elif base == "qwen3-0.6b":
        cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                          num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                          rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                          tie_word_embeddings=True, attention_bias=False)
    elif base == "gemma3-270m":  # the config of gemma-3-270m-q4_k_m.gguf as transformers reads it
        cfg = Gemma3TextConfig(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                               num_attention_heads=4, num_key_value_heads=1, head_dim=256, max_position_embeddings=32768,
                               rms_norm_eps=1e-6, sliding_window=512, query_pre_attn_scalar=256,
                               rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                "full_attention": {"rope_type": "default", "rope_theta": 1e6}},
                               tie_word_embeddings=True)
    else:
        raise ValueError(f"unknown model {name!r}")
    if layers:
        cfg.num_hidden_layers = int(layers.rstrip("L"))
    return cfg


def flops_per_token(cfg, T: int) -> float:
    """Forward FLOPs per token at a causal context of T (matmuls only: 2 per MAC), LM head included."""
    d, f, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    dq, dkv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    linear = L * (d * dq + 2 * d * dkv + dq * d + 3 * d * f) + cfg.vocab_size * d
    # QK^T and PV over the causal average context (T+1)/2; a sliding-window layer's context is capped at W
    W = getattr(cfg, "sliding_window", None)
    kinds = getattr(cfg, "layer_types", None) or ["full_attention"] * L
    ctx = sum(((T + 1) / 2 if k == "full_attention" or not W or T <= W else W - W * (W - 1) / (2 * T))
              for k in kinds)
    attention = 2 * dq * ctx * 2
    return 2.0 * linear + attention


def _steps(T: int) -> list[int]:
    return [-1] * 7 + [(t - 7) // 80 for t in range(7, T)]


def build(name: str, backend: str, device="cpu", dtype=None):
    import torch

    from masprism_batch.config import SignalsConfig
    from masprism_batch.model.loader import build_model
    from masprism_batch.model.tiny import tiny_state_dict

    cfg = hf_config(name)
    state = tiny_state_dict(cfg, seed=0)
    model = build_model(cfg, state, None, SignalsConfig(backend=backend), model_id=name, device=device,
                        dtype=dtype or torch.float32)
    return cfg, state, model


def eager_signals(hf, ids, sid, layers):
    import torch
    import torch.nn.functional as F

    out = hf(ids[None], output_attentions=True, use_cache=False)
    nll = F.cross_entropy(out.logits[0, :-1].float(), ids[1:], reduction="none")
    s = torch.tensor(sid, device=ids.device)
    n = int(s.max()) + 1
    onehot = torch.zeros(len(sid), n, device=ids.device)
    keep = s >= 0
    onehot[keep.nonzero()[:, 0], s[keep]] = 1.0
    mass = sum(onehot.T @ out.attentions[i][0].float().mean(0) @ onehot for i in layers) / len(layers)
    return nll, mass


def eager_stream_signals(hf, ids, sid, layers):
    import torch
    import torch.nn.functional as F

    s = torch.tensor(sid, device=ids.device)
    n = int(s.max()) + 1
    onehot = torch.zeros(len(sid), n, device=ids.device)
    keep = s >= 0
    onehot[keep.nonzero()[:, 0], s[keep]] = 1.0
    mass = torch.zeros(n, n, device=ids.device)

    def fold(_module, _args, output):  # output = (attn_output, attn_weights [1, H, T, T])
        mass.add_(onehot.T @ output[1][0].float().mean(0) @ onehot)
        return output[0], None

    hooks = [hf.model.layers[i].self_attn.register_forward_hook(fold) for i in layers]
    try:
        out = hf(ids[None], use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    nll = F.cross_entropy(out.logits[0, :-1].float(), ids[1:], reduction="none")
    return nll, mass / len(layers)


def gemm_worker(case: dict) -> None:
    """The CPU's fp32 GEMM rate at one thread (n x n x n): the ceiling any exact fp32 prefill runs under."""
    import torch

    torch.set_num_threads(case["threads"])
    n = case["T"]
    a, b = torch.randn(n, n), torch.randn(n, n)
    worker_main(case, {"gemm": lambda: torch.mm(a, b)})


def worker(case: dict) -> None:
    import torch

    from masprism_batch.config import SignalsConfig

    if case["op"] == "gemm_peak":
        gemm_worker(case)
        return
    torch.set_num_threads(case["threads"])
    cfg, state, model = build(case["model"], "cpp")
    T = case["T"]
    ids = torch.randint(0, cfg.vocab_size, (T,), generator=torch.Generator().manual_seed(T))
    seqs, sids = [ids.tolist()], [_steps(T)]
    fns = {"sdpa": lambda: model.prefill(seqs),
           # a plain forward that also returns full logits, as an HF forward does
           "sdpa_logits": lambda: model.prefill(seqs) @ model.weights.lm_head.T}
    for be in ("cpp", "torch"):
        def run(be=be):
            model.signals_cfg = SignalsConfig(backend=be)
            return model.signals(seqs, sids)
        fns["signals_" + be] = run
    if {"eager", "eager_stream"} & set(case["impls"]):
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
        hf.load_state_dict(state, strict=False)
        hf.tie_weights()
        fns["eager"] = lambda: eager_signals(hf, ids, sids[0], model.instrument_layers)
        fns["eager_stream"] = lambda: eager_stream_signals(hf, ids, sids[0], model.instrument_layers)
    del state
    with torch.inference_mode():
        worker_main(case, fns)


def cpu_cases(threads: int, grid: list[tuple[str, list[int], list[str]]], repeats: int = 1) -> list[dict]:
    cases = []
    for model, Ts, impls in grid:
        cfg = hf_config(model)
        for T in Ts:
            c = dict(bench="prefill", op="prefill", impls=list(impls), model=model, T=T, threads=threads,
                     repeats=repeats, warmup=T <= 1024, skips={})
            need = cfg.num_hidden_layers * cfg.num_attention_heads * T * T * 4 + 2 * T * cfg.vocab_size * 4
            if "eager" in impls and need > EAGER_LIMIT:
                c["skips"]["eager"] = (f"needs >= {need / 2**30:.0f} GiB (all layers' [H,T,T] attentions + logits) "
                                       f"of {mem_total() / 2**30:.0f} GiB RAM")
            cases.append(c)
    return cases


# What the shared 2-core CPU can afford (a full Qwen3-0.6B fp32 forward at 8k is ~15 TFLOP: minutes
# per run); the @4L rows give the memory slope up to 32k.
DEFAULT_GRID = [
    ("smollm2-135m", [1024, 2048], ["signals_cpp", "signals_torch", "sdpa", "sdpa_logits", "eager", "eager_stream"]),
    ("gemma3-270m", [1024, 2048], ["signals_cpp", "signals_torch", "sdpa", "sdpa_logits"]),
    ("smollm2-135m", [4096, 8192], ["signals_cpp", "signals_torch", "sdpa", "sdpa_logits", "eager", "eager_stream"]),
    ("qwen3-0.6b", [1024, 2048, 4096], ["signals_cpp", "signals_torch", "sdpa", "sdpa_logits", "eager", "eager_stream"]),
    ("smollm2-135m@4L", [1024, 2048, 4096, 8192, 16384, 32768], ["signals_cpp"]),
]
# --long: the production model at 8k and SmolLM2 at 16k (36 CPU-minutes on a Zen 3 core, measured; eager itself
# cannot fit at either, eager_stream gives its lower bound where it fits in RAM)
LONG_GRID = [
    ("qwen3-0.6b", [8192], ["signals_cpp", "sdpa", "sdpa_logits", "eager", "eager_stream"]),
    ("smollm2-135m", [16384], ["signals_cpp", "sdpa", "sdpa_logits", "eager"]),
]


def gpu_main(peak_tflops: float | None) -> None:
    """CUDA, bf16: the two-pass pipeline (two signals forwards per trace) per backend; one table."""
    import torch

    name = torch.cuda.get_device_name()
    peak = peak_tflops or (989.0 if "H100" in name else 312.0 if "A100" in name else float("nan"))
    print(f"# {name}; MFU against {peak} dense bf16 TFLOP/s")
    print(f"{'model':<14}{'T':>7} {'impl':<15}{'tokens/s':>11}{'TFLOP/s':>9}{'MFU':>7}")
    for mname in ("smollm2-135m", "qwen3-0.6b"):
        _gpu_model_rows(mname, peak)
        torch.cuda.empty_cache()


def _gpu_model_rows(mname: str, peak: float) -> None:
    import time

    import torch
    from transformers import AutoModelForCausalLM

    cfg, state, model = build(mname, "triton", "cuda", torch.bfloat16)
    hf = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.bfloat16).cuda().eval()
    hf.load_state_dict(state, strict=False)
    hf.tie_weights()
    del state
    for T in (1024, 2048, 4096, 8192, 16384, 32768):
        ids = torch.randint(0, cfg.vocab_size, (T,)).tolist()
        sid = _steps(T)
        runs = {"signals_triton": lambda ids=ids, sid=sid: model.signals([ids], [sid]),
                "sdpa": lambda ids=ids: model.prefill([ids])}
        t_ids = torch.tensor(ids, device="cuda")
        if T <= 4096:  # eager keeps every layer's [H, T, T] attention: ~14 GB for Qwen3-0.6B at 4k in bf16
            runs["eager"] = lambda t_ids=t_ids, sid=sid: eager_signals(hf, t_ids, sid, model.instrument_layers)
        if T <= 8192:  # one layer's [H, T, T] in bf16 plus its fp32 softmax: ~6 GB for Qwen3-0.6B at 8k
            runs["eager_stream"] = lambda t_ids=t_ids, sid=sid: eager_stream_signals(hf, t_ids, sid,
                                                                                     model.instrument_layers)
        for impl, fn in runs.items():
            with torch.inference_mode():
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.inference_mode():
                for _ in range(2):  # pass 1 + pass 2 of the method
                    fn()
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            tflops = 2 * T * flops_per_token(cfg, T) / dt / 1e12
            print(f"{mname:<14}{T:>7} {impl:<15}{2 * T / dt:11.0f}{tflops:9.1f}{tflops / peak:7.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--threads", type=int, default=1)  # see bench_step_attention.py
    ap.add_argument("--only", nargs="*", default=None, help="model names of the grid to run")
    ap.add_argument("--T", nargs="*", type=int, default=None, help="only these T of the grid")
    ap.add_argument("--impls", nargs="*", default=None, help="only these impls of the grid")
    ap.add_argument("--repeats", type=int, default=1, help="calls per impl; rows keep the median")
    ap.add_argument("--gemm-peak", action="store_true",
                    help="also measure the fp32 GEMM rate (op gemm_peak, T = n of an n x n x n mm; GFLOP/s = 2 T^3 / cpu_s)")
    ap.add_argument("--long", action="store_true", help="run LONG_GRID (Qwen3 8k, SmolLM2 16k) instead of the default grid")
    ap.add_argument("--out", type=Path, default=RESULTS / "prefill.csv")
    args = ap.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    if args.gpu:
        gpu_main(args.peak_tflops)
        return
    grid = [g for g in (LONG_GRID if args.long else DEFAULT_GRID) if args.only is None or g[0] in args.only]
    if args.T:
        grid = [(m, [t for t in Ts if t in args.T], impls) for m, Ts, impls in grid]
    if args.impls:
        grid = [(m, Ts, [i for i in impls if i in args.impls]) for m, Ts, impls in grid]
    cases = cpu_cases(args.threads, grid, args.repeats)
    if args.gemm_peak:
        cases += [dict(bench="prefill", op="gemm_peak", impls=["gemm"], model="fp32-square", T=n, threads=args.threads,
                       repeats=5, warmup=True, skips={}) for n in (1024, 2048, 4096)]
    rows = run_cases(__file__, cases, args.out, timeout=3600)
    print_table(rows)


if __name__ == "__main__":
    main()
