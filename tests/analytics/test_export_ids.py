"""Issue 35, item 1: every export target carries the trace and span ids in the form backends expect (32 / 16
lower-case hex digits, OpenTelemetry's `format_trace_id` / `format_span_id`), from whatever form the source
carried (decimal text of the SDK's integers, hex of any case or without its leading zeros, base64, UUIDs), and
keeps the source's text beside it."""

import base64
import hashlib
import json
import uuid

import pandas as pd
import pytest
from analytics_synth import random_specs, write_outdir

from masprism_batch.analytics import ids
from masprism_batch.analytics.export import export, read_jsonl

FORMS = ["decimal", "hex-upper", "hex-0x", "hex-short", "base64", "uuid"]


def _text(form: str, value: int, nbytes: int) -> str:
    if form == "decimal":
        return str(value)
    if form == "hex-upper":
        return f"{value:0{2 * nbytes}X}"
    if form == "hex-0x":
        return f"0x{value:0{2 * nbytes}x}"
    if form == "hex-short":
        return f"{value:x}"
    if form == "base64":
        return base64.b64encode(value.to_bytes(nbytes, "big")).decode()
    return str(uuid.UUID(int=value)) if nbytes == 16 else f"{value:0{2 * nbytes}x}"  # a UUID is a trace id only


def _value(rng, bits: int, form: str) -> int:
    v = rng.getrandbits(bits) | 1
    if form == "hex-short":
        v >>= 4 * rng.randint(1, 6)  # leading zero digits a Jaeger-style writer drops
    if form == "decimal":
        v |= 1 << (bits - 1)  # a decimal text longer than the hex width (the SDK dumps' usual case)
    return v or 1


@pytest.fixture
def id_run(tmp_path, rng):
    """Span-tree traces whose ids come in every form, and chat traces whose ids are no OTel id."""
    specs = random_specs(rng, rng.randint(len(FORMS) * 2, 30), spans=True)
    truth = {}
    for i, sp in enumerate(specs):
        form = FORMS[i % len(FORMS)]
        tv = _value(rng, 128, form)
        sp["trace_id"] = _text(form, tv, 16)
        spans = {}
        for s in sp["steps"]:
            sv = _value(rng, 64, form)
            s["span_id"] = _text(form, sv, 8)
            spans[s["span_id"]] = sv
        sp["confidence"] = rng.random()
        truth[sp["trace_id"]] = (tv, spans)
    chats = random_specs(rng, rng.randint(1, 4))
    for i, sp in enumerate(chats):
        sp["trace_id"] = f"chat-{i}-{rng.getrandbits(20)}"
    return write_outdir(tmp_path / "out", specs + chats), specs, chats, truth


def test_normalise_each_form(rng):
    for _ in range(200):
        form = rng.choice(FORMS)
        tv, sv = _value(rng, 128, form), _value(rng, 64, form)
        t = ids.otel_trace_id(_text(form, tv, 16))
        s = ids.otel_span_id(_text(form, sv, 8), ids.decimal_ids(_text(form, tv, 16)))
        assert t == f"{tv:032x}" and s == f"{sv:016x}", form
    for bad in ("chat-3", "", None, "0" * 32, "x" * 40, str(1 << 128)):
        assert ids.otel_trace_id(bad) is None, bad


def _otel(path):
    return [r for line in path.read_text().splitlines() for rl in json.loads(line)["resourceLogs"]
            for sl in rl["scopeLogs"] for r in sl["logRecords"]]


def test_otel_ids_round_trip(id_run, tmp_path):
    outdir, specs, chats, truth = id_run
    export(outdir, "otel", tmp_path / "e.jsonl", top_k=3)
    seen = set()
    for r in _otel(tmp_path / "e.jsonl"):
        attrs = {a["key"]: next(iter(a["value"].values())) for a in r["attributes"]}
        src = attrs["masprism.trace_id"]  # the source's text, kept
        if src not in truth:  # a chat log: the derived trace id (every record has one), no span
            assert r["traceId"] == hashlib.sha256(src.encode()).hexdigest()[:32] and "spanId" not in r
            continue
        tv, spans = truth[src]
        assert r["traceId"] == f"{tv:032x}" and int(r["traceId"], 16) == tv
        assert r["spanId"] == f"{spans[attrs['masprism.span_id']]:016x}"
        seen.add(src)
    assert seen == {sp["trace_id"] for sp in specs if sp["ranked"]}


def test_phoenix_ids_round_trip(id_run, tmp_path):
    outdir, specs, chats, truth = id_run
    export(outdir, "phoenix", tmp_path / "a.parquet", top_k=3)
    df = pd.concat([pd.read_parquet(p) for p in sorted(tmp_path.glob("a.*.parquet"))], ignore_index=True)
    for row in df.itertuples():
        m = row.metadata
        if m["trace_id"] in truth:
            tv, spans = truth[m["trace_id"]]
            assert row.trace_id == f"{tv:032x}" and row.span_id == f"{spans[m['span_id']]:016x}"
        else:  # chat logs: no OTel id of their own, the trace annotation carries the id derived from theirs
            assert row.trace_id == hashlib.sha256(m["trace_id"].encode()).hexdigest()[:32] and pd.isna(row.span_id)
    assert {m["trace_id"] for m in df["metadata"]} == {sp["trace_id"] for sp in specs + chats if sp["ranked"]}


def test_jsonl_ids_round_trip(id_run, tmp_path):
    outdir, specs, chats, truth = id_run
    export(outdir, "jsonl", tmp_path / "a.jsonl")
    back = read_jsonl(tmp_path / "a.jsonl")
    assert set(back) == {sp["trace_id"] for sp in specs + chats}  # custom_id: the source's id, unchanged
    for tid, rec in back.items():
        if tid not in truth:
            assert rec["otel_trace_id"] == hashlib.sha256(tid.encode()).hexdigest()[:32] and rec["otel_span_id"] is None
            continue
        tv, spans = truth[tid]
        assert rec["otel_trace_id"] == f"{tv:032x}"
        want = f"{spans[rec['pred_span_id']]:016x}" if rec["pred_span_id"] else None
        assert rec["otel_span_id"] == want
