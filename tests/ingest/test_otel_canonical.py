"""OTLP GenAI adapter and the canonical JSONL / Parquet round trips."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import timedelta

import pyarrow.dataset as ds
from ingest_synth import SEED, T0, rng, text, who_and_when, write_json

from masprism_batch import schema
from masprism_batch.ingest import ingest, read_inputs
from masprism_batch.trace import Labels, Step, Trace


def _kv(d: dict) -> list[dict]:
    def val(v):
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"stringValue": v}

    return [{"key": k, "value": val(v)} for k, v in d.items()]


def _otlp(r, trace_id: str) -> tuple[dict, list[tuple]]:
    spans, expected = [], []
    t = T0 + timedelta(seconds=r.randint(0, 10**5))

    def span(sid, parent, name, attrs, events=()):
        spans.append({"traceId": trace_id, "spanId": sid, "parentSpanId": parent, "name": name,
                      "startTimeUnixNano": str(int(t.timestamp() * 1e9)), "attributes": _kv(attrs),
                      "events": list(events)})

    span("root", "", "invoke_agent planner", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})
    # every call's input repeats the system instruction, the task and the earlier answers: only the first two
    # are steps, once, before the first call (issue 34)
    history = [{"role": "system", "content": f"SYSTEM {text(r, 5, 40)}"}, {"role": "user", "content": f"TASK {text(r, 5, 40)}"}]
    expected += [("llm0#input0", "planner", "message", history[0]["content"]),
                 ("llm0#input1", "user", "message", history[1]["content"])]
    for k in range(r.randint(1, 5)):
        t += timedelta(seconds=1)
        out = text(r)
        said = [{"role": "assistant", "parts": [{"type": "text", "content": out},
                                                {"type": "tool_call", "name": "search", "arguments": {"q": k}}]}]
        span(f"llm{k}", "root", "chat gpt", {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(said),
                                             "gen_ai.input.messages": json.dumps(history)})
        history = history + said
        expected.append((f"llm{k}", "planner", "llm", out))
        if r.random() < 0.6:
            t += timedelta(seconds=1)
            span(f"sub{k}", "root", "invoke_agent researcher", {"gen_ai.operation.name": "invoke_agent",
                                                                 "gen_ai.agent.name": "researcher"})
            t += timedelta(seconds=1)
            res = text(r)
            span(f"tool{k}", f"sub{k}", "execute_tool search", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                "gen_ai.tool.call.arguments": '{"q": 1}', "gen_ai.tool.call.result": res},
                 events=[{"name": "exception", "attributes": _kv({"exception.type": "Timeout",
                                                                  "exception.message": "slow"})}])
            expected.append((f"tool{k}", "researcher", "tool", res))
    r.shuffle(spans)
    return {"resourceSpans": [{"resource": {"attributes": _kv({"service.name": "my-mas"})},
                               "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}, expected


def test_otel_genai_export(tmp_path):
    r = rng("otel")
    docs = [_otlp(r, f"{r.getrandbits(128):032x}") for _ in range(r.randint(2, 4))]
    merged = {"resourceSpans": [rs for d, _ in docs for rs in d["resourceSpans"]]}
    write_json(tmp_path / "export.json", merged)  # one file, several traces
    with open(tmp_path / "export.jsonl", "w") as f:  # the collector's file exporter: one request per line
        for d, _ in docs:
            f.write(json.dumps(d) + "\n")
    for name in ("export.json", "export.jsonl"):
        errors: list[dict] = []
        traces = list(read_inputs([str(tmp_path / name)], on_error=errors.append))
        assert errors == [] and len(traces) == len(docs), f"seed {SEED}"
        for t, (_, exp) in zip(traces, docs, strict=True):
            assert t.source == "otel" and t.system == "my-mas"
            assert [(s.span_id, s.agent, s.kind) for s in t.steps] == [e[:3] for e in exp]
            assert t.question == exp[1][3]
            for s, e in zip(t.steps, exp, strict=True):
                assert e[3] in s.content and ("TASK" in s.content) == (s.span_id == "llm0#input1")
                if s.kind == "llm":
                    assert 'Tool call: search({"q"' in s.content
                elif s.kind == "tool":
                    assert "Timeout: slow" in s.content


def _random_trace(r, i: int) -> Trace:
    steps = [Step(index=k, agent=r.choice(["a", "b", None]), content=text(r, 0, 300), role=r.choice(["user", None]),
                  kind=r.choice(["message", "llm", "tool"]), span_id=r.choice([None, f"s{k}"]),
                  parent_span_id=r.choice([None, "p"]), start_time=r.choice([None, T0 + timedelta(microseconds=k)]))
             for k in range(r.randint(1, 9))]
    labels = r.choice([None, Labels(mistake_step=r.randrange(len(steps)), mistake_agent="a"),
                       Labels(error_locations=["s0"], error_impacts=["LOW"], error_categories=["c"])])
    return Trace(trace_id=f"t{i}-{r.getrandbits(32)}", source=r.choice(["jsonl", "x/y"]), steps=steps,
                 system=r.choice([None, "S"]), question=r.choice([None, text(r)]), labels=labels,
                 metadata={"k": r.randint(0, 9), "u": "é"})


def test_canonical_round_trip_jsonl_parquet(tmp_path):
    r = rng("canon")
    traces = [_random_trace(r, i) for i in range(r.randint(5, 40))]
    rows = [t.to_row() for t in traces]
    # the one row encoder (no deep copy) equals the dataclass contract: every field, nested ones as dicts
    assert rows == [{**asdict(t), "metadata": json.dumps(t.metadata, ensure_ascii=False, default=str)}
                    for t in traces]
    for row in rows:  # JSONL carries times as ISO text and metadata as an object
        row["metadata"] = json.loads(row["metadata"])
        for s in row["steps"]:
            s["start_time"] = s["start_time"].isoformat() if s["start_time"] else None
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    s1 = ingest([str(tmp_path / "in.jsonl")], tmp_path / "out1", progress=False)
    assert s1.traces == len(traces) and s1.error_rows == 0, f"seed {SEED}"
    table = ds.dataset(str(tmp_path / "out1" / "traces")).to_table()
    assert table.schema.equals(schema.TRACES, check_metadata=False)
    assert table.schema.metadata[b"masprism.schema_version"] == schema.SCHEMA_VERSION.encode()
    back = {t.trace_id: t for t in read_inputs([str(tmp_path / "out1" / "traces")])}
    assert back == {t.trace_id: t for t in traces}
    # an OUTDIR given as input means its traces/ (errors/ beside it is not read as traces)
    errors: list[dict] = []
    assert len(list(read_inputs([str(tmp_path / "out1")], on_error=errors.append))) == len(traces)
    assert errors == []
    # and Parquet -> Parquet is the identity too
    s2 = ingest([str(tmp_path / "out1" / "traces")], tmp_path / "out2", fmt="parquet", progress=False)
    assert s2.traces == len(traces)
    assert ds.dataset(str(tmp_path / "out2" / "traces")).to_table().sort_by("trace_id").equals(
        table.sort_by("trace_id"))


def test_duplicate_ids_across_formats_keep_first(tmp_path):
    r = rng("dup")
    tid = f"dup-{r.randrange(10**9)}"  # any valid id; random text may hold characters an id refuses
    line = {"trace_id": tid, "source": "jsonl", "steps": [{"index": 0, "agent": "A", "content": text(r)}]}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.jsonl").write_text(json.dumps({**line, "question": "first"}) + "\n")
    (tmp_path / "b" / "x.jsonl").write_text(json.dumps({**line, "question": "other"}) + "\n")
    errors: list[dict] = []
    traces = list(read_inputs([str(tmp_path / "a"), str(tmp_path / "b")], on_error=errors.append))
    assert [t.question for t in traces] == ["first"]
    assert [(e["reason"], e["record_id"]) for e in errors] == [("duplicate_trace_id", tid)]
    assert errors[0]["input_path"].startswith(str(tmp_path / "b"))


def test_who_and_when_ids_from_two_folders_with_the_same_names_are_distinct(tmp_path):
    """Issue 32: ids taken from paths are unique per input path (`a/Algorithm-Generated/5` and
    `b/Algorithm-Generated/5`), also when the folders are given as two inputs, and whatever the input order."""
    r = rng("dup-wnw")
    doc, _ = who_and_when(r, False)
    write_json(tmp_path / "a" / "Algorithm-Generated" / "5.json", doc)
    write_json(tmp_path / "b" / "Algorithm-Generated" / "5.json", {**doc, "question": "other"})
    for inputs in ([tmp_path / "a", tmp_path / "b"], [tmp_path / "b", tmp_path / "a"], [tmp_path]):
        errors: list[dict] = []
        got = {t.trace_id: t.question for t in read_inputs([str(p) for p in inputs], on_error=errors.append)}
        assert errors == [] and got == {"a/Algorithm-Generated/5": doc["question"], "b/Algorithm-Generated/5": "other"}


def test_deep_metadata_line_is_rejected_alone(tmp_path):
    r = rng("deepmeta")
    depth = 3000 + r.randint(0, 100)
    deep = "[" * depth + "]" * depth
    good = [json.dumps({"trace_id": f"ok{i}", "steps": [{"agent": "a", "content": text(r)}]}) for i in range(2)]
    bad = '{"trace_id": "deep", "steps": [{"agent": "a", "content": "x"}], "metadata": {"m": ' + deep + "}}"
    (tmp_path / "in.jsonl").write_text("\n".join([good[0], bad, good[1]]) + "\n")
    errors: list[dict] = []
    got = [t.trace_id for t in read_inputs([str(tmp_path / "in.jsonl")], on_error=errors.append)]
    assert got == ["ok0", "ok1"]
    assert [(e["reason"], e["record_id"]) for e in errors] == [("invalid_record", "deep")]
