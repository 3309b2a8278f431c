"""Accuracy of MASPrism and its learned re-ranker on the labelled dev data, with the generalisation guard.

    python benchmarks/bench_accuracy.py --data ../shared/data --work /tmp/acc [--model smollm2-135m] [--train-weights]

1. Runs the faithful method (`--method masprism`) once per dataset with the chosen model (cached in --work;
   the step_scores of this run are the ranker's features).
2. Scores, on the same cases: faithful MASPrism, pass 1 alone, and the learned ranker under the guard —
   k-fold cross-validation within each log family (repeated over seeds; mean and spread), train on one
   Who&When subset and test on the other, and leave-one-family-out (train on chats, test on span trees and
   the reverse) — plus ablations (signal features only / structure features only / no agent aggregation).
3. Writes tidy rows to benchmarks/results/accuracy.csv and the tables to docs/results.md; with
   --train-weights, fits the final weights on all dev data and writes masprism_batch/method/weights/.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import logging
import platform
import time
from pathlib import Path

import numpy as np

from masprism_batch.config import load_config
from masprism_batch.eval import score_trail, score_who_and_when
from masprism_batch.io import read_dataset
from masprism_batch.method import ranker as rk
from masprism_batch.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
SIGNAL = ["nll1_z", "nll2_z", "h_norm", "attn_in_norm", "is_symptom", "is_candidate", "score_norm", "recip_rank"]
log = logging.getLogger("bench_accuracy")


def run_dataset(name: str, inputs: list[str], work: Path, model_name: str, max_context: int | None,
                dtype: str | None = None, partial: bool = False):
    """Faithful MASPrism over one dataset with the resumable local engine (small shards: a killed run
    resumes where it stopped). Returns the output folder and the run's figures."""
    from masprism_batch.pipelines import run_local

    cfg = load_config(None, model__name=model_name, model__dtype=dtype, method__name="masprism",
                      render__max_context=max_context, batch__traces_per_shard=4)
    out = work / f"{name}-{cfg.config_hash()}"
    done = out / "done.json"
    base = {"model": model_name, "config_hash": cfg.config_hash(), "dtype": cfg.model.dtype,
            "max_context": cfg.render.max_context, "hardware": platform.machine(), "date": dt.date.today().isoformat()}
    if not done.exists() and not partial:
        run_local(inputs, out, cfg)
        done.write_text(json.dumps({**base, "run": json.loads((out / "run.json").read_text())}, default=str))
    # partial: score what is committed so far of a run still going (reported as such)
    info = json.loads(done.read_text()) if done.exists() else {**base, "partial": True}
    attrs = read_dataset(out / "attributions").to_pylist()
    n = max(len(attrs), 1)
    info.update(traces=len(attrs), tokens=sum(a["tokens_pass1"] + a["tokens_pass2"] for a in attrs),
                seconds_pass1=sum(a["seconds_pass1"] for a in attrs), seconds_pass2=sum(a["seconds_pass2"] for a in attrs))
    info["seconds"] = info["seconds_pass1"] + info["seconds_pass2"]
    info["per_trace"] = info["seconds"] / n
    return out, info


def load_run(out: Path):
    attrs = {r["trace_id"]: r for r in read_dataset(out / "attributions").to_pylist()}
    traces = [Trace.from_row(r) for r in read_dataset(out / "traces").to_pylist()]
    steps: dict[str, list[dict]] = {}
    for r in read_dataset(out / "step_scores").to_pylist():
        steps.setdefault(r["trace_id"], []).append(r)
    for v in steps.values():
        v.sort(key=lambda r: r["step"])
    traces = [t for t in traces if t.trace_id in attrs and t.trace_id in steps]
    return traces, attrs, steps


def gold_of(t: Trace) -> list[int]:
    lab = t.labels
    if lab is None:
        return []
    if lab.mistake_step is not None:
        return [lab.mistake_step]
    locs = set(lab.error_locations or [])
    return [i for i, s in enumerate(t.steps) if s.span_id in locs]


def pass1_rows(traces, attrs, steps):
    out = {}
    for t in traces:
        rows = steps[t.trace_id]
        cands = sorted((r for r in rows if r["is_candidate"]), key=lambda r: (-(r["h_score"] or 0), r["step"]))
        a = dict(attrs[t.trace_id])
        a["candidates"] = [{"step": r["step"], "span_id": r["span_id"]} for r in cands]
        a["pred_step"] = cands[0]["step"] if cands else a["pred_step"]
        a["pred_agent"] = t.steps[a["pred_step"]].agent
        out[t.trace_id] = a
    return out


def ranked_rows(model: rk.Ranker, traces, steps, agg=True):
    """Attribution-like rows from the same re-ranking the `ranked` method runs (ranker.rerank)."""
    out = {}
    for t in traces:
        order, _, agent = rk.rerank(t, steps[t.trace_id], model, 5, agg)
        out[t.trace_id] = {"trace_id": t.trace_id, "pred_step": order[0], "pred_agent": agent,
                           "candidates": [{"step": i, "span_id": t.steps[i].span_id} for i in order]}
    return out


def fit_on(traces, steps, cols, l2):
    samples = [(rk.step_features(t, steps[t.trace_id])[:, cols], gold_of(t)) for t in traces if gold_of(t)]
    m = rk.fit(samples, l2=l2)
    m.features = [rk.FEATURES[c] for c in cols]
    return m


def score(dataset, rows, traces):
    res = (score_who_and_when if dataset == "who-and-when" else score_trail)(rows, traces)
    flat = {}
    for sub, m in res["subsets"].items():
        for k, v in m.items():
            if isinstance(v, (int, float)) and v is not None:
                flat[(sub, k)] = v
    base = {}
    for sub, b in res["baselines"].items():
        for bname, m in b.items():
            for k, v in m.items():
                if isinstance(v, (int, float)) and v is not None:
                    base[(sub, bname, k)] = v
    return flat, base


def cv_rows(dataset, traces, steps, cols, l2, folds=5, seeds=(0, 1, 2), agg=True):
    """k-fold CV repeated over seeds; returns {(subset, metric): [value per seed]}."""
    per_seed: dict = {}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        ids = np.array([t.trace_id for t in traces])
        fold_of = dict(zip(ids, rng.permutation(len(ids)) % folds, strict=True))
        rows = {}
        for f in range(folds):
            train = [t for t in traces if fold_of[t.trace_id] != f]
            test = [t for t in traces if fold_of[t.trace_id] == f]
            rows.update(ranked_rows(fit_on(train, steps, cols, l2), test, steps, agg))
        flat, _ = score(dataset, rows, traces)
        for k, v in flat.items():
            per_seed.setdefault(k, []).append(v)
    return per_seed


KEY_METRICS = {"who-and-when": ["step_top1", "step_top3", "step_within1", "agent"],
               "trail": ["precision@1", "location_acc@1", "precision@5", "location_acc@5"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/masprism-accuracy")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--max-context", type=int, default=None)
    ap.add_argument("--dtype", default=None, help="model dtype (default: the config's, fp32 on CPU)")
    ap.add_argument("--datasets", default="who-and-when,trail")
    ap.add_argument("--partial", action="store_true", help="score the committed part of unfinished runs")
    ap.add_argument("--l2", type=float, default=1.0, help="ranker L2 (fixed a priori, not tuned on eval cases)")
    ap.add_argument("--train-weights", action="store_true")
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "accuracy.csv"))
    ap.add_argument("--md", default=str(ROOT / "docs" / "results.md"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    data, work = Path(args.data), Path(args.work)
    inputs = {"who-and-when": [str(data / "who_and_when")], "trail": [str(data / "trail")]}
    family = {"who-and-when": "chat", "trail": "spans"}
    all_cols = list(range(len(rk.FEATURES)))
    sig_cols = [rk.FEATURES.index(f) for f in SIGNAL]
    struct_cols = [c for c in all_cols if c not in sig_cols]
    rows_out: list[dict] = []
    runs, loaded = {}, {}
    for ds in args.datasets.split(","):
        t0 = time.perf_counter()
        out, info = run_dataset(ds, inputs[ds], work, args.model, args.max_context, args.dtype,
                                args.partial)
        runs[ds] = info
        loaded[ds] = load_run(out)
        log.info("%s: %d traces (%.0f s run, loaded in %.1f s)", ds, len(loaded[ds][0]), info["seconds"],
                 time.perf_counter() - t0)

    def emit(ds, method, protocol, flat, spread=None):
        for (sub, metric), v in flat.items():
            if metric in KEY_METRICS[ds] or metric == "n":
                rows_out.append({"dataset": ds, "subset": sub, "method": method, "protocol": protocol,
                                 "metric": metric, "value": round(float(v), 4),
                                 "spread": "" if spread is None else round(float(spread.get((sub, metric), 0)), 4)})

    for ds, (traces, attrs, steps) in loaded.items():
        flat, base = score(ds, attrs, traces)
        emit(ds, "masprism (faithful)", "no training", flat)
        emit(ds, "pass 1 alone", "no training", score(ds, pass1_rows(traces, attrs, steps), traces)[0])
        for (sub, bname, metric), v in base.items():
            if metric in KEY_METRICS[ds]:
                rows_out.append({"dataset": ds, "subset": sub, "method": f"baseline: {bname}",
                                 "protocol": "no training", "metric": metric, "value": round(v, 4), "spread": ""})
        for name, cols, agg in (("ranked", all_cols, True), ("ranked, no agent aggregation", all_cols, False),
                                ("ranked, signal features only", sig_cols, True),
                                ("ranked, structure features only", struct_cols, True)):
            cv = cv_rows(ds, traces, steps, cols, args.l2, agg=agg)
            emit(ds, name, "5-fold CV x3 seeds", {k: np.mean(v) for k, v in cv.items()},
                 {k: np.std(v) for k, v in cv.items()})
        if ds == "who-and-when":  # tune on one subset, report the other
            for a, b in (("Algorithm-Generated", "Hand-Crafted"), ("Hand-Crafted", "Algorithm-Generated")):
                tr = [t for t in traces if t.source.endswith(a)]
                te = [t for t in traces if t.source.endswith(b)]
                if not tr or not te:
                    continue
                m = fit_on(tr, steps, all_cols, args.l2)
                emit(ds, "ranked", f"trained on {a} only", score(ds, ranked_rows(m, te, steps), te)[0])
    # leave one family out: weights from the other dataset family
    for ds, other in (("who-and-when", "trail"), ("trail", "who-and-when")):
        if ds not in loaded or other not in loaded:
            continue
        m = fit_on(loaded[other][0], loaded[other][2], all_cols, args.l2)
        traces, _, steps = loaded[ds]
        emit(ds, "ranked", f"trained on {other} only", score(ds, ranked_rows(m, traces, steps), traces)[0])
    if args.train_weights:
        wdir = ROOT / "masprism_batch" / "method" / "weights"
        wdir.mkdir(parents=True, exist_ok=True)
        for ds, (traces, _, steps) in loaded.items():
            m = fit_on(traces, steps, all_cols, args.l2)
            (wdir / f"ranker-{family[ds]}.json").write_text(m.to_json() + "\n")
            emit(ds, "ranked (packaged weights)", "in-sample: trained on these cases (optimistic)",
                 score(ds, ranked_rows(m, traces, steps), traces)[0])
            log.info("wrote %s", wdir / f"ranker-{family[ds]}.json")
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows_out[0]))
        w.writeheader()
        w.writerows(rows_out)
    write_markdown(Path(args.md), rows_out, runs, args)


def write_markdown(path: Path, rows: list[dict], runs: dict, args) -> None:
    lines = ["# Results", "", f"Generated by `python benchmarks/bench_accuracy.py --model {args.model}` on "
             f"{dt.date.today().isoformat()} ({platform.machine()} CPU, 2 cores; tidy rows in "
             "`benchmarks/results/accuracy.csv`). Exact match only. Ranker figures are held-out: each trace is "
             "scored by weights that never saw it (protocol column).", ""]
    for ds, info in runs.items():
        n = max(info["traces"], 1)
        lines.append(f"- {ds}: {info['traces']} traces, model {info['model']} ({info['dtype']}), max context "
                     f"{info['max_context']}, {info['seconds'] / n:.1f} s/trace ({info['seconds_pass1'] / n:.1f} s pass 1, "
                     f"{info['seconds_pass2'] / n:.1f} s pass 2), {info['tokens'] / n:,.0f} tokens/trace, "
                     f"{info['tokens'] / max(info['seconds'], 1e-9):,.0f} tokens/s")
    for ds in runs:
        metrics = KEY_METRICS[ds]
        subs = sorted({r["subset"] for r in rows if r["dataset"] == ds})
        for sub in subs:
            lines += ["", f"## {sub}", "", "| method | protocol | n | " + " | ".join(metrics) + " |",
                      "|---|---|---|" + "---|" * len(metrics)]
            keyset = []
            for r in rows:
                if r["dataset"] == ds and r["subset"] == sub and (r["method"], r["protocol"]) not in keyset:
                    keyset.append((r["method"], r["protocol"]))
            for meth, prot in keyset:
                vals = {r["metric"]: r for r in rows if r["dataset"] == ds and r["subset"] == sub
                        and r["method"] == meth and r["protocol"] == prot}
                n = vals.get("n", {}).get("value", "")
                cells = []
                for m in metrics:
                    if m not in vals:
                        cells.append("")
                        continue
                    v, s = vals[m]["value"], vals[m]["spread"]
                    cells.append(f"{v:.3f}" + (f" ± {s:.3f}" if s != "" else ""))
                lines.append(f"| {meth} | {prot} | {int(n) if n != '' else ''} | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
