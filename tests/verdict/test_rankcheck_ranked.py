"""A ranker file's "ranked" confidence calibration (issue 59, fit/verdict_confidence.rank_calibration) is checked
like every other field before a run applies it, and the kinds written before it ("fitted", "evidence") give the
confidences they gave."""

import copy
import json
import math

import numpy as np
import pytest

from masprism_batch.method import confidence as cf
from masprism_batch.method import weights_dir
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict.correction import evidence
from masprism_batch.verdict.rankcheck import RankerFileError, parse_checked
from masprism_batch.verdict.rankfile import PACKAGED, SystemRanker


def _ranked(rng) -> dict:
    n = int(rng.integers(2, 30))
    knots = np.sort(rng.normal(0, 1, n) + np.arange(n) * 1e-3)
    return {"kind": "ranked", "features": list(vconf.FEATURES), "mean": rng.normal(0, 1, 3).tolist(),
            "std": rng.uniform(0.5, 2, 3).tolist(), "w": [1 / 3] * 3, "knots": knots.tolist(),
            "u": ((np.arange(n) + 0.5) / n).tolist(), "a": float(rng.uniform(0, 5)), "b": float(rng.normal()),
            "zero_training": None}


def _file(cal) -> bytes:
    return json.dumps({"format": "masprism-batch ranker", "version": 3, "model_id": "m",
                       "systems": {"s": {"verdict": "rule", "calibration": cal}}}).encode()


def test_a_valid_ranked_calibration_is_read(np_rng):
    cal = _ranked(np_rng)
    assert parse_checked(_file(cal), "r.json")["systems"]["s"]["calibration"] == cal


BAD = {  # what is wrong -> (a change to a valid calibration, the words the refusal names)
    "knots not increasing": (lambda c: c["knots"].__setitem__(1, c["knots"][0]), r"calibration\.knots\[1\]: .* must be >"),
    "u not increasing": (lambda c: c["u"].__setitem__(1, c["u"][0] - 0.01), r"calibration\.u\[1\]: .* must be >"),
    "u past 1": (lambda c: c["u"].__setitem__(-1, 1.5), r"calibration\.u: percentiles must lie within \[0, 1\]"),
    "u below 0": (lambda c: c["u"].__setitem__(0, -0.1), r"calibration\.u: percentiles must lie"),
    "u shorter": (lambda c: c["u"].pop(), r"calibration\.u: \d+ values for \d+ features"),
    "one knot": (lambda c: (c.__setitem__("knots", c["knots"][:1]), c.__setitem__("u", c["u"][:1])),
                 r"calibration\.knots: must be a list of 2"),
    "knots missing": (lambda c: c.pop("knots"), r"calibration\.knots: must be a list"),
    "NaN knot": (lambda c: c["knots"].__setitem__(0, math.nan), r"calibration\.knots\[0\]: nan is not a finite"),
    "negative scale": (lambda c: c.__setitem__("a", -1.0), r"calibration\.a: -1\.0 must be >= 0"),
    "no scale": (lambda c: c.pop("a"), r"calibration\.a: null is not a number"),
    "negative weight": (lambda c: c["w"].__setitem__(2, -0.1), r"calibration\.w\[2\]: -0\.1 must be >= 0"),
    "no weight": (lambda c: c.__setitem__("w", [0.0, 0.0, 0.0]), r"calibration\.w: all 0"),
    "unknown feature": (lambda c: c["features"].__setitem__(0, "oracle"), r"calibration\.features: features this"),
    "zero std": (lambda c: c["std"].__setitem__(0, 0.0), r"calibration\.std\[0\]: 0\.0 must be > 0"),
    "zero-training part of the wrong kind": (lambda c: c.__setitem__("zero_training", {"kind": "ranked"}),
                                              r"calibration\.zero_training: must be an object of kind \"evidence\""),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_a_malformed_ranked_calibration_is_refused_naming_the_field(what, np_rng):
    cal = _ranked(np_rng)
    change, words = BAD[what]
    change(cal)
    with pytest.raises(RankerFileError, match=words):
        parse_checked(_file(cal), "r.json")


def _old_kinds(synth) -> list[tuple[str, dict]]:
    """Entries whose calibration is of a kind written before "ranked": the packaged rankers' (while they hold
    one) and a fitted entry given a "fitted" and an "evidence" calibration drawn at random."""
    d = json.loads((weights_dir() / PACKAGED).read_text())
    out = [(n, e) for n, e in d["systems"].items() if (e.get("calibration") or {}).get("kind") in ("fitted", "evidence")]
    rng = np.random.default_rng(3)
    base = json.loads(json.dumps(next(iter(d["systems"].values()))))
    fitted = {"kind": "fitted", "features": list(vconf.FEATURES), "mean": rng.normal(0, 1, 3).tolist(),
              "std": rng.uniform(0.5, 2, 3).tolist(), "w": rng.uniform(0, 2, 3).tolist(), "b": -0.7,
              "zero_training": None}
    ev = {"kind": "evidence", "features": list(cf.FEATURES), "mean": rng.normal(0, 1, 6).tolist(),
          "std": rng.uniform(0.5, 2, 6).tolist(), "w": rng.normal(0, 1, 6).tolist(), "b": 0.3}
    return out + [("drawn fitted", {**base, "calibration": fitted}), ("drawn evidence", {**base, "calibration": ev})]


def test_calibrations_of_the_kinds_before_ranked_give_the_confidences_they_gave(synth):
    """Through a run's SystemRanker, a "fitted" or "evidence" calibration (weights/rankers.json's, written before
    the "ranked" kind) gives exactly the logistic of its calibration over the verdict's features, floored at
    1/steps, as before issue 59's ranked kind."""
    cases = synth(12, seed=5)
    checked = 0
    for name, entry in _old_kinds(synth):
        cal = entry["calibration"]
        sr = SystemRanker(copy.deepcopy(entry), "m")
        for c in cases:
            order, p, _, conf = sr.apply(c.trace, c.rows, c.ranked)
            feats = (vconf.features(c, order, p, None, cal.get("zero_training")) if cal["kind"] == "fitted"
                     else evidence(c, order, p, None))
            x = (np.array([feats[f] for f in cal["features"]]) - cal["mean"]) / np.asarray(cal["std"])
            s = float(x @ np.asarray(cal["w"])) + cal["b"]
            want = max(1 / (1 + math.exp(-max(min(s, 50.0), -50.0))), 1 / len(c.trace.steps))
            assert conf == want, (name, c.trace.trace_id)
            checked += 1
    assert checked >= 24
