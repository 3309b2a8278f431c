"""Every issue-25 shape with one field replaced by a hostile value (null, a number, a list, a map, a lone
surrogate, broken JSON text) is read or rejected with a reason, never an `internal_error` (seeded mutations)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from masprism_batch.ingest import read_inputs

FIX = Path(__file__).resolve().parents[1] / "data" / "formats" / "_shapes"
FILES = sorted(p for p in FIX.rglob("*") if p.is_file())
VALUES = [None, 0, -1, 1.5, True, "", "x", [], {}, [None], {"a": None}, "\ud800", 10**30, "{not json", "[1,2"]
PER_FILE = 30


def _paths(o, p=()):
    yield p
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, (*p, k))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _paths(v, (*p, i))


def _documents(text):
    """One JSON document, or several back to back (the OTel console exporter's file)."""
    dec, i, out = json.JSONDecoder(), 0, []
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        doc, i = dec.raw_decode(text, i)
        out.append(doc)
    return out


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_hostile_field_values_never_cause_an_internal_error(tmp_path, path):
    rng = random.Random(path.name)
    lines = path.suffix == ".jsonl"
    text = path.read_text()
    docs = [json.loads(t) for t in text.splitlines() if t.strip()] if lines else _documents(text)
    for _ in range(PER_FILE):
        k = rng.randrange(len(docs))
        doc = json.loads(json.dumps(docs[k]))
        where = rng.choice(list(_paths(doc))[1:])
        cur = doc
        for key in where[:-1]:
            cur = cur[key]
        cur[where[-1]] = rng.choice(VALUES)
        out = tmp_path / f"x{path.suffix}"
        body = [json.dumps(d) for d in docs]
        body[k] = json.dumps(doc)
        out.write_text("\n".join(body) + "\n")  # one document, lines, or documents back to back as written
        errors: list[dict] = []
        list(read_inputs([str(out)], "auto", errors.append))
        assert not [e for e in errors if e["reason"] == "internal_error"], (where, errors)
