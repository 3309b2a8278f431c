"""Issue 46 findings 1, 2 and 14: one bad record, member, sample or line costs only itself, in every grouped and
container shape. Each format's good records are written with one bad record among them whose every field in turn
(exhaustively, not sampled) is replaced by a value of another type (a list or number where text or an object is
expected, an object where a list is, ...); every good trace must be kept and every error row must say where.
Before: `"spans": 5` in one OTLP line, `"run_type": ["llm"]` in one LangSmith run, a Jaeger `processID` list or a
`logRecords` number ended the whole file (0 of N good traces, exit 1); one damaged zip member or `.eval` sample
lost the archive."""

from __future__ import annotations

import copy
import io
import json
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ingest_synth import SEED, rng, text

from masprism_batch.ingest import read_inputs

BAD_VALUES = (5, ["x"], {"k": 1}, "s", None, 2.5)


def _paths(v: Any, at: tuple = ()) -> Iterator[tuple]:
    """Every place in a JSON value (dict keys and list items), parents before children."""
    if at:
        yield at
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, at + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, at + (i,))


def _set(v: Any, path: tuple, new: Any) -> Any:
    out = copy.deepcopy(v)
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = new
    return out


def mutants(record: Any) -> Iterator[Any]:
    """The record with one field replaced by a value of another type, for every field and every such value."""
    for path in _paths(record):
        cur = record
        for p in path:
            cur = cur[p]
        for bad in BAD_VALUES:
            if type(bad) is not type(cur):
                yield _set(record, path, bad)


def _kv(key: str, value: str) -> dict:
    return {"key": key, "value": {"stringValue": value}}


def otlp(r, tid: str) -> dict:
    span = {"traceId": tid, "spanId": f"s{tid}", "name": "chat", "startTimeUnixNano": "1700000000000000000",
            "attributes": [_kv("gen_ai.operation.name", "chat"), _kv("gen_ai.completion.0.content", text(r, 3, 30))]}
    return {"resourceSpans": [{"resource": {"attributes": [_kv("service.name", "svc")]},
                               "scopeSpans": [{"scope": {"name": "x"}, "spans": [span]}]}]}


def otlp_logs(r, tid: str) -> dict:
    """A request with a span and its GenAI events exported as OTLP logs (joined to the span when read)."""
    rec = {"traceId": tid, "spanId": f"s{tid}", "eventName": "gen_ai.choice", "timeUnixNano": "1700000000000000000",
           "attributes": [_kv("gen_ai.system", "openai")],
           "body": {"kvlistValue": {"values": [{"key": "message", "value": {"kvlistValue": {"values": [
               {"key": "content", "value": {"stringValue": text(r, 3, 30)}}]}}}]}}}
    span = {"traceId": tid, "spanId": f"s{tid}", "name": "chat", "attributes": [_kv("gen_ai.operation.name", "chat")]}
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}],
            "resourceLogs": [{"resource": {"attributes": [_kv("service.name", "svc")]},
                              "scopeLogs": [{"logRecords": [rec]}]}]}


def langsmith(r, tid: str) -> dict:
    return {"id": f"root-{tid}", "trace_id": tid, "run_type": "chain", "name": "agent", "inputs": {"q": "hi"},
            "start_time": "2025-01-01T00:00:00", "child_runs": [
                {"id": f"llm-{tid}", "run_type": "llm", "name": "model", "start_time": "2025-01-01T00:00:01",
                 "outputs": {"generations": [[{"text": text(r, 3, 30)}]]}}]}


def otel_sdk(r, tid: str) -> dict:
    return {"name": "chat", "context": {"trace_id": tid, "span_id": f"s{tid}"}, "parent_id": None,
            "start_time": "2025-01-01T00:00:00Z",
            "attributes": {"gen_ai.operation.name": "chat", "gen_ai.completion.0.content": text(r, 3, 30)},
            "resource": {"attributes": {"service.name": "svc"}}}


def langfuse(r, tid: str) -> dict:
    return {"id": tid, "name": "app", "observations": [
        {"id": f"o{tid}", "traceId": tid, "type": "GENERATION", "name": "llm", "startTime": "2025-01-01T00:00:00Z",
         "output": text(r, 3, 30)}]}


def canonical(r, tid: str) -> dict:
    return {"trace_id": tid, "source": "app", "steps": [{"agent": "a", "content": text(r, 3, 30)}]}


def jaeger_trace(r, tid: str) -> dict:
    return {"traceID": tid, "processes": {"p1": {"serviceName": "svc"}}, "spans": [
        {"traceID": tid, "spanID": f"s{tid}", "operationName": "chat", "startTime": 1700000000000000,
         "processID": "p1", "references": [], "tags": [
             {"key": "gen_ai.operation.name", "type": "string", "value": "chat"},
             {"key": "gen_ai.completion.0.content", "type": "string", "value": text(r, 3, 30)}]}]}


def openai(r, tid: str) -> dict:
    return {"id": tid, "messages": [{"role": "user", "content": text(r, 3, 30)},
                                    {"role": "assistant", "content": text(r, 3, 30)}]}


LINE_FORMATS: dict[str, Callable] = {"otel": otlp, "otel-logs": otlp_logs, "langsmith": langsmith,
                                     "otel-sdk": otel_sdk, "langfuse": langfuse, "jsonl": canonical,
                                     "openai": openai}
N_GOOD = 6


def _read(path) -> tuple[list[str], list[dict]]:
    errors: list[dict] = []
    got = [t.trace_id for t in read_inputs([str(path)], "auto", errors.append)]
    return got, errors


def _check(got: list[str], errors: list[dict], good: list[str], what: str) -> None:
    assert set(good) <= set(got), f"{what}: kept {len(set(good) & set(got))} of {len(good)} good traces; " \
                                  f"errors {[(e['reason'], e['message'][:120]) for e in errors]} (seed {SEED})"
    assert len(set(got) - set(good)) <= 1, (what, got)  # the bad record's own trace, if it still reads (its id may be the mutated value)
    for e in errors:  # the row says which record: its id, line, member or sample
        assert e["record_id"] or "line " in (e["message"] or ""), (what, e)
        assert e["reason"] != "internal_error", (what, e)


@pytest.mark.parametrize("fmt", sorted(LINE_FORMATS))
def test_one_mistyped_record_costs_only_itself_in_json_lines(tmp_path, fmt):
    r = rng(f"fuzz-{fmt}")
    make = LINE_FORMATS[fmt]
    good_ids = [f"g{i}x{r.randrange(16**4):04x}" for i in range(N_GOOD)]
    good = [json.dumps(make(r, t)) for t in good_ids]
    bad_id = "bad0000"
    at = r.randrange(1, N_GOOD)  # never first: the first line must not decide the others' fate either
    path = tmp_path / "in.jsonl"
    n = 0
    for m in mutants(make(r, bad_id)):
        lines = good[:at] + [json.dumps(m)] + good[at:]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        got, errors = _read(path)
        _check(got, errors, good_ids, f"{fmt}: {json.dumps(m)[:300]}")
        n += 1
    assert n > 20  # every field of the record was tried


def test_one_mistyped_trace_costs_only_itself_in_a_jaeger_document(tmp_path):
    r = rng("fuzz-jaeger")
    good_ids = [f"g{i}x{r.randrange(16**4):04x}" for i in range(N_GOOD)]
    good = [jaeger_trace(r, t) for t in good_ids]
    at = r.randrange(1, N_GOOD)
    for m in mutants(jaeger_trace(r, "bad0000")):
        (tmp_path / "j.json").write_text(json.dumps({"data": good[:at] + [m] + good[at:]}), encoding="utf-8")
        got, errors = _read(tmp_path / "j.json")
        _check(got, errors, good_ids, f"jaeger: {json.dumps(m)[:300]}")


def _damage_member(data: bytes, index: int, how: str) -> bytes:
    """Flip bytes inside member `index`'s compressed stream ('deflate': the stream no longer inflates, or its CRC
    no longer matches) or in its stored CRC ('crc')."""
    info = zipfile.ZipFile(io.BytesIO(data)).infolist()[index]
    out = bytearray(data)
    if how == "crc":
        out[info.header_offset + 14] ^= 0xFF  # the local header's CRC-32
        cd = data.rfind(info.filename.encode(), 0, len(data))  # and the directory's copy, just before its name
        out[cd - 46 + 16] ^= 0xFF
    else:
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
        for k in range(min(6, info.compress_size)):
            out[start + k] ^= 0xA5
    return bytes(out)


@pytest.mark.parametrize("how", ["deflate", "crc"])
def test_one_damaged_zip_member_costs_only_itself(tmp_path, how):
    r = rng(f"zip-{how}")
    n = 50
    good_ids = [f"z{i}x{r.randrange(16**4):04x}" for i in range(n)]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for i, t in enumerate(good_ids):
            name = f"m{i:02d}.jsonl" if i % 2 else f"m{i:02d}.json"
            z.writestr(name, json.dumps(canonical(r, t) if i % 3 else otlp(r, t)))
    bad = r.randrange(n)
    (tmp_path / "a.zip").write_bytes(_damage_member(buf.getvalue(), bad, how))
    got, errors = _read(tmp_path / "a.zip")
    assert sorted(got) == sorted(good_ids[:bad] + good_ids[bad + 1:]), (how, errors, SEED)
    [e] = errors
    assert e["reason"] == "invalid_zip" and e["record_id"] == f"m{bad:02d}.json" + ("l" if bad % 2 else ""), e


def _sample(r, i: int) -> dict:
    return {"id": i, "epoch": 1, "input": text(r, 3, 20), "messages": [
        {"role": "user", "content": text(r, 3, 20)}, {"role": "assistant", "content": text(r, 3, 20)}]}


def _eval_zip(samples: list[Any], raw: dict[int, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", json.dumps({"version": 2, "status": "success",
                                              "eval": {"task": "t", "run_id": "R"}}))
        for i, s in enumerate(samples):
            z.writestr(f"samples/{i + 1}_epoch_1.json", (raw or {}).get(i, json.dumps(s).encode()))
    return buf.getvalue()


@pytest.mark.parametrize("how", ["deflate", "crc", "json", "mistyped"])
def test_one_damaged_inspect_sample_costs_only_itself(tmp_path, how):
    r = rng(f"eval-{how}")
    samples = [_sample(r, i + 1) for i in range(20)]
    bad = r.randrange(20)
    if how in ("deflate", "crc"):
        data = _damage_member(_eval_zip(samples), bad + 1, how)  # member 0 is the header
    elif how == "json":
        data = _eval_zip(samples, {bad: b'{"id": 1, "messages": [tru'})
    else:
        samples[bad]["messages"] = 5
        data = _eval_zip(samples)
    (tmp_path / "log.eval").write_bytes(data)
    got, errors = _read(tmp_path / "log.eval")
    assert len(got) == 19 and f"inspect/t/R/{bad + 1}#1" not in got, (how, errors, SEED)
    [e] = errors
    assert e["record_id"] in (f"samples/{bad + 1}_epoch_1.json", f"inspect/t/R/{bad + 1}#1"), e


def test_json_lines_format_is_decided_per_line(tmp_path):
    """Finding 14: an OTLP (or LangSmith) first line and 200 canonical lines are 201 traces, whichever comes first."""
    r = rng("per-line")
    canon = [canonical(r, f"c{i}") for i in range(200)]
    for head in (otlp(r, "o1"), langsmith(r, "l1")):
        for order in ("first", "last"):
            lines = [head] + canon if order == "first" else canon + [head]
            (tmp_path / "mix.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
            got, errors = _read(tmp_path / "mix.jsonl")
            assert len(got) == 201 and errors == [], (order, list(head)[0], errors[:3])
