"""TRAIL / OpenInference adapter: random nested trees, flat span lists, deep trees, real TRAIL data."""

from __future__ import annotations

import gzip
import json

import pytest
from ingest_synth import SEED, oi_span, rng, trail_trace, write_json

from masprism_batch.ingest import read_inputs


def _dataset(tmp_path, r, n, dataset="GAIA"):
    expected, docs = {}, {}
    for _ in range(n):
        tid = f"{r.getrandbits(128):032x}"
        doc, exp = trail_trace(r, tid)
        write_json(tmp_path / dataset / "traces" / f"{tid}.json.gz", doc, gz=True)
        expected[tid], docs[tid] = exp, doc
    return expected, docs


def test_synthetic_trail_dataset(tmp_path):
    r = rng("trail")
    expected, _ = _dataset(tmp_path, r, r.randint(2, 5))
    labelled = sorted(expected)[: len(expected) // 2 + 1]
    gold = {}
    for tid in labelled:
        steps = expected[tid]
        locs = [r.choice(steps)[0] for _ in range(r.randint(1, 4))] + ["not-a-step-span"]
        gold[tid] = locs
        write_json(tmp_path / "GAIA" / "annotations" / f"{tid}.json", {"trace_id": tid, "errors": [
            {"category": f"cat{k}", "location": loc, "evidence": "EVIDENCE", "description": "D", "impact": "HIGH"}
            for k, loc in enumerate(locs)], "scores": [{"overall": 3}]})
    errors: list[dict] = []
    traces = {t.trace_id: t for t in read_inputs([str(tmp_path)], on_error=errors.append)}
    assert errors == [], f"seed {SEED}"
    assert set(traces) == set(expected)  # annotation files were not read as traces
    for tid, exp in expected.items():
        t = traces[tid]
        assert t.source == "trail/GAIA" and t.system == "smolagents"
        got = [(s.span_id, s.agent, s.kind) for s in t.steps]
        assert got == [(sid, agent, kind) for sid, agent, kind, _ in exp], f"seed {SEED}"
        for s, (_, _, _, marker) in zip(t.steps, exp, strict=True):
            assert marker in s.content
            assert "HISTORY" not in s.content  # LLM input history is never copied into a step
        times = [s.start_time for s in t.steps]
        assert times == sorted(times)
        assert t.question.startswith("TASK ")
        if tid in gold:
            assert t.labels.error_locations == gold[tid]
            assert t.labels.error_categories == [f"cat{k}" for k in range(len(gold[tid]))]
            assert t.labels.error_impacts == ["HIGH"] * len(gold[tid])
            assert t.metadata["label_locations_unmapped"] == 1
            assert "EVIDENCE" not in json.dumps(t.metadata)
        else:
            assert t.labels is None


def test_flat_span_list_and_tool_errors(tmp_path):
    r = rng("flat")
    t0 = "2025-01-01T00:00:0{}Z"
    agent = oi_span("A", "AGENT", "CodeAgent.run", "x")
    spans = [dict(oi_span("L2", "LLM", "LiteLLMModel.__call__", "x", **{"output.value": "second"}),
                  parent_span_id="A", timestamp=t0.format(3)),
             dict(agent, timestamp=t0.format(0)),
             dict(oi_span("T1", "TOOL", "VisitTool", "x", **{"tool.name": "visit_page", "input.value": "{}"}),
                  parent_span_id="A", timestamp=t0.format(2),
                  events=[{"Name": "exception", "Attributes": {"exception.type": "ValueError",
                                                               "exception.message": "page not found"}}]),
             dict(oi_span("L1", "LLM", "LiteLLMModel.__call__", "x", **{
                 "llm.output_messages.0.message.content": "thinking",
                 "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "visit_page",
                 "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"url": "u"}'}),
                  parent_span_id="A", timestamp=t0.format(1))]
    r.shuffle(spans)
    write_json(tmp_path / "flat.json", spans)
    errors: list[dict] = []
    [t] = list(read_inputs([str(tmp_path / "flat.json")], on_error=errors.append))
    assert errors == []
    assert [s.span_id for s in t.steps] == ["L1", "T1", "L2"]
    assert t.steps[0].content == 'thinking\nTool call: visit_page({"url": "u"})'
    assert "ValueError: page not found" in t.steps[1].content
    assert all(s.agent == "CodeAgent" and s.parent_span_id == "A" for s in t.steps)


def test_5000_deep_tree_no_recursion_error(tmp_path):
    depth = 5000 + rng("deep").randint(0, 50)
    leaf = oi_span("leaf", "LLM", "LiteLLMModel.__call__", "2025-01-01T00:00:00Z", **{"output.value": "deep leaf"})
    # json.dumps recurses once per level, so the document is assembled as text, outermost span first
    heads, tails = [], []
    for i in reversed(range(depth)):
        shell = json.dumps(oi_span(f"s{i}", "AGENT" if i == 7 else "CHAIN", "X.run" if i == 7 else "chain",
                                   "2025-01-01T00:00:00Z"))
        cut = shell.rindex('"child_spans": []') + len('"child_spans": [')
        heads.append(shell[:cut])
        tails.append(shell[cut:])
    text = "".join(heads) + json.dumps(leaf) + "".join(reversed(tails))
    (tmp_path / "deep.json.gz").write_bytes(gzip.compress(('{"trace_id": "deep", "spans": [' + text + "]}").encode()))
    errors: list[dict] = []
    [t] = list(read_inputs([str(tmp_path / "deep.json.gz")], on_error=errors.append))
    assert errors == []
    assert [s.content for s in t.steps] == ["deep leaf"]
    assert t.steps[0].agent == "X" and t.metadata["n_spans"] == depth + 1


def test_real_trail(shared_data):
    errors: list[dict] = []
    traces = list(read_inputs([str(shared_data / "trail")], on_error=errors.append))
    assert len(traces) == 87
    assert sum(t.source == "trail/GAIA" for t in traces) == 68
    # and the folder's LICENSE, listed as not read (issue 47)
    assert sorted(e["reason"] for e in errors) == ["duplicate_span", "invalid_annotation", "skipped_file"]
    bad = next(e for e in errors if e["reason"] == "invalid_annotation")
    assert bad["record_id"] == "a96c6811716c0473b86a23321db79c34" and bad["input_path"].endswith(".json")
    by_id = {t.trace_id: t for t in traces}
    assert by_id["a96c6811716c0473b86a23321db79c34"].labels is None
    labelled = [t for t in traces if t.labels is not None]
    assert len(labelled) == 86
    n_gold = sum(len(t.labels.error_locations) for t in labelled)
    unmapped = sum(t.metadata["label_locations_unmapped"] for t in labelled)
    assert unmapped <= 2 and n_gold > 400  # every real gold location is an LLM or TOOL span (one is a dangling id)
    for t in traces:
        assert t.steps and {s.kind for s in t.steps} <= {"llm", "tool"} and t.system == "smolagents"
        assert len({s.span_id for s in t.steps}) == len(t.steps)
        assert all(s.agent for s in t.steps)
        raw = json.loads(gzip.decompress((shared_data / "trail" / t.source.split("/")[1] / "traces" /
                                          f"{t.trace_id}.json.gz").read_bytes()))
        n_llm = 0
        stack = list(raw["spans"])
        while stack:
            s = stack.pop()
            stack.extend(s["child_spans"])
            n_llm += s["span_attributes"].get("openinference.span.kind") == "LLM"
        assert sum(s.kind == "llm" for s in t.steps) == n_llm - t.metadata["n_duplicate_spans_dropped"]
    gaia_agents = {s.agent for t in traces if t.source == "trail/GAIA" for s in t.steps}
    assert {"CodeAgent", "search_agent"} <= gaia_agents


@pytest.mark.parametrize("bad", ["[1, 2", '{"errors": "nope"}', '{"errors": [{"location": 5}]}'])
def test_invalid_annotation_keeps_trace(tmp_path, bad):
    r = rng("badann")
    tid = f"{r.getrandbits(128):032x}"
    doc, exp = trail_trace(r, tid)
    write_json(tmp_path / "SWE_Bench" / "traces" / f"{tid}.json", doc)
    (tmp_path / "SWE_Bench" / "annotations").mkdir()
    (tmp_path / "SWE_Bench" / "annotations" / f"{tid}.json").write_text(bad)
    errors: list[dict] = []
    [t] = list(read_inputs([str(tmp_path / "SWE_Bench")], on_error=errors.append))
    assert t.labels is None and len(t.steps) == len(exp) and t.source == "trail/SWE_Bench"
    assert [(e["reason"], e["record_id"]) for e in errors] == [("invalid_annotation", tid)]
