"""Pass-2 prompt building beside the pass-1 prefills: the model stage with `engine.pass2_render_threads` 0 vs 1.

One `model_stage.attribute_traces` call on a set of traces (renders from planning, as an engine ships them), timed
per setting. `render_pass2_cpu_s` is the CPU of the thread that built the prompts; `render_pass2_wait_s` what
the model stage still waited for them after its last pass-1 pack (the part not overlapped: all of it with 0
threads). `cache=cold` empties the tokenizer cache after the pass-1 render, as in a model actor that received its
renders from a CPU task; `warm` keeps it, as in the local engine. Settings alternate within each repeat; the
first repeat is a warm-up and is not written.

    python benchmarks/pipeline/bench_pass2_overlap.py --model tiny-random --data ../shared/data/who_and_when/Hand-Crafted \
        --max-context 2048 --repeats 3

On a CPU both settings compete for the same cores, so wall time is not expected to move; on a GPU the point is
that the device does not wait for tokenisation. Rows are appended to benchmarks/results/pass2_overlap.csv.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from masprism_batch.config import load_config
from masprism_batch.ingest import read_inputs
from masprism_batch.model import load_model
from masprism_batch.render import pass1
from masprism_batch.render.encoding import encoder_for
from masprism_batch.stage.attribute import attribute_traces

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import append_rows, hardware  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "pass2_overlap.csv"
SAMPLE = Path(__file__).resolve().parents[2] / "masprism_batch" / "data" / "sample"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-random")
    ap.add_argument("--data", default=str(SAMPLE), help="raw traces (any format ingest reads)")
    ap.add_argument("--max-context", type=int, default=None, help="render.max_context (more pass-1 packs)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", default="warm,cold")
    ap.add_argument("--csv", type=Path, default=RESULTS)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    extra = {"render__max_context": args.max_context} if args.max_context else {}
    base = load_config(None, model__name=args.model, **extra)
    model = load_model(base.model, base.signals)
    traces = list(read_inputs(args.data))
    rcfg = pass1.render_config(base, model.max_context)
    packs: list[int] = []
    forward = model.signals

    def counted(seqs, *a, **kw):
        packs.append(len(seqs))
        return forward(seqs, *a, **kw)

    model.signals = counted
    rows = []
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    for cache in args.cache.split(","):
        for rep in range(args.repeats + 1):
            for threads in ((0, 1) if rep % 2 else (1, 0)):
                cfg = load_config(None, model__name=args.model, engine__pass2_render_threads=threads, **extra)
                renders = pass1.render_traces(traces, model.tokenizer, rcfg)
                if cache == "cold":
                    enc = encoder_for(model.tokenizer)
                    with enc.lock:
                        enc.cache.clear()
                        enc.chars = 0
                packs.clear()
                w0, c0 = time.perf_counter(), time.process_time()
                out = attribute_traces(traces, model, cfg, rendered=renders)
                wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                if rep == 0:
                    continue
                rows.append({"date": stamp, "hardware": hardware(), "model": args.model,
                             "data": Path(args.data).name, "traces": len(traces), "max_context": model.max_context
                             if not args.max_context else min(args.max_context, model.max_context),
                             "cache": cache, "threads": threads, "repeat": rep, "forward_calls": len(packs),
                             "wall_s": round(wall, 4), "process_cpu_s": round(cpu, 4),
                             "render_pass2_cpu_s": round(out.seconds_render_pass2, 5),
                             "render_pass2_wait_s": round(out.seconds_render_pass2_wait, 5),
                             "n_prompts": out.n_render_pass2, "attributed": len(out.attributions)})
                print(rows[-1], flush=True)
    append_rows(args.csv, rows)
    print(f"appended {len(rows)} rows to {args.csv}")


if __name__ == "__main__":
    main()
