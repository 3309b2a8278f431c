"""Issue 61 finding 11: `fit`'s one-line summary of the label rows it skipped was quadratic in the rows (a list
scan per row: 1,000,000 unknown rows had not finished after 300 s). Now a dict: linear."""

from __future__ import annotations

import time

from masprism_batch.cli.fit_messages import skipped_summary


def test_skipped_summary_is_linear_in_the_rows():
    n = 200_000  # the list scan: 2e10 string comparisons, minutes; the dict: well under a second
    problems = [f"labels.csv:{i + 2}: unknown trace 'u{i}' (in none of the runs given): row skipped" for i in range(n)]
    t = time.process_time()
    line = skipped_summary(problems)
    assert time.process_time() - t < 10, "the summary of skipped rows is not linear"
    assert line.startswith(f"{n} label row(s) skipped: {n} trace in none of the runs; first: u0, u1, u2, "), line
    assert f"({n - 3} more)" in line


def test_skipped_summary_names_each_trace_once_in_first_seen_order():
    problems = [f"l.csv:{i}: step 9 out of range (trace '{t}' has 2 steps, 0-based): row skipped"
                for i, t in enumerate(["b", "a", "b", "c", "a", "d"])]
    line = skipped_summary(problems)
    assert "first: b, a, c, … (1 more)" in line and line.startswith("6 label row(s) skipped: 6 step out of range")


def test_confidence_words_name_the_kept_confidence_and_why(np_rng):
    """Issue 59: `fit` says which confidence it kept and that it is the one that ranked the held-out verdicts
    better; never the old words that kept the fitted one whatever the folds said."""
    from masprism_batch.cli.fit_messages import confidence_words

    zt = float(np_rng.uniform(0.6, 0.9))
    fa = float(np_rng.uniform(0.3, zt - 0.01))
    cal = {"w": [0.7], "b": -0.4}
    words = confidence_words({"calibration": cal, "heldout": {
        "auroc": zt, "fitted_auroc": fa, "zero_training_auroc": zt, "confidence_kept": "zero-training"}})
    assert f"AUROC {zt:.2f}" in words and "kept: the zero-training confidence's order" in words, words
    assert f"the fitted confidence on the same verdicts: AUROC {fa:.2f}" in words, words  # the one not kept
    assert "ranked these verdicts better than the fitted one" in words and "whatever" not in words
    kept = confidence_words({"calibration": {"w": [0.2] * 3, "b": 0.1}, "heldout": {
        "auroc": zt, "fitted_auroc": zt, "zero_training_auroc": fa, "confidence_kept": "fitted"}})
    assert "kept: fitted" in kept and "at least as well" in kept and "whatever" not in kept
