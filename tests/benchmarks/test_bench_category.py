"""benchmarks/accuracy/bench_category.py (issue 49): family balanced accuracy is the mean recall over the families
the scored labels hold (any constant scores 1/families); the end-to-end share credits a verdict's kind only where
its blamed step is a labelled error step and the kind is one labelled there."""

import numpy as np
import pytest

from benchmarks.accuracy import bench_category as bc
from benchmarks.accuracy import category_end_to_end as ce
from benchmarks.accuracy import category_report as cr
from masprism_batch.category import classify
from masprism_batch.category.taxonomy import TRAIL
from masprism_batch.fit import categories as fc


def test_a_constant_scores_one_over_the_families_and_truth_scores_one(np_rng):
    n = int(np_rng.choice([47, 123]))
    y = np_rng.integers(0, len(TRAIL.kinds), n)
    y[:3] = [0, 8, 16]  # every family present
    fams = len(set(TRAIL.kinds[i].family for i in y))
    const = bc.metrics(y, np.full(n, int(np_rng.integers(len(TRAIL.kinds)))))
    assert const["family_balanced_accuracy"] == pytest.approx(1 / fams)
    right = bc.metrics(y, y.copy())
    assert right["family_balanced_accuracy"] == 1.0 and right["leaf_macro_f1"] == 1.0 and right["leaf_accuracy"] == 1.0


def _split(rng, n_traces):
    """Labelled errors: each trace 1-4 error steps, a step 1-2 kinds; model evidence that favours the first kind."""
    cols = {"trace": [], "step": [], "y": [], "pmi": [], "log": []}
    for t in range(n_traces):
        for k in sorted(rng.choice(20, int(rng.integers(1, 5)), replace=False)):
            pmi = rng.normal(0, 0.1, len(TRAIL.kinds))
            kinds = rng.choice(len(TRAIL.kinds), int(rng.integers(1, 3)), replace=False)
            pmi[kinds[0]] -= 5.0  # a lower NLL after the step: the zero-training layer picks kinds[0]
            for y in kinds:
                cols["trace"].append(f"t{t}")
                cols["step"].append(int(k))
                cols["y"].append(int(y))
                cols["pmi"].append(pmi)
                cols["log"].append(rng.normal(size=21))
    return {k: np.array(v) for k, v in cols.items()}


def test_verdict_kinds_credits_only_a_right_step_with_a_labelled_kind(np_rng):
    d = _split(np_rng, int(np_rng.integers(7, 13)))
    m = classify.CategoryModel.zero(TRAIL)
    traces = sorted(set(d["trace"]))
    steps = {t: sorted(set(d["step"][d["trace"] == t].tolist())) for t in traces}
    verdicts = {}
    for i, t in enumerate(traces):  # every other verdict blames a step that is no labelled error
        verdicts[t] = {"pred_step": steps[t][0] if i % 2 == 0 else 99}
    verdicts["not-in-split"] = {"pred_step": 0}
    got = ce.verdict_kinds(verdicts, d, m)
    n_right = sum(1 for i in range(len(traces)) if i % 2 == 0)
    assert got["logs"] == len(traces)
    assert got["step_right"] == pytest.approx(n_right / len(traces))
    # the zero-training layer reads the planted evidence, so every right step's kind is right (family too)
    assert got["step_and_kind_right"] == pytest.approx(n_right / len(traces))
    assert got["step_and_family_right"] == pytest.approx(n_right / len(traces))
    # evidence that points nowhere near the labels: kinds wrong, the step share unchanged
    wrong = dict(d)
    wrong["pmi"] = d["pmi"].copy()
    for i in range(len(d["y"])):
        labelled = set(d["y"][(d["trace"] == d["trace"][i]) & (d["step"] == d["step"][i])].tolist())
        other = next(k for k in range(len(TRAIL.kinds)) if k not in labelled)
        wrong["pmi"][i] = 0.0
        wrong["pmi"][i][other] = -5.0
    bad = ce.verdict_kinds(verdicts, wrong, m)
    assert bad["step_right"] == got["step_right"] and bad["step_and_kind_right"] == 0.0


def test_reading_names_the_best_held_out_method_and_the_target(np_rng):
    rows = []
    vals = {}
    for s in bc.SPLITS:
        for m in ("zero-training", "cross-split", "log-only", "fitted-20", "zero-training@draws"):
            for k in ("family_balanced_accuracy", "leaf_macro_f1"):
                v = float(np_rng.uniform(0.1, 0.54))
                vals[(s, m, k)] = v
                rows.append({"scope": "all", "scored_on": s, "method": m, "metric": k, "value": v})
    vals[("GAIA", "cross-split", "family_balanced_accuracy")] = 0.61
    rows[[i for i, r in enumerate(rows) if (r["scored_on"], r["method"], r["metric"]) ==
          ("GAIA", "cross-split", "family_balanced_accuracy")][0]]["value"] = 0.61
    text = "\n".join(cr.reading(rows))
    assert "trail/GAIA: the best held-out family balanced accuracy is cross-split's 0.610 (meets" in text
    swe = {m: vals[("SWE_Bench", m, "family_balanced_accuracy")] for m in ("zero-training", "cross-split", "log-only")}
    best = max(swe, key=swe.get)
    assert f"trail/SWE_Bench: the best held-out family balanced accuracy is {best}'s {swe[best]:.3f} (below" in text
    assert f"family {vals[('SWE_Bench', 'fitted-20', 'family_balanced_accuracy')]:.3f} vs zero-training's" in text


def _planted(rng, n_traces, by_trace: bool):
    """Errors of kinds 0 (Reasoning) and 8 (System Execution): their log evidence a fingerprint of the kind
    (by_trace False) or of the trace alone, its kind a coin flip per trace (by_trace True: nothing carries over to
    another trace); the model's evidence noise."""
    kinds = (0, 8)
    assert TRAIL.kinds[kinds[0]].family != TRAIL.kinds[kinds[1]].family
    proto = {k: rng.normal(0, 3, 21) for k in kinds}
    cols = {"trace": [], "step": [], "y": [], "pmi": [], "log": [], "vec": []}
    for t in range(n_traces):
        finger, coin = rng.normal(0, 3, 21), kinds[int(rng.integers(2))]
        for k in range(int(rng.integers(2, 6))):
            y = coin if by_trace else kinds[int(rng.integers(2))]
            cols["trace"].append(f"t{t}")
            cols["step"].append(k)
            cols["y"].append(y)
            cols["pmi"].append(rng.normal(0, 0.1, len(TRAIL.kinds)))
            cols["log"].append((finger if by_trace else proto[y]) + rng.normal(0, 0.1, 21))
            cols["vec"].append(rng.normal(size=7))
    out = {k: np.array(v) for k, v in cols.items() if k != "vec"}
    out["vec"] = cols["vec"]
    return out


def test_the_ceiling_learns_what_the_evidence_carries_and_folds_by_trace(np_rng):
    got = bc.ceiling(_planted(np_rng, int(np_rng.integers(23, 31)), by_trace=False), with_state=False)
    assert got["family_balanced_accuracy"] > 0.9
    assert bc.ceiling(_planted(np_rng, 25, by_trace=False), with_state=True)["family_balanced_accuracy"] > 0.9
    # a kind that only the trace's own fingerprint tells: learnable only by scoring a trace it was fitted on
    leak = bc.ceiling(_planted(np_rng, int(np_rng.integers(23, 31)), by_trace=True), with_state=False)
    assert leak["family_balanced_accuracy"] < 0.85


def test_what_fit_ships_from_a_draw_keeps_zero_training_unless_the_fit_wins(np_rng):
    d = _planted(np_rng, int(np_rng.integers(23, 31)), by_trace=False)
    kd = fc.KindData(d["trace"], d["step"], d["y"], d["pmi"], d["log"])
    pick = np_rng.choice(len(d["y"]), 20, replace=False)
    assert bc.shipped_layer(kd, pick).reads_log()  # the log tells the kind: the fitted layer is kept
    # the model's evidence already names every kind right: zero-training cannot be beaten, so it is what ships
    pmi = np.full((len(d["y"]), len(TRAIL.kinds)), 0.0)
    pmi[np.arange(len(d["y"])), d["y"]] = -5.0
    right = fc.KindData(d["trace"], d["step"], d["y"], pmi, d["log"])
    m = bc.shipped_layer(right, pick)
    assert not m.reads_log() and m.a == 1.0 and not np.any(m.b)
