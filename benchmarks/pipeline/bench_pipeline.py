"""Engine benchmark: one synthetic corpus through `run --engine local`, `ray` with 1 actor and with 2 actors.

Each configuration is the real command in a fresh subprocess: `command_s` is its whole wall time (Python
start, staging, Ray start-up, model loads); `engine_s` (run.json) starts after planning/staging and includes
Ray start-up and model loading. Peak RSS is sampled every 0.2 s: `driver_rss_mb` is the command's own process, `tree_rss_mb` the sum over its process tree (Ray workers
included; shared object-store pages are counted once per process that maps them, so it overstates).

    python benchmarks/pipeline/bench_pipeline.py --model tiny-random --traces 60 --tokens 2000
    python benchmarks/pipeline/bench_pipeline.py --model tiny-random --traces 10000 --tokens 30 --signals synthetic

`--signals synthetic` keeps everything real (ingest, staging, render, packing, the method, commits) except
the transformer forward, which is replaced by hashed pseudo-random signals of the right shapes: it measures
the engine's own cost and memory at a scale the CPU model cannot reach here. Rows say which mode ran.

Rows are appended to benchmarks/results/pipeline.csv with the date, host CPU count and command.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import psutil
from masprism_batch.pipelines.model_stage import load_model

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import append_rows  # noqa: E402

WORDS = ("search the web for the answer then check file result error tool agent plan code run test value "
         "table list count step reply user system report final number name date page link query data").split()
ENGINES = {"local": ["--engine", "local"], "local-t1": ["--engine", "local", "--threads", "1"],
           "ray1": ["--engine", "ray", "--workers", "1"],
           "ray2": ["--engine", "ray", "--workers", "2"]}
RESULTS = Path(__file__).resolve().parents[1] / "results" / "pipeline.csv"


def make_corpus(path: Path, n: int, tokens: int, seed: int) -> None:
    """n canonical traces as JSONL, ~`tokens` tokens each (about 1.3 tokens per word), 3-12 steps."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            n_steps = rng.randint(3, 12)
            words = max(n_steps, int(tokens / 1.3))
            per = [words // n_steps] * n_steps
            steps = [{"index": j, "agent": rng.choice(["Planner", "WebSurfer", "Coder", "Verifier"]),
                      "role": "assistant", "kind": "message",
                      "content": " ".join(rng.choice(WORDS) for _ in range(per[j]))} for j in range(n_steps)]
            f.write(json.dumps({"trace_id": f"bench-{i:06d}", "source": "bench", "system": "synthetic",
                                "question": "What is the answer?", "steps": steps}) + "\n")


class _SyntheticSignalModel:
    """The real model's tokenizer and limits; signals from a hash of the input instead of a forward."""

    def __init__(self, model):
        self.tokenizer, self.max_context = model.tokenizer, model.max_context
        self.model_id = f"{model.model_id}+synthetic-signals"

    def signals(self, seqs, step_ids, n_steps=None, **_):
        """Per sequence: random NLL and a causal row-stochastic step attention (no per-head signals, no K/V:
        the method then skips the features that need them)."""
        from masprism_batch.model import SeqSignals

        out = []
        for k, (ids, sids) in enumerate(zip(seqs, step_ids, strict=True)):
            rng = np.random.default_rng(zlib.crc32(np.asarray(ids[:256], dtype=np.int64).tobytes()))
            n = n_steps[k] if n_steps is not None else max(sids) + 1
            nll = (rng.random(len(ids), dtype=np.float32) * 6).astype(np.float32)
            nll[0] = np.nan
            attn = np.tril(rng.random((n, n), dtype=np.float32))
            attn /= attn.sum(axis=1, keepdims=True)
            out.append(SeqSignals(token_nll=nll, step_attn=attn, n_tokens=len(ids)))
        return out


def synthetic_model(cfg):
    """The engines' `load_model`: the real model's tokenizer and context, synthetic signals."""
    return _SyntheticSignalModel(load_model(cfg))


def _child(argv: list[str]) -> None:
    """In-process engine run with synthetic signals (the CLI has no such switch, on purpose)."""
    from masprism_batch.pipelines import run_local, run_ray

    from masprism_batch.config import load_config

    corpus, outdir, engine, workers, model = argv
    cfg = load_config(None, model__name=model)
    if engine == "local":
        run_local([corpus], outdir, cfg, load_model=synthetic_model, progress=False)
    else:
        import ray.cloudpickle

        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import this script
        run_ray([corpus], outdir, cfg, workers=int(workers), load_model=synthetic_model,
                progress=False)


def _sample(proc: psutil.Process, peak: dict, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            own = proc.memory_info().rss
            tree = own + sum(c.memory_info().rss for c in proc.children(recursive=True))
        except psutil.Error:
            break
        peak["driver"] = max(peak.get("driver", 0), own)
        peak["tree"] = max(peak.get("tree", 0), tree)
        stop.wait(0.2)


def run_one(corpus: Path, outdir: Path, engine: str, model: str, extra: list[str], signals: str) -> dict:
    if signals == "synthetic":
        workers = ENGINES[engine][-1] if engine.startswith("ray") else "1"
        cmd = [sys.executable, __file__, "--child", str(corpus), str(outdir),
               "ray" if engine.startswith("ray") else "local", workers, model]
    else:
        cmd = [sys.executable, "-c", "from masprism_batch.cli import main; main()", "run", str(corpus),
               "-o", str(outdir), "--model", model, "--no-progress", *ENGINES[engine], *extra]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak: dict = {}
    stop = threading.Event()
    th = threading.Thread(target=_sample, args=(psutil.Process(p.pid), peak, stop), daemon=True)
    th.start()
    log, _ = p.communicate()
    stop.set()
    th.join()
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 3):
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{log[-3000:]}")
    run = json.loads((outdir / "run.json").read_text())
    inv = run["this_invocation"]
    return {"engine": engine, "signals": signals, "workers": run["workers"], "traces": run["counts"]["in"],
            "attributed": run["counts"]["attributed"], "tokens": run["counts"]["tokens"],
            "command_s": round(wall, 2), "engine_s": inv["wall_seconds"],
            "traces_per_s": inv["traces_per_second"], "tokens_per_s": inv["tokens_per_second"],
            "driver_rss_mb": round(peak.get("driver", 0) / 2**20), "tree_rss_mb": round(peak.get("tree", 0) / 2**20),
            "model_s": round(run["stage_seconds_total"].get("seconds_model", 0.0), 2),
            "max_context": run["config"]["render"]["max_context"], "config_hash": run["config_hash"],
            "ray_worker_niceness": os.environ.get("RAY_worker_niceness", "15 (Ray default)")
            if engine.startswith("ray") else "",
            "cmd": "masprism-batch run CORPUS -o OUT --model " + model + " " + " ".join(ENGINES[engine] + extra)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-random")
    ap.add_argument("--traces", type=int, default=60)
    ap.add_argument("--tokens", type=int, default=2000, help="approximate tokens per trace")
    ap.add_argument("--engines", default="local,ray1,ray2")
    ap.add_argument("--extra", default="", help="extra `run` options, e.g. '--traces-per-shard 64'")
    ap.add_argument("--signals", choices=["model", "synthetic"], default="model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", type=Path, default=RESULTS)
    ap.add_argument("--keep", type=Path, default=None, help="keep corpus and outputs here")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus.jsonl"
    make_corpus(corpus, args.traces, args.tokens, args.seed)
    rows, base = [], None
    for engine in args.engines.split(","):
        out = work / f"out-{engine}"
        shutil.rmtree(out, ignore_errors=True)
        row = run_one(corpus, out, engine, args.model, args.extra.split(), args.signals)
        base = base or (row if engine == "local" else None)
        row["speedup_vs_local"] = round(base["command_s"] / row["command_s"], 3) if base else ""
        rows.append(row)
        print(json.dumps(row), flush=True)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    hw = f"{psutil.cpu_count()}-core CPU, {round(psutil.virtual_memory().total / 2**30)} GiB, shared"
    append_rows(args.csv, [{"date": date, "hardware": hw, "model": args.model, "tokens_per_trace": args.tokens, **r}
                           for r in rows])
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"appended {len(rows)} rows to {args.csv} (python {sys.version.split()[0]}, pid {os.getpid()})")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2:])
    else:
        main()
