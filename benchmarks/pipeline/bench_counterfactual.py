"""Counterfactual re-reads: sequential (one suffix prefill per candidate) vs packed batches (issue 24, item 2).

Real logs through the real stages up to the counterfactuals: pass 1 (one cut prompt per log), the pass-1
method, the pass-2 prompt, its prefill with the K/V cache kept; then the `counterfactual_k` candidates of every
log are re-read four ways on the same inputs:

- sequential:      method/counterfactual.effects, one `PrefillModel.suffix_nll` call per candidate (3-D masked
                   SDPA: the path the model stage ran before issue 24);
- batch1:          effects_batch with a 1-token budget: one suffix per forward, on model/suffix.py's kernel
                   (separates the attention fix from the packing);
- batched:         effects_batch, every suffix of every log packed into `--budget`-token forwards;
- batched_symptoms: the same, scoring only the symptoms' rows (what the verdict reads: the default path).

Each row: wall and process CPU seconds, suffix tokens, and the largest |D - D_sequential| over the cells both
measure. Rows are appended to benchmarks/results/counterfactual.csv.

    python benchmarks/pipeline/bench_counterfactual.py --data ../shared/data/who_and_when/Hand-Crafted --limit 6
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import psutil
import torch

from masprism_batch.config import load_config
from masprism_batch.ingest import read_inputs
from masprism_batch.method import counterfactual as cf
from masprism_batch.model import load_model
from masprism_batch.render import pass1
from masprism_batch.stage.attribute import _placeholder_ids
from masprism_batch.stage.pass2 import prepare_pass2

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import append_rows  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "counterfactual.csv"


def requests(traces, model, cfg):
    rcfg = pass1.render_config(cfg, model.max_context).model_copy(update={"pass1": "truncate"})
    out = []
    for t in traces:
        r1 = pass1.render_traces([t], model.tokenizer, rcfg)[0]
        if isinstance(r1, dict):
            continue
        s1 = model.signals([r1.input_ids], [r1.step_ids()])[0]
        pp = prepare_pass2(0, s1, traces=[t], r1={0: r1}, cfg=cfg, rcfg=rcfg, tok=model.tokenizer)
        if pp.r2 is None or not pp.p1.symptoms:
            continue
        base = model.signals([pp.r2.input_ids], [pp.r2.step_ids()], keep_kv=True)[0]
        out.append(cf.Request(pp.r2, base, pp.p1.candidates[: cfg.method.counterfactual_k], max(pp.p1.symptoms),
                              list(pp.p1.symptoms)))
    return out


def repo_relative(path: str) -> str:
    """A data path as recorded in the results: relative to the repository, so rows name no machine's layout."""
    return os.path.relpath(os.path.abspath(path), Path(__file__).resolve().parents[2])


def timed(fn):
    proc = psutil.Process()
    c0, t0 = proc.cpu_times(), time.perf_counter()
    res = fn()
    c1 = proc.cpu_times()
    return res, time.perf_counter() - t0, (c1.user + c1.system) - (c0.user + c0.system)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-context", type=int, default=None, help="tokens per prompt (default from config)")
    ap.add_argument("--budget", type=int, default=8192, help="suffix tokens per packed forward")
    ap.add_argument("--csv", type=Path, default=RESULTS)
    args = ap.parse_args()
    cfg = load_config(None, model__name=args.model, render__max_context=args.max_context)
    model = load_model(cfg.model, cfg.signals)
    traces = [t for _, t in zip(range(args.limit), read_inputs([args.data]), strict=False)]
    reqs = requests(traces, model, cfg)
    ph = _placeholder_ids(model.tokenizer)
    seq, seq_s, seq_cpu = timed(lambda: [cf.effects(model, q.rendered, q.base, q.candidates, q.last, ph)
                                         for q in reqs])
    full = [cf.Request(q.rendered, q.base, q.candidates, q.last, None) for q in reqs]
    rows = [("sequential", seq, seq_s, seq_cpu, {})]
    for name, rq, budget in (("batch1", full, 1), ("batched", full, args.budget), ("batched_symptoms", reqs, args.budget)):
        stats: dict = {}
        got, s, c = timed(lambda rq=rq, budget=budget, stats=stats: cf.effects_batch(model, rq, ph, budget, stats))
        rows.append((name, got, s, c, stats))
    tokens = rows[-1][4].get("tokens", 0)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    hw = f"{psutil.cpu_count()}-core CPU, torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}"
    fields = ["date", "hardware", "model", "data", "logs", "suffixes", "suffix_tokens", "impl", "wall_s", "cpu_s",
              "speedup_vs_sequential", "max_abs_diff", "cmd"]
    for name, Ds, s, c, st in rows:
        diff = max((float(np.nanmax(np.abs(D - S))) if np.isfinite(D - S).any() else 0.0)
                   for D, S in zip(Ds, seq, strict=True)) if reqs else 0.0
        row = [date, hw, args.model, repo_relative(args.data), len(reqs), st.get("suffixes", rows[1][4].get("suffixes", "")),
               st.get("tokens", tokens), name, round(s, 2), round(c, 2), round(seq_s / s, 2), f"{diff:.2e}",
               f"python benchmarks/pipeline/bench_counterfactual.py --data {repo_relative(args.data)} --limit {args.limit} "
               f"--model {args.model} --max-context {cfg.render.max_context} --budget {args.budget}"]
        append_rows(args.csv, [dict(zip(fields, row, strict=True))], fields)  # row by row, as measured
        print(dict(zip(["impl", "wall_s", "cpu_s", "speedup", "max_abs_diff", "tokens"],
                       [name, row[8], row[9], row[10], row[11], row[6]], strict=True)), flush=True)


if __name__ == "__main__":
    main()
