"""fit/categories.py (issue 49, item 2): a system's kinds fitted to its labels' categories, kept only where they beat
zero-training on held-out logs, never below MIN_ERRORS; labels naming no kind are reported; a run applies a
system's fitted kinds (category/annotate.py) only where they were kept and fit the run's taxonomy."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from masprism_batch.category import annotate, classify
from masprism_batch.category.log_signals import NAMES
from masprism_batch.category.taxonomy import TRAIL, Kind, Taxonomy
from masprism_batch.fit import categories as fc

ERR = NAMES.index("error_here")


def _data(rng, n_logs, per_log, planted: bool, pmi: bool = False):
    """Labelled errors of n_logs logs; planted: the kind is Formatting Errors where the step recorded an error,
    Goal Deviation elsewhere (what the log's evidence can learn); pmi: model evidence that names the kind."""
    fmt, goal = TRAIL.index("Formatting Errors"), TRAIL.index("Goal Deviation")
    logs, steps, y, P, F = [], [], [], [], []
    for g in range(n_logs):
        for s in range(per_log):
            f = rng.normal(0, 0.3, len(NAMES))
            err = rng.random() < 0.5
            f[ERR] = 1.0 if err else 0.0
            k = (fmt if err else goal) if planted else int(rng.integers(len(TRAIL.kinds)))
            row = np.full(len(TRAIL.kinds), np.nan)
            if pmi:
                row = rng.normal(0, 0.05, len(TRAIL.kinds))
                row[k] -= 3.0
            logs.append(f"log{g}")
            steps.append(s)
            y.append(k)
            P.append(row)
            F.append(f)
    return fc.KindData(np.array(logs), np.array(steps), np.array(y), np.array(P), np.array(F))


def test_planted_kinds_are_learned_and_kept(np_rng):
    d = _data(np_rng, int(np_rng.integers(11, 17)), int(np_rng.integers(3, 6)), planted=True)
    got = fc.fit_kinds(d, TRAIL, "billing-bot", seed=int(np_rng.integers(1 << 16)))
    # zero-training reads no model evidence here (nothing was read) and ignores the log: no kind, no hit
    assert got["zero_training"] == 0.0 and got["model_read"] == 0
    # learned well past chance (two planted kinds: 0.5); on 33-80 held-out errors a fold's noise features cost a
    # few: over 151 seeds the lowest were 0.909 and 0.875 (family balanced), so 0.9 failed ~1 run in 75
    assert got["fitted"] > 0.8 and got["fitted_family_balanced"] > 0.8
    assert got["kept"] == "fitted" and got["errors"] == len(d.y) and got["taxonomy_digest"] == TRAIL.digest()
    m = classify.CategoryModel.from_json(got["weights"], TRAIL)
    assert m.fitted_on == "fit:billing-bot" and m.reads_log()


def test_kinds_that_beat_nothing_keep_zero_training(np_rng):
    # the model's evidence already names every kind; the log's says nothing: the fit cannot beat zero-training
    d = _data(np_rng, int(np_rng.integers(9, 14)), 4, planted=False, pmi=True)
    got = fc.fit_kinds(d, TRAIL, "s")
    assert got["zero_training"] == 1.0 and got["kept"] == "zero-training" and "weights" not in got


def test_too_few_labelled_errors_keep_zero_training(np_rng):
    d = _data(np_rng, 3, int(np_rng.integers(2, 6)), planted=True)
    assert len(d.y) < fc.MIN_ERRORS
    got = fc.fit_kinds(d, TRAIL, "s")
    assert got["kept"] == "zero-training" and "fitted" not in got and "fewer than" in got["note"]


def _case(rng, key, kinds: dict[int, list[str]], read: set[int]):
    steps = [SimpleNamespace(content=f"step {i} " + ("Error: failed" if i % 2 else "ok"), kind="llm",
                             agent="a", span_id=None) for i in range(int(rng.integers(6, 9)))]
    rows = [{"step": i, "category_pmi": rng.normal(size=len(TRAIL.kinds)).tolist() if i in read else None}
            for i in range(len(steps))]
    return SimpleNamespace(key=key, trace=SimpleNamespace(steps=steps), rows=rows, gold_kinds=kinds)


def test_kind_data_reads_the_runs_evidence_and_reports_unknown_categories(np_rng):
    cases = [_case(np_rng, "t0", {1: ["formatting errors", "Goal Deviation"], 2: ["Vibes"]}, {1}),
             _case(np_rng, "t1", {3: ["Task Orchestration Error"], 4: ["vibes"]}, set())]
    problems: list[str] = []
    d = fc.kind_data(cases, TRAIL, problems)
    # case-insensitive names and TRAIL's aliases resolve; "Vibes" and "vibes" are two spellings, each reported
    assert d.y.tolist() == [TRAIL.index("Formatting Errors"), TRAIL.index("Goal Deviation"),
                            TRAIL.index("Task Orchestration")]
    assert d.logs.tolist() == ["t0", "t0", "t1"] and d.steps.tolist() == [1, 1, 3]
    assert np.allclose(d.pmi[0], cases[0].rows[1]["category_pmi"]) and np.isnan(d.pmi[2]).all()
    assert d.f[0][ERR] == 1.0 and d.f[2][ERR] == 1.0
    assert len(problems) == 2 and all(": no kind of taxonomy 'trail'" in p for p in problems)
    assert fc.kind_data([_case(np_rng, "t2", {}, set())], TRAIL, []) is None


def _policy(entry):
    return SimpleNamespace(ranker=lambda t: SimpleNamespace(entry=entry, system="s"))


def test_a_run_applies_only_kept_weights_of_its_taxonomy(np_rng):
    d = _data(np_rng, 12, 4, planted=True)
    got = fc.fit_kinds(d, TRAIL, "s")
    default = classify.CategoryModel.zero(TRAIL)
    t = SimpleNamespace(trace_id="x")
    m = annotate.system_weights(_policy({"category": got}), t, TRAIL, default)
    assert m is not default and m.fitted_on == "fit:s" and np.allclose(m.W, got["weights"]["W"])
    assert annotate.system_weights(_policy({"category": {**got, "kept": "zero-training"}}), t, TRAIL, default) is default
    assert annotate.system_weights(_policy({}), t, TRAIL, default) is default
    assert annotate.system_weights(None, t, TRAIL, default) is default
    other = Taxonomy("mine", (Kind("Boom", "X", "it blew up"), Kind("Drift", "Y", "it drifted")))
    assert annotate.system_weights(_policy({"category": got}), t, other, default) is default  # another taxonomy's


@pytest.mark.parametrize("labelled,pred,want", [([{0}, {8}, {16}], [1, 9, 17], 1.0),  # right family, wrong leaf
                                                ([{0}, {8}, {16}], [0, 0, 0], 1 / 3),
                                                ([{0}, {0}], [-1, 0], 0.5)])  # -1: no kind, a miss
def test_family_balanced_accuracy(labelled, pred, want):
    assert fc.family_balanced(TRAIL, labelled, pred) == pytest.approx(want)
