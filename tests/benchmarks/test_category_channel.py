"""benchmarks/accuracy/category_channel.py (issue 49): a family's score is how much its lead lowers the step
text's NLL against the neutral lead, so the family whose lead lowers it most is the one read; balanced over the
families the labels hold."""

import numpy as np
import pytest

from benchmarks.accuracy import category_channel as cc
from masprism_batch.category.taxonomy import TRAIL


def _cache(tmp_path, rng, lowered_by):
    """Traces of labelled errors of every family; the reads lower the NLL of `lowered_by(family index)`'s lead."""
    fams = list(TRAIL.families)
    kind_of = {f: next(k.name for k in TRAIL.kinds if k.family == f) for f in fams}
    split = tmp_path / "m" / "GAIA"
    split.mkdir(parents=True)
    reads, truth = {}, []
    for t in range(int(rng.integers(5, 9))):
        fam = rng.integers(0, 3, int(rng.integers(1, 5)))
        fam[0] = t % 3  # every family present
        nll = rng.uniform(2.0, 4.0, (len(fam), 1)) + rng.normal(0, 0.01, (len(fam), 4))
        for j, f in enumerate(fam):
            nll[j, 1 + lowered_by(int(f))] -= 1.0
        np.savez(split / f"t{t}.npz", category=np.array([kind_of[fams[f]] for f in fam]))
        reads[f"t{t}"] = nll
        truth += fam.tolist()
    np.savez(tmp_path / "reads.npz", **reads)
    return tmp_path / "reads.npz", np.array(truth)


def test_the_family_whose_lead_lowers_the_text_most_is_read(tmp_path, np_rng):
    reads, truth = _cache(tmp_path, np_rng, lambda f: f)
    rows = {(r["method"], r["metric"]): r for r in cc.score(tmp_path, "m", "GAIA", reads)}
    assert rows[("zero-training", "family_balanced_accuracy")]["value"] == 1.0
    assert rows[("zero-training", "family_balanced_accuracy")]["n_errors"] == len(truth)
    for f in TRAIL.families:
        assert rows[("zero-training", f"auroc one-vs-rest: {f}")]["value"] == 1.0


def test_a_lead_that_lowers_every_text_reads_as_a_constant(tmp_path, np_rng):
    reads, _ = _cache(tmp_path, np_rng, lambda f: 1)  # one lead helps every step, whatever its family
    rows = {(r["method"], r["metric"]): r for r in cc.score(tmp_path, "m", "GAIA", reads)}
    assert rows[("zero-training", "family_balanced_accuracy")]["value"] == pytest.approx(1 / 3, abs=1e-4)  # rows carry 4 decimals
