"""A ranker file's fitted failure kinds (fit/categories.py, entry `category`) are checked like every other field:
a run never applies weights of the wrong shape or a non-finite value; kept zero-training needs no weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from masprism_batch.category import classify
from masprism_batch.category.taxonomy import TRAIL
from masprism_batch.verdict.rankcheck import parse_checked
from masprism_batch.verdict.rankfile import RankerFile, RankerFileError


def _file(cat) -> bytes:
    entry = {"system": "s", "verdict": "rule", "rule": "faithful", "agent_rule": "author", "category": cat}
    return RankerFile("m", {"s": entry}, {}).to_json().encode()


def _weights(rng) -> dict:
    m = classify.CategoryModel.zero(TRAIL)
    m.b, m.W = rng.normal(size=m.b.shape), rng.normal(size=m.W.shape)
    return m.to_json()


def test_good_kinds_pass_and_bad_ones_name_their_field(np_rng):
    w = _weights(np_rng)
    assert parse_checked(_file({"kept": "fitted", "weights": w}), "r.json")["systems"]["s"]["category"]["weights"] == w
    assert parse_checked(_file({"kept": "zero-training", "errors": 3}), "r.json")
    row = int(np_rng.integers(len(w["W"])))
    bad = {"category: must be an object": {"kept": "maybe"},
           "category.weights: must be": {"kept": "fitted"},
           "category.weights: must be category weights of format": {"kept": "fitted", "weights": {**w, "format": "o/1"}},
           "category.weights.W: must hold one row per kind": {"kept": "fitted", "weights": {**w, "W": w["W"][:-1]}},
           f"category.weights.W[{row}]: ": {"kept": "fitted", "weights": {
               **w, "W": [r if i != row else r[:-1] for i, r in enumerate(w["W"])]}},
           "category.weights.a: ": {"kept": "fitted", "weights": {**w, "a": "x"}}}
    for where, cat in bad.items():
        with pytest.raises(RankerFileError) as e:
            parse_checked(_file(cat), "r.json")
        assert where in str(e.value), (where, str(e.value))
    nan = json.loads(_file({"kept": "fitted", "weights": w}))
    nan["systems"]["s"]["category"]["weights"]["b"][0] = float("nan")
    with pytest.raises(RankerFileError):
        parse_checked(json.dumps(nan).encode(), "r.json")
    assert np.isfinite(w["a"])
