"""End-to-end tokens/s of the default pipeline beside a plain forward of the same model on the same lengths
(issue 24, item 4), in one process, one model load.

1. pipeline: `run_local` (what `attribute` runs: ingest, staging, pass-1 render, packing, both passes, the
   method, the verdict, commits) on `--data` (default: Who&When Algorithm-Generated, a system without a fitted
   ranker, so its verdict reads no costly feature), the model already loaded. Tokens = pass-1 + pass-2 tokens
   of run.json (each pass counted once; counterfactual re-reads, if any, are not counted as tokens read).
2. plain: `PrefillModel.prefill` (bench_prefill.py's `sdpa` impl: the same runtime, plain SDPA everywhere, no
   signals, no logits) on random ids with exactly the sequence lengths the pipeline prefilled (each trace's
   pass-1 windows or prompt and its pass-2 prompt), packed with the same token budget.
3. plain + NLL: `PrefillModel.prefill_nll` on the same packs: the plain forward plus every token's NLL (the LM
   head), no step signals: the least any NLL-reading method computes (issue 45 item 5).

The pipeline's packs are bounded by work (`engine.pack_tokens`: 2,048 pass-1 tokens on a CPU, so a pack finishes
and commits within seconds, issue 51) while the plain reference packs at the token budget, its best: the ratio
includes what the bound costs. Its host tails run beside the next pack's prefills (issue 45).

ratio = pipeline tokens/s / plain tokens/s (ratio_nll: over plain + NLL), on wall time and on process CPU time (the CPU ratio is the one
to read when other jobs share the cores: it does not count the time this process waited for a core).
Rows are appended to benchmarks/results/pipeline_ratio.csv.

    python benchmarks/pipeline/bench_pipeline_ratio.py --data ../shared/data/who_and_when/Algorithm-Generated --limit 12
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import psutil
import torch
from masprism_batch.pipelines import run_local
from masprism_batch.pipelines.selection import Selection

from masprism_batch.config import load_config
from masprism_batch.model import load_model
from masprism_batch.outdir.reads import read_dataset
from masprism_batch.render import buckets, pass1
from masprism_batch.trace import Trace

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.pipeline.bench_counterfactual import repo_relative, timed  # noqa: E402  # one copy of the timing and path helpers
from benchmarks.rows import append_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "pipeline_ratio.csv"


def prefilled_lengths(outdir: Path, model, cfg) -> list[int]:
    """The sequence lengths the pipeline prefilled: pass-1 windows (or prompt) and the pass-2 prompt."""
    rcfg = pass1.render_config(cfg, model.max_context)
    traces = [Trace.from_row(r) for r in read_dataset(outdir / "traces").to_pylist()]
    attrs = {a["trace_id"]: a for a in read_dataset(outdir / "attributions").to_pylist()}
    out = []
    for t, r in zip(traces, pass1.render_traces(traces, model.tokenizer, rcfg), strict=True):
        if isinstance(r, dict) or t.trace_id not in attrs:
            continue
        wins = getattr(r, "windows", None)
        out += [len(w.input_ids) for w in wins] if wins is not None else [len(r.input_ids)]
        if attrs[t.trace_id]["tokens_pass2"]:
            out.append(int(attrs[t.trace_id]["tokens_pass2"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[3] / "shared/data/who_and_when/Algorithm-Generated"))
    ap.add_argument("--limit", type=int, default=12)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dtype", default=None, help="model dtype (auto | float32 | bfloat16 ...; default: the config's)")
    ap.add_argument("--csv", type=Path, default=RESULTS)
    args = ap.parse_args()
    extra = {} if args.dtype is None else {"model__dtype": args.dtype}
    cfg = load_config(None, model__name=args.model, model__threads=args.threads, **extra)
    model = load_model(cfg.model, cfg.signals)
    with tempfile.TemporaryDirectory(prefix="bench-ratio-") as tmp:
        out = Path(tmp) / "out"
        _, pipe_s, pipe_cpu = timed(lambda: run_local([args.data], out, cfg, model=model, progress=False,
                                                      select=Selection(limit=args.limit)))
        run = json.loads((out / "run.json").read_text())
        tokens = int(run["counts"]["tokens"])
        lengths = prefilled_lengths(out, model, cfg)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, model.arch.vocab_size, n).tolist() for n in lengths]
    groups = buckets.pack(lengths, cfg.batch.token_budget)
    _, plain_s, plain_cpu = timed(lambda: [model.prefill([seqs[i] for i in g]) for g in groups])
    _, nll_s, nll_cpu = timed(lambda: [model.prefill_nll([seqs[i] for i in g]) for g in groups])
    plain_tokens = sum(lengths)
    row = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "hardware": f"{psutil.cpu_count()}-core CPU, torch {torch.__version__}, {torch.get_num_threads()} threads, "
                    f"{str(model.dtype).removeprefix('torch.')}",
        "load_1min": round(os.getloadavg()[0], 1), "model": args.model, "data": repo_relative(args.data),
        "traces": run["counts"]["attributed"], "pipeline_tokens": tokens, "plain_tokens": plain_tokens,
        "pipeline_wall_s": round(pipe_s, 1), "pipeline_cpu_s": round(pipe_cpu, 1),
        "plain_wall_s": round(plain_s, 1), "plain_cpu_s": round(plain_cpu, 1),
        "pipeline_tok_s": round(tokens / pipe_s, 1), "plain_tok_s": round(plain_tokens / plain_s, 1),
        "ratio_wall": round((tokens / pipe_s) / (plain_tokens / plain_s), 3),
        "ratio_cpu": round((tokens / pipe_cpu) / (plain_tokens / plain_cpu), 3),
        "plain_nll_wall_s": round(nll_s, 1), "plain_nll_cpu_s": round(nll_cpu, 1),
        "ratio_nll_wall": round((tokens / pipe_s) / (plain_tokens / nll_s), 3),
        "ratio_nll_cpu": round((tokens / pipe_cpu) / (plain_tokens / nll_cpu), 3),
        "stage_seconds": json.dumps({k: round(v, 1) for k, v in run["stage_seconds_total"].items()}),
        "stage_tokens": json.dumps(run.get("stage_tokens_total", {})),
        "cmd": f"python benchmarks/pipeline/bench_pipeline_ratio.py --data {repo_relative(args.data)} --limit {args.limit} --model {args.model}",
    }
    print(json.dumps(row, indent=1), flush=True)
    append_rows(args.csv, [row])


if __name__ == "__main__":
    main()
