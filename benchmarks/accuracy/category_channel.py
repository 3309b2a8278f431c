"""Does the model read a failure's family the other way round? The step's own words read after each family's
description (a noisy-channel read), on the TRAIL dev errors of category_extract.py's cache (issue 49).

    python benchmarks/accuracy/category_channel.py read --split GAIA        # one process per split
    python benchmarks/accuracy/category_channel.py score                     # rows + the figures

The shipped evidence (category/evidence.py) reads each kind's description after the log: P(description | log).
Small models are known to classify better in the other direction, P(text | label) (Min et al. 2022, "Noisy
Channel Language Model Prompting"), which is tried here at the family level, the level of issue 49's target:
each labelled error's step text (its first TOKENS tokens, as the cache stored it) is read after a neutral lead
and after one lead per family description (written once, from TRAIL's family definitions, before any figure);
a family's score is how much its lead lowers the text's mean NLL. Scored without any label read
(zero-training: the family with the largest score) and with each family's score centred over the split's
errors (a label-free correction of a lead that lowers every text's NLL); one-vs-rest AUROC per family beside.
Rows: benchmarks/results/category_channel.csv. ~8 min per 300 errors on one core with SmolLM2.
"""

from __future__ import annotations

import argparse
import glob
import logging
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import RESULTS, append_rows
from benchmarks.rows import commit as rows_commit
from masprism_batch.category.taxonomy import TRAIL
from masprism_batch.method.confidence import auroc

log = logging.getLogger("category_channel")
ROOT = Path(__file__).resolve().parents[2]
SPLITS = ("GAIA", "SWE_Bench")
TOKENS = 96
NEUTRAL = "Below is one step of an agent's log.\nThe step:\n"
LEAD = "Below is one step of an agent's log, a step where {}.\nThe step:\n"
FAMILY = {
    "Reasoning Errors": "the agent reasoned wrongly: it made up facts, misread a result, misunderstood the task "
                        "or broke the required output format",
    "System Execution Errors": "the system failed: a tool, service, API, file or the environment returned an error",
    "Planning and Coordination Errors": "the agent planned badly: it lost track of the goal or the earlier context, "
                                        "repeated itself, or coordinated the steps badly",
}


def read(work: Path, model_name: str, split: str, out: Path) -> None:
    """Per cached trace of the split, per labelled error: the text's mean NLL after NEUTRAL and each family's lead."""
    import torch

    from masprism_batch.config import load_config
    from masprism_batch.model import load_model
    from masprism_batch.render.encoding import encoder_for

    torch.set_num_threads(1)
    cfg = load_config(None, model__name=model_name, model__dtype="float32", model__threads=1)
    model = load_model(cfg.model, cfg.signals)
    enc = encoder_for(model.tokenizer)
    leads = [list(x) for x in enc.encode([NEUTRAL] + [LEAD.format(FAMILY[f]) for f in TRAIL.families])]
    got, t0, n_tok = {}, time.time(), 0
    for f in sorted(glob.glob(str(work / model_name / split / "*.npz"))):
        texts = [str(x) for x in np.load(f)["text"]]
        rows = []
        for ids in (list(x)[:TOKENS] for x in enc.encode(texts)):
            seqs = [p + ids for p in leads]
            sig = model.signals(seqs, [[0] * len(s) for s in seqs], nll_from=[len(p) for p in leads])
            rows.append([float(np.nanmean(s.token_nll[len(p):])) if ids else np.nan
                         for s, p in zip(sig, leads, strict=True)])
            n_tok += sum(len(s) for s in seqs)
        got[Path(f).stem] = np.array(rows)
    np.savez(out, **got)
    log.info("%s: %d traces, %d tokens in %.0f s -> %s", split, len(got), n_tok, time.time() - t0, out)


def score(work: Path, model_name: str, split: str, reads: Path) -> list[dict]:
    C = np.load(reads)
    fams = list(TRAIL.families)
    X, y = [], []
    for stem in sorted(C.files):
        cats = np.load(work / model_name / split / f"{stem}.npz")["category"]
        for j, c in enumerate(cats):
            kind = TRAIL.resolve(str(c))
            if kind is None or not np.isfinite(C[stem][j]).all():
                continue
            X.append(-(C[stem][j, 1:] - C[stem][j, 0]))  # how much the family's lead lowers the text's NLL
            y.append(fams.index(TRAIL.kinds[TRAIL.index(kind)].family))
    X, y = np.array(X), np.array(y)

    def bal(pred):
        return float(np.mean([(pred[y == c] == c).mean() for c in np.unique(y)]))

    rows = [{"metric": "family_balanced_accuracy", "method": "zero-training", "value": bal(X.argmax(1))},
            {"metric": "family_balanced_accuracy", "method": "centred over the split",
             "value": bal((X - X.mean(0)).argmax(1))}]
    for j, f in enumerate(fams):
        if 0 < (y == j).sum() < len(y):
            rows.append({"metric": f"auroc one-vs-rest: {f}", "method": "zero-training",
                         "value": auroc(list(X[:, j] - X.mean(1)), list(y == j))})
    return [dict(r, scored_on=split, n_errors=len(y), value=round(r["value"], 4)) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", choices=("read", "score"))
    ap.add_argument("--split", choices=SPLITS, help="read: the split this process reads")
    ap.add_argument("--work", default="/tmp/masprism-category", help="category_extract.py's cache")
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    work = Path(args.work)
    reads = {s: work / f"channel-{args.model}-{s}.npz" for s in SPLITS}
    if args.phase == "read":
        if not args.split:
            ap.error("read needs --split")
        read(work, args.model, args.split, reads[args.split])
        return
    commit = rows_commit(ROOT)
    rows = []
    for s in SPLITS:
        for r in score(work, args.model, s, reads[s]):
            r.update(date=date.today().isoformat(), commit=commit, model=args.model, machine="shared 2-core CPU")
            log.info("%-10s %-24s %-50s %.3f", s, r["method"], r["metric"], r["value"])
            rows.append(r)
    append_rows(RESULTS / "category_channel.csv", rows)


if __name__ == "__main__":
    main()
