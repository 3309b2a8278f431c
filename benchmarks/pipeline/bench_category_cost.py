"""What failure categories cost, and how often the verdict's kind is right end to end (issue 49), on TRAIL.

    nice python benchmarks/pipeline/bench_category_cost.py --data ../shared/data --n 1

One process, one model: the model stage of `eval --dataset trail` (packaged rankers, as eval runs) over the same
deterministic sample of TRAIL dev traces with categories off (A) and on (B), in the order B A A B so a drift
of the shared machine's load hits both arms alike and B pays the process's cold start (no warm-up run: a
conservative ratio); the wall time of each arm is summed over its two runs.
The stage is what categories touch (ingest and writing are the same in both arms), so the ratio here is an
upper bound on the ratio of the whole `eval` command. Groups are computed by `stats` from the run's outputs,
after it: their time is measured on the B arm's verdicts beside (`groups_seconds`).

End to end (B arm): the share of verdicts whose blamed span is a labelled error span (step right) and of those
whose kind is also that span's labelled kind (step and kind right). Both are in-sample: the packaged rankers
were fitted on these TRAIL dev traces, and the packaged category weights calibrated on their errors (when the
weights file exists; else zero-training). Rows: benchmarks/results/category_cost.csv.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import time
from datetime import date
from pathlib import Path

import numpy as np

from benchmarks.rows import RESULTS, append_rows
from masprism_batch.category import groups as grp
from masprism_batch.category.taxonomy import TRAIL
from masprism_batch.config import load_config
from masprism_batch.ingest import read_inputs
from masprism_batch.stage.attribute import attribute_traces

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench_category_cost")


def sample(data: Path, n: int, pick: str = "shortest", seed: int = 0) -> list:
    """n labelled traces, alternating GAIA and SWE-Bench. "shortest": the shortest (by characters): a verdict's
    category read costs about the same whatever the log's length while the stage grows with it, so the shortest
    logs give the largest ratio (an upper bound for the dev set). "median": the traces nearest each split's median
    length (a typical log). "random": drawn with `seed` from each split (a sample of the dev set's lengths, its
    longest included: TRAIL's longest trace is 40x its shortest, so a few draws can take hours on a CPU)."""
    out = []
    for split in ("GAIA", "SWE_Bench"):
        ts = [t for t in read_inputs([str(data / "trail" / split)]) if t.labels and t.labels.error_locations]
        ts = sorted(ts, key=lambda t: (sum(len(s.content or "") for s in t.steps), t.trace_id))
        if pick == "random":
            ts = [ts[i] for i in np.random.default_rng(seed).permutation(len(ts))]
        elif pick == "median":
            ts = [ts[i] for i in sorted(range(len(ts)), key=lambda i: (abs(i - (len(ts) - 1) / 2), i))]
        out.append(ts)
    return [x for pair in zip(*out, strict=False) for x in pair][:n]


def right(traces: list, atts: list[dict]) -> dict:
    by = {t.trace_id: t for t in traces}
    step = both = 0
    for a in atts:
        lab = by[a["trace_id"]].labels
        gold = [TRAIL.resolve(c) for loc, c in zip(lab.error_locations, lab.error_categories or [], strict=False)
                if loc == a["pred_span_id"]]
        if gold:
            step += 1
            both += a.get("category") in gold
    return {"verdicts": len(atts), "step_right": step, "step_and_kind_right": both}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--n", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pick", choices=("shortest", "median", "random"), default="shortest",
                    help="shortest: the worst case; median: typical logs; random: a seeded draw")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1, help="repeat B A A B this many times (a run's CPU time varies "
                    "by ~10%% between identical runs on a shared CPU)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from masprism_batch.model import load_model

    traces = sample(Path(args.data), args.n, args.pick, args.seed)
    cfgs = {arm: load_config(None, model__threads=args.threads, method__ranker="packaged",
                             method__categories=arm == "B") for arm in "AB"}
    model = load_model(cfgs["A"].model, cfgs["A"].signals)
    secs = {"A": 0.0, "B": 0.0}
    cpu = {"A": 0.0, "B": 0.0}  # process CPU seconds (one thread): what the load of a shared machine cannot blur
    got = {}
    cat_secs = 0.0  # the category step's own seconds (stage timer) summed over the B runs
    for arm in "BAAB" * args.rounds:  # no warm-up: B's first run pays the cold start (the no-log baseline read)
        t0, c0 = time.perf_counter(), time.process_time()
        out = attribute_traces(traces, model, cfgs[arm])
        secs[arm] += time.perf_counter() - t0
        cpu[arm] += time.process_time() - c0
        got[arm] = out
        cat_secs += out.seconds_category
        log.info("arm %s: %.1f s wall, %.1f s CPU (%d verdicts, category %.2f s)", arm, time.perf_counter() - t0,
                 time.process_time() - c0, len(out.attributions), out.seconds_category)
    atts = got["B"].attributions
    t0, c0 = time.perf_counter(), time.process_time()
    g = grp.fit_groups(lambda: iter([[grp.Item(a["trace_id"], a.get("blamed_vector"), a.get("blamed_terms"))
                                      for a in atts]]), len(next((a["blamed_vector"] for a in atts
                                                                  if a.get("blamed_vector")), [])))
    groups_s, groups_cpu = time.perf_counter() - t0, time.process_time() - c0
    e2e = right(traces, atts)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    row = {"date": date.today().isoformat(), "commit": commit, "machine": "shared 2-core CPU",
           "threads": args.threads, "traces": len(traces), "rounds": args.rounds,
           "category_seconds": round(cat_secs, 2), "pick": args.pick,
           "chars": sum(len(s.content or "") for t in traces for s in t.steps), "seconds_off": round(secs["A"], 2),
           "seconds_on": round(secs["B"], 2), "groups_seconds": round(groups_s, 3),
           "added": round((secs["B"] + 2 * groups_s) / secs["A"] - 1, 4), "cpu_off": round(cpu["A"], 2),
           "cpu_on": round(cpu["B"], 2), "added_cpu": round((cpu["B"] + 2 * groups_cpu) / cpu["A"] - 1, 4),
           "n_groups": len(g.names), **e2e}
    log.info("%s", row)
    append_rows(RESULTS / "category_cost.csv", [row])


if __name__ == "__main__":
    main()
