"""Failure category accuracy on the TRAIL dev errors, located by the label (issue 49), from category_extract.py's
cache: calibrated on one TRAIL split and scored on the other (GAIA <-> SWE-Bench), baselines beside.

    python benchmarks/accuracy/bench_category.py --work /tmp/masprism-category [--write-weights]

Rows (benchmarks/results/category.csv), one per (scored split, method, metric):
- zero-training: the description the log makes likeliest (a = 1, b = W = 0; no label read anywhere);
- cross-split: the category layer calibrated on the OTHER split's errors (family-balanced weights), scored on
  this one: what the packaged weights give a system they were not calibrated on;
- log-only: the same calibration with the model's evidence left out (its ablation);
- fitted-20: 20 errors of the scored split drawn at random (20 draws), the layer fitted on them as `fit` fits a
  team's kinds (fit/categories.fit_weights: from zero-training, its L2), scored on the errors of the scored
  split's traces none of whose errors was drawn (the same held-out errors score zero-training and the
  cross-split layer in that draw, "zero-training@draws", "cross-split@draws");
- fitted-20, as `fit` ships it: the same draws through fit/categories.fit_kinds (its own folds over the 20 and
  its keep rule), the kept layer scored: what a team with 20 labels gets;
- ceiling (in-split layer; + pooled pass-2 state): the layer fitted on the scored split's own labels, 5 folds
  by trace x3 seeds: an upper bound of what these signals carry, not a held-out protocol across systems;
- majority / label-frequency: the calibration split's most frequent kind; a kind drawn with the calibration
  split's frequencies (mean over 200 seeded draws).
Metrics: family balanced accuracy (mean recall over the families present in the scored split's labels; any
constant scores 1/families), leaf macro-F1 (over the kinds in the labels or the predictions), leaf accuracy.
`--write-weights` writes the layer calibrated on both splits to the packaged weights (what runs ship);
`--signal-cache` adds the verdict's kind end to end (category_end_to_end.py); the markdown is category_report.py's.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
from datetime import date
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    import sys

    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy.category_fit import calibrate, metrics, predict, subset
from benchmarks.accuracy.category_report import BEGIN, CEILINGS, END, K_FIT, SHIPS, SPLITS, markdown
from benchmarks.rows import RESULTS, append_rows
from masprism_batch.category import classify
from masprism_batch.category.groups import terms_of
from masprism_batch.category.taxonomy import TRAIL
from masprism_batch.fit import categories as fc

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench_category")
DRAWS = 20
CEIL_SEEDS = (0, 1, 2)  # fold assignments of the ceiling rows


def load(data: Path, work: Path, model: str, split: str) -> dict:
    """Every labelled error of the split whose span is a step: its kind, the log evidence (computed here, no
    model), and the model evidence from category_extract.py's cache where that trace was read (else nan)."""
    from benchmarks.accuracy.category_extract import labelled_errors
    from masprism_batch.category.log_signals import step_features
    from masprism_batch.ingest import read_inputs

    cols = {"trace": [], "step": [], "y": [], "pmi": [], "log": [], "vec": [], "terms": []}
    skipped = 0
    for t in sorted(read_inputs([str(data / "trail" / split)]), key=lambda t: t.trace_id):
        cache = work / model / split / f"{t.trace_id}.npz"
        d = np.load(cache) if cache.exists() else None
        for j, (k, c) in enumerate(labelled_errors(t)):
            kind = TRAIL.resolve(str(c))
            if kind is None:
                skipped += 1
                continue
            cols["trace"].append(t.trace_id)
            cols["step"].append(k)
            cols["y"].append(TRAIL.index(kind))
            cols["log"].append(step_features(t.steps, k))
            cols["pmi"].append(d["pmi"][j] if d is not None else np.full(len(TRAIL.kinds), np.nan))
            cols["vec"].append(d["vec"][j] if d is not None else None)
            cols["terms"].append(terms_of(t.steps[k].content))
    out = {k: (np.array(v) if k not in ("vec", "terms") else v) for k, v in cols.items()}
    out["trace"] = np.array(cols["trace"])
    out["skipped"] = skipped
    out["read"] = np.isfinite(out["pmi"]).all(axis=1)
    return out


def score_split(cal: dict, test: dict, cal_name: str, test_name: str, scope: str) -> list[dict]:
    rows = []

    def add(method, held_out, ms, sd=None, n=None):
        for k, v in ms.items():
            rows.append({"scope": scope, "scored_on": test_name, "calibrated_on": cal_name, "method": method, "metric": k,
                         "value": round(v, 4), "sd": None if sd is None else round(sd[k], 4),
                         "n_errors": n or len(test["y"]), "held_out": held_out})

    y = test["y"]
    zero = classify.CategoryModel.zero(TRAIL)
    add("zero-training", "no labels read", metrics(y, predict(zero, test)))
    cross = calibrate(cal, f"trail/{cal_name}")
    add("cross-split", f"calibrated on {cal_name} only", metrics(y, predict(cross, test)))
    add("log-only", f"calibrated on {cal_name} only, model evidence left out",
        metrics(y, predict(calibrate(cal, "log-only", use_model=False), test)))
    maj = np.bincount(cal["y"], minlength=len(TRAIL.kinds)).argmax()
    add("majority", f"{TRAIL.names[maj]} (the most frequent kind of {cal_name})", metrics(y, np.full(len(y), maj)))
    freq = np.bincount(cal["y"], minlength=len(TRAIL.kinds)) / len(cal["y"])
    draws = [metrics(y, np.random.default_rng(s).choice(len(freq), len(y), p=freq)) for s in range(200)]
    add("label-frequency", f"kinds drawn with {cal_name}'s frequencies, 200 seeds",
        {k: float(np.mean([d[k] for d in draws])) for k in draws[0]})
    fitted, shipped, base, zbase, n_held = [], [], [], [], []
    kd = fc.KindData(test["trace"], test["step"], y, test["pmi"], test["log"])
    for s in range(DRAWS):
        rng = np.random.default_rng(1000 + s)
        pick = rng.choice(len(y), K_FIT, replace=False)
        drawn = set(test["trace"][pick])
        held = np.array([i for i in range(len(y)) if test["trace"][i] not in drawn])
        if len(held) == 0:
            continue
        m = fc.fit_weights(kd, pick, TRAIL, f"fit-{K_FIT}")
        fitted.append(metrics(y[held], predict(m, test, held)))
        shipped.append(metrics(y[held], predict(shipped_layer(kd, pick), test, held)))
        base.append(metrics(y[held], predict(cross, test, held)))
        zbase.append(metrics(y[held], predict(zero, test, held)))
        n_held.append(len(held))
    for name, got in ((f"fitted-{K_FIT}", fitted), (SHIPS, shipped), ("zero-training@draws", zbase),
                      ("cross-split@draws", base)):
        add(name, f"{K_FIT} errors of {test_name} drawn x{len(got)}; scored on the errors of its traces with none "
            f"drawn (mean {np.mean(n_held):.0f})", {k: float(np.mean([g[k] for g in got])) for k in got[0]},
            {k: float(np.std([g[k] for g in got])) for k in got[0]}, int(np.mean(n_held)))
    for name, with_state in zip(CEILINGS, (False, True), strict=True):
        if with_state and any(v is None for v in test["vec"]):
            continue  # a step the model did not read has no pooled state
        add(name, f"fitted on {test_name}'s own labels, 5 folds by trace x{len(CEIL_SEEDS)} seeds: an upper bound "
            "of these signals, not a protocol", ceiling(test, with_state))
    return rows


def shipped_layer(kd: fc.KindData, pick: np.ndarray) -> classify.CategoryModel:
    """The layer `fit` ships from the labelled errors `pick`: its own held-out choice (fit/categories.fit_kinds:
    the fitted kinds only where they beat zero-training on the picked errors' folds), else zero-training."""
    sub = fc.KindData(kd.logs[pick], kd.steps[pick], kd.y[pick], kd.pmi[pick], kd.f[pick])
    entry = fc.fit_kinds(sub, TRAIL, "draw")
    return classify.CategoryModel.from_json(entry["weights"], TRAIL) if entry["kept"] == "fitted" else \
        classify.CategoryModel.zero(TRAIL)


def ceiling(d: dict, with_state: bool) -> dict:
    """What the signals carry at most for a system with plenty of labels: the category layer fitted on the scored
    split's own errors, 5 folds by trace (no trace both fitted on and scored), metrics averaged over CEIL_SEEDS;
    `with_state`: the pooled pass-2 state of the step (unit length) read beside the log's evidence."""
    f = d["log"]
    if with_state:
        v = np.stack(d["vec"]).astype(np.float64)
        f = np.concatenate([f, v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)], axis=1)
    dd = dict(d, log=f)
    traces = np.array(sorted(set(d["trace"].tolist())))
    got = []
    for seed in CEIL_SEEDS:
        fold = dict(zip(traces.tolist(), np.random.default_rng(seed).permutation(len(traces)) % 5, strict=True))
        of = np.array([fold[t] for t in d["trace"].tolist()])
        pred = np.zeros(len(d["y"]), dtype=int)
        for k in range(5):
            test = np.flatnonzero(of == k)
            pred[test] = predict(calibrate(dd, "ceiling", idx=np.flatnonzero(of != k)), dd, test)
        got.append(metrics(d["y"], pred))
    return {k: float(np.mean([g[k] for g in got])) for k in got[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/masprism-category")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--md", default=str(ROOT / "docs" / "results.md"), help='page to write ("": none)')
    ap.add_argument("--write-weights", action="store_true")
    ap.add_argument("--signal-cache", default=None, metavar="DIR",
                    help="accuracy_extract.py's cache of the same model: adds the verdict's kind end to end")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    data = {s: load(Path(args.data), Path(args.work), args.model, s) for s in SPLITS}
    cover = ", ".join(f"{s} {int(d['read'].sum())}/{len(d['y'])}" for s, d in data.items())
    log.info("errors with the model's evidence read: %s", cover)
    rows = []
    for scope, pick in ((f"all errors (model evidence read for {cover}; elsewhere the log's only)", None),
                        ("errors whose step the model read", "read")):
        if pick and all(d["read"].all() for d in data.values()):
            continue  # every error read: the same errors as the scope above
        dd = {s: (subset(d, d["read"]) if pick else d) for s, d in data.items()}
        if min(len(d["y"]) for d in dd.values()) < 2 * K_FIT:
            log.info("scope %r: too few errors (%s), skipped", scope, {s: len(d["y"]) for s, d in dd.items()})
            continue
        rows += score_split(dd["SWE_Bench"], dd["GAIA"], "SWE_Bench", "GAIA", scope) + \
            score_split(dd["GAIA"], dd["SWE_Bench"], "GAIA", "SWE_Bench", scope)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    e2e = []
    if args.signal_cache:
        from benchmarks.accuracy.accuracy_cases import load_cases
        from benchmarks.accuracy.category_end_to_end import end_to_end

        e2e = end_to_end(load_cases(Path(args.data), Path(args.signal_cache)), data)
        for r in e2e:
            log.info("%s", r)
            r.update(date=date.today().isoformat(), commit=commit, model=args.model, machine="shared 2-core CPU")
        append_rows(RESULTS / "category_e2e.csv", e2e)
    for r in rows:
        r.update(date=date.today().isoformat(), commit=commit, model=args.model, machine="shared 2-core CPU")
        log.info("%-10s %-18s %-26s %.3f", r["scored_on"], r["method"], r["metric"], r["value"])
    append_rows(RESULTS / "category.csv", rows)
    if args.md:
        from benchmarks.accuracy.accuracy_report import replace_block

        replace_block(Path(args.md), markdown(rows, {s: d["skipped"] for s, d in data.items()}, args.model, e2e), BEGIN, END)
    if args.write_weights:
        both = {k: np.concatenate([data[s][k] for s in SPLITS]) for k in ("y", "pmi", "log")}
        m = calibrate(both, "trail-dev")
        from masprism_batch.method import weights_dir

        dst = weights_dir() / f"category-trail-{args.model}.json"
        dst.write_text(json.dumps(m.to_json(), indent=1) + "\n", encoding="utf-8")
        log.info("wrote %s", dst)


if __name__ == "__main__":
    main()
