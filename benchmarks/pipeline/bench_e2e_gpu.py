"""End to end on a GPU (issue 33 item 6): the product path (`run_local`, what `attribute` runs) on the dev logs
beside a plain prefill of exactly the same sequence lengths and an HF transformers forward of the same lengths,
in one process. Random weights with Qwen3-0.6B shapes (bench_prefill.hf_config), bf16, the SmolLM2 tokenizer
(taken from the packaged GGUF, or --tokenizer DIR): no network, no download.

Impls per token budget (tidy rows, one per impl, -> --csv; stage seconds of the product path -> --stages-csv):
  pipeline        run_local on --data (ingest, render, packing, both passes, method, verdicts, commits)
  plain_prefill   PrefillModel.prefill on random ids with the lengths the pipeline prefilled (pass-1 windows or
                  prompts and pass-2 prompts), packed with the same budget: no signals, no logits
  plain_prefill_nll  PrefillModel.prefill_nll, the same packs: the plain prefill plus every token's NLL (fused LM
                  head, results on the host), no step signals: the least any NLL-reading method computes
  hf_sdpa_logits  transformers AutoModelForCausalLM (sdpa, bf16) one sequence per call, full logits + NLL

vs_plain: tokens/s over plain_prefill's; vs_plain_nll: over plain_prefill_nll's. Acceptance of issue 45 (H100/H200,
Qwen3-0.6B shapes): pipeline >= 0.8x plain_prefill_nll and >= 200k tokens/s. Runs on CPU too (slowly: --layers).
Harness after ../shared/gpu/e2e_gpu.py (the first H200 run, 2026-11-26).

    python benchmarks/pipeline/bench_e2e_gpu.py --data ../shared/data/who_and_when ../shared/data/trail --budgets default 32768
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.kernels.bench_prefill import hf_config  # noqa: E402  (the project's Qwen3-0.6B shapes)
from benchmarks.rows import append_rows, commit  # noqa: E402

log = logging.getLogger("bench_e2e_gpu")
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
FIELDS = ["bench", "impl", "model", "budget", "sequences", "packs", "tokens", "seconds", "tokens_per_s",
          "vs_plain", "vs_plain_nll", "device", "dtype", "torch", "triton", "commit", "date"]


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def tokenizer_dir(explicit: Path | None, cache: Path) -> Path:
    """A folder with the SmolLM2 tokenizer files: --tokenizer, else converted from the packaged GGUF."""
    if explicit is not None:
        return explicit
    from transformers import AutoTokenizer

    from masprism_batch.model.registry import require_model

    gguf = require_model("smollm2-135m").path  # the tokenizer only: no weight is dequantized
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True).save_pretrained(cache)
    return cache


def random_model_dir(folder: Path, tok: Path, layers: int | None) -> Path:
    """Random-weight Qwen3-0.6B (seed 0, bf16) saved with the tokenizer files next to it; reused if present."""
    if (folder / "config.json").exists():
        return folder
    from transformers import Qwen3ForCausalLM

    cfg = hf_config("qwen3-0.6b")
    if layers:  # rebuilt, not patched: the config validates its per-layer lists against the layer count
        d = cfg.to_dict()
        d.update(num_hidden_layers=layers)
        d.pop("layer_types", None)
        cfg = type(cfg)(**d)
    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(folder)
    for f in tok.iterdir():
        if f.is_file() and ("token" in f.name or f.name.endswith(".jinja")):
            shutil.copy(f, folder / f.name)
    return folder


def _row(impl, budget, seqs, packs, tokens, seconds, plain_tps, model_dtype, commit, nll_tps=None):
    import triton

    tps = tokens / seconds if seconds > 0 else float("nan")
    return dict(bench="e2e_gpu", impl=impl, model="qwen3-0.6b-random", budget=budget, sequences=seqs, packs=packs,
                tokens=tokens, seconds=round(seconds, 3), tokens_per_s=round(tps),
                vs_plain=round(tps / plain_tps, 3) if plain_tps else "",
                vs_plain_nll=round(tps / nll_tps, 3) if nll_tps else "",
                device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", dtype=model_dtype,
                torch=torch.__version__, triton=triton.__version__, commit=commit, date=dt.date.today().isoformat())


def run_budget(mdir: Path, data: list[str], budget: str, work: Path, hf: bool, commit: str):
    from masprism_batch.pipelines import run_local

    from benchmarks.pipeline.bench_pipeline_ratio import prefilled_lengths
    from masprism_batch.config import load_config
    from masprism_batch.model import load_model
    from masprism_batch.render import buckets

    over = {} if budget == "default" else {"batch__token_budget": int(budget)}
    cfg = load_config(None, model__name=str(mdir), **over)
    model = load_model(cfg.model, cfg.signals)
    used = cfg.batch.token_budget
    out = work / f"run_{budget}"
    shutil.rmtree(out, ignore_errors=True)
    _sync()
    t0 = time.perf_counter()
    run_local(data, out, cfg, model=model, progress=False)
    _sync()
    pipe_s = time.perf_counter() - t0
    run = json.loads((out / "run.json").read_text())
    used = run.get("token_budget", used)  # the budget in use when the run sizes it from the device
    tokens = int(run["counts"]["tokens"])
    lengths = prefilled_lengths(out, model, cfg)
    seqs = [np.random.default_rng(0).integers(0, model.arch.vocab_size, n).tolist() for n in lengths]
    groups = buckets.pack(lengths, int(used))

    def timed_packs(fn) -> float:
        for g in groups[:2]:
            fn([seqs[i] for i in g])  # warm-up (kernel compiles, allocator)
        _sync()
        t0 = time.perf_counter()
        for g in groups:
            fn([seqs[i] for i in g])
        _sync()
        return time.perf_counter() - t0

    plain_s = timed_packs(model.prefill)
    nll_s = timed_packs(model.prefill_nll)
    plain_tps, nll_tps = sum(lengths) / plain_s, sum(lengths) / nll_s
    dtype = str(model.dtype).removeprefix("torch.")
    base = (used, len(lengths), len(groups))
    rows = [_row("plain_prefill", *base, sum(lengths), plain_s, plain_tps, dtype, commit, nll_tps),
            _row("plain_prefill_nll", *base, sum(lengths), nll_s, plain_tps, dtype, commit, nll_tps),
            _row("pipeline", *base, tokens, pipe_s, plain_tps, dtype, commit, nll_tps)]
    stages = [dict(budget=used, stage=k, seconds=v) for k, v in (run.get("stage_seconds_total") or {}).items()]
    del model
    if hf and torch.cuda.is_available():
        from transformers import AutoModelForCausalLM

        m = AutoModelForCausalLM.from_pretrained(mdir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
        with torch.inference_mode():
            for s in seqs[:2]:
                m(torch.tensor([s], device="cuda"))
            _sync()
            t0 = time.perf_counter()
            for s in seqs:  # what a user would write: full logits, then the NLL
                logits = m(torch.tensor([s], device="cuda")).logits
                torch.nn.functional.cross_entropy(logits[0, :-1].float(), torch.tensor(s[1:], device="cuda"),
                                                  reduction="none")
            _sync()
            hf_s = time.perf_counter() - t0
        rows.append(_row("hf_sdpa_logits", used, len(lengths), len(seqs), sum(lengths), hf_s, plain_tps, dtype,
                         commit, nll_tps))
        del m
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows, stages


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", default=[str(SHARED / "who_and_when"), str(SHARED / "trail")])
    ap.add_argument("--budgets", nargs="+", default=["default", "32768"],
                    help="token budgets; 'default' = the config's (device-sized on CUDA)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="folder with tokenizer files (default: SmolLM2's)")
    ap.add_argument("--model-dir", type=Path, default=None, help="where the random model is saved (default: temp)")
    ap.add_argument("--layers", type=int, default=None, help="fewer layers for a quick run (default: 28)")
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers baseline")
    ap.add_argument("--csv", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "e2e_gpu.csv")
    ap.add_argument("--stages-csv", type=Path, default=None, help="default: <csv stem>_stages.csv")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    missing = [d for d in args.data if not Path(d).exists()]
    if missing:
        log.error("data not found: %s (carry ../shared/data, or pass --data)", missing)
        return 2
    with tempfile.TemporaryDirectory(prefix="masprism_e2e_") as tmp:
        work = Path(tmp)
        mdir = random_model_dir(args.model_dir or work / "qwen3_random", tokenizer_dir(args.tokenizer, work / "tok"),
                                args.layers)
        print(f"{'budget':>8} {'impl':<18}{'tokens':>10}{'seconds':>9}{'tok/s':>10}{'vs plain':>9}{'vs +NLL':>9}")
        for budget in args.budgets:
            rows, stages = run_budget(mdir, args.data, budget, work, not args.no_hf, commit())
            append_rows(args.csv, rows, FIELDS, extra="ignore")
            append_rows(args.stages_csv or args.csv.with_name(args.csv.stem + "_stages.csv"), stages,
                        ["budget", "stage", "seconds"], extra="ignore")
            for r in rows:
                print(f"{r['budget']:>8} {r['impl']:<18}{r['tokens']:>10}{r['seconds']:>9.2f}{r['tokens_per_s']:>10}"
                      f"{r['vs_plain']:>9}{r['vs_plain_nll']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
