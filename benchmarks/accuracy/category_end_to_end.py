"""The verdict's kind end to end (issue 49): of the TRAIL dev logs' held-out verdicts, how many blame a labelled error
step and how many of those also get one of its labelled kinds (family) from a category layer; bench_category.py
writes the rows (benchmarks/results/category_e2e.csv) with --signal-cache."""

from __future__ import annotations

import numpy as np

from benchmarks.accuracy.category_fit import calibrate, family_idx, predict
from benchmarks.accuracy.category_report import SPLITS
from masprism_batch.category import classify
from masprism_batch.category.taxonomy import TRAIL


def verdict_kinds(verdicts: dict[str, dict], d: dict, m: classify.CategoryModel) -> dict:
    """Of the logs of split `d` with a verdict: how many, how many blame a labelled error step (step right), and
    of those how many get one of that step's labelled kinds (and family) from category layer `m`. The kind of a
    blamed step is read from its labelled error's evidence (category_extract.py reads every labelled step), so a
    verdict that is right gets exactly the evidence the stage would read there."""
    pred = predict(m, d)
    fam, pfam = family_idx(d["y"]), family_idx(pred)
    at: dict[tuple, dict] = {}
    for i, (t, k) in enumerate(zip(d["trace"], d["step"], strict=True)):
        g = at.setdefault((str(t), int(k)), {"kinds": set(), "fams": set(), "pred": int(pred[i]), "pfam": int(pfam[i])})
        g["kinds"].add(int(d["y"][i]))
        g["fams"].add(int(fam[i]))
    traces = set(map(str, d["trace"]))
    n = step = kind = family = 0
    for tid, v in verdicts.items():
        if tid not in traces:
            continue
        n += 1
        g = at.get((tid, int(v["pred_step"])))
        if g is not None:
            step += 1
            kind += g["pred"] in g["kinds"]
            family += g["pfam"] in g["fams"]
        # a blamed step that is not a labelled error: wrong step, so neither kind nor family is credited
    return {"logs": n, "step_right": step / max(n, 1), "step_and_kind_right": kind / max(n, 1),
            "step_and_family_right": family / max(n, 1)}


def end_to_end(cases: list, data: dict, rule_agent: str = "most_active") -> list[dict]:
    """Step and kind right together, per TRAIL split: the held-out verdicts of the signal cache (zero-training
    `faithful`, and the product's fit 5-fold within the split x FOLD_SEEDS, a log's share averaged over seeds),
    each with the zero-training kinds and the kinds calibrated on the other split."""
    from benchmarks.accuracy.accuracy_cases import (
        FOLD_SEEDS,
        faithful_rows,
        fit_cases,
        fitted_rows,
        kfold_rows,
    )

    def rows_of(system, train, test) -> dict:
        return fitted_rows(train, test, system, "faithful", rule_agent) if test and fit_cases(train) else {}

    trail = [c for c in cases if c.system.startswith("trail/")]
    protocols = {"zero-training (faithful)": [faithful_rows(trail)],
                 f"fitted, 5-fold within the split x{len(FOLD_SEEDS)} seeds": [kfold_rows(trail, rows_of, 5, seed)
                                                                               for seed in FOLD_SEEDS]}
    out = []
    for split in SPLITS:
        other = [s for s in SPLITS if s != split][0]
        layers = {"zero-training": classify.CategoryModel.zero(TRAIL),
                  f"calibrated on {other}": calibrate(data[other], f"trail/{other}")}
        for proto, seeds in protocols.items():
            for lname, m in layers.items():
                got = [verdict_kinds(rows, data[split], m) for rows in seeds]
                row = {k: float(np.mean([g[k] for g in got])) for k in got[0]}
                out.append({"scored_on": split, "verdicts": proto, "kinds": lname, "logs": int(row["logs"]),
                            **{k: round(v, 4) for k, v in row.items() if k != "logs"}})
    return out
