"""Issue 34 items 1-2: the context kept only in model calls' inputs becomes steps once (context.py), a framework
LLM span and its inner LLM span are one step, agents never come from span housekeeping names; and the benchmark
datasets read exactly as before (steps, agents, ids pinned for a few files)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from ingest_synth import SEED, rng, text

from masprism_batch.ingest import read_inputs
from masprism_batch.ingest.context import attr_inputs, input_messages, with_context
from masprism_batch.trace import Step

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "formats" / "_golden" / "benchmark_reads.json"


def _read(path):
    errors: list[dict] = []
    return list(read_inputs([str(path)], "auto", errors.append)), errors


def _words(r, n=5):
    return " ".join(text(r, 3, 10).replace("\n", " ") for _ in range(n)).strip() or "x"


@pytest.mark.parametrize("rel", sorted(json.loads(GOLDEN.read_text())))
def test_benchmark_files_read_as_before(shared_data, rel):
    path = shared_data / rel
    if not path.is_file():
        pytest.skip(f"{rel} not present")
    want = json.loads(GOLDEN.read_text())[rel]
    traces, _ = _read(path)
    got = [{"trace_id": t.trace_id, "steps": len(t.steps), "agents": [s.agent for s in t.steps],
            "sha": hashlib.sha256(json.dumps([[s.agent, s.content, s.role, s.kind, s.span_id] for s in t.steps])
                                  .encode()).hexdigest()[:16]} for t in traces]
    assert got == want


def test_input_shapes_read_as_messages():
    r = rng("shapes")
    sys_, task, out = _words(r), _words(r), _words(r)
    assert [(m["role"], m["text"]) for m in input_messages(f"system: {sys_}\nuser: {task}\nassistant: None")] == [
        ("system", sys_), ("user", task)]  # a role-prefixed transcript; `None` is no message
    agno = [f"role='system' content={sys_!r} name=None tool_calls=None audio=None",
            f"role='user' content={task!r} name=None", "role='assistant' content=None name=None "
            "tool_calls=[{'id': 'c', 'function': {'arguments': '{}', 'name': 'search'}}] audio=None"]
    assert [(m["role"], m["text"]) for m in input_messages({"messages": agno})] == [
        ("system", sys_), ("user", task), ("assistant", "Tool call: search(")]
    adk = {"config": {"system_instruction": sys_}, "contents": [
        {"role": "user", "parts": [{"text": task}]}, {"role": "model", "parts": [{"function_call": {"name": "f"}}]},
        {"role": "user", "parts": [{"function_response": {"name": "f", "response": {"r": out}}}]}]}
    got = input_messages(json.dumps(adk))
    assert [(m["role"], m.get("name")) for m in got] == [("system", None), ("user", None), ("assistant", None),
                                                         ("tool", "f")]
    assert got[3]["text"] == json.dumps({"r": out}, ensure_ascii=False)  # Gemini sends results as a user turn
    flat = {"gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": task, "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": sys_}
    assert [m["text"] for m in attr_inputs(flat)] == [sys_, task]
    lc_tool_def = {"role": "tool", "content": {"type": "function", "function": {"name": "f", "parameters": {}}}}
    assert input_messages([lc_tool_def, {"role": "user", "content": task}]) == [
        {"role": "user", "text": task, "name": None}]  # a tool definition passed as a message is no turn


def test_context_once_in_order_never_re_added():
    r = rng("once")
    sys_, task, turn2 = _words(r), _words(r), _words(r)
    a1, a2 = f"Tool call: search({{\"q\": \"{_words(r, 1)}\"}})", _words(r)
    res = _words(r)
    steps = [Step(index=0, agent="bot", content=a1, role="assistant", kind="llm", span_id="g1"),
             Step(index=1, agent="search", content=f"Tool: search\nOutput: {res}", role="tool", kind="tool",
                  span_id="t1"),
             Step(index=2, agent="bot", content=a2, role="assistant", kind="llm", span_id="g2")]
    first = [{"role": "system", "content": sys_}, {"role": "user", "content": task}]
    second = first + [{"role": "assistant", "tool_calls": [{"id": "1", "function": {
        "name": "search", "arguments": "{ \"q\" : 1 }"}}]}, {"role": "tool", "content": res},
        {"role": "user", "content": turn2}]
    out, q = with_context(steps, {"g1": input_messages(first), "g2": input_messages(second)})
    assert q == task, f"seed {SEED}"
    assert [(s.role, s.content) for s in out] == [("system", sys_), ("user", task), ("assistant", a1),
                                                  ("tool", steps[1].content), ("user", turn2), ("assistant", a2)]
    assert [s.index for s in out] == list(range(6)) and out[0].agent == "bot" and out[1].agent == "user"


def _otlp(spans):
    def kv(d):
        return [{"key": k, "value": {"stringValue": v}} for k, v in d.items()]
    return {"resourceSpans": [{"resource": {"attributes": kv({"service.name": "unknown_service"})},
                               "scopeSpans": [{"spans": [{**s, "traceId": "ab" * 16, "attributes": kv(s["attributes"])}
                                                         for s in spans]}]}]}


def test_framework_llm_span_and_inner_llm_span_are_one_step(tmp_path):
    r = rng("nested")
    task, answer = _words(r), _words(r)
    spans = [
        {"spanId": "01", "name": "agent.react.start-4", "startTimeUnixNano": "1000", "attributes": {}},
        {"spanId": "02", "parentSpanId": "01", "name": "call_llm", "startTimeUnixNano": "2000", "attributes": {
            "gcp.vertex.agent.llm_request": json.dumps({"contents": [{"role": "user", "parts": [{"text": task}]}]}),
            "gcp.vertex.agent.llm_response": "{}", "gen_ai.operation.name": "call_llm"}},
        {"spanId": "03", "parentSpanId": "02", "name": "generate_content m", "startTimeUnixNano": "2001",
         "attributes": {"gen_ai.operation.name": "generate_content", "gen_ai.output.messages": json.dumps(
             [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}])}},
    ]
    (tmp_path / "t.json").write_text(json.dumps(_otlp(spans)))
    (t,), errors = _read(tmp_path / "t.json")
    assert errors == [] and [(s.role, s.content) for s in t.steps] == [("user", task), ("assistant", answer)]
    assert t.question == task and t.steps[1].span_id == "02"
    assert t.steps[1].agent == "assistant"  # neither `agent.react.start-4` nor `unknown_service`


def test_langfuse_bare_event_joins_the_step_before_it(tmp_path):
    r = rng("event")
    answer, name = _words(r), f"ev-{r.getrandbits(20)}"
    obs = [{"id": "g", "traceId": "t", "type": "GENERATION", "name": "llm", "startTime": "2025-01-01T00:00:01Z",
            "output": {"role": "assistant", "content": answer}},
           {"id": "e", "traceId": "t", "type": "EVENT", "name": name, "startTime": "2025-01-01T00:00:02Z"}]
    (tmp_path / "lf.json").write_text(json.dumps({"id": "t", "name": "app", "observations": obs}))
    (t,), errors = _read(tmp_path / "lf.json")
    assert errors == [] and [s.content for s in t.steps] == [f"{answer}\nEvent: {name}"]


def test_langfuse_framework_housekeeping_streams_and_call_parts(tmp_path):
    """BeeAI / Koog shapes: counters and ids in span names are no agents, a stream's lifecycle records are no
    steps, one chunk per output message is joined as text, an OpenAI tool call kept as a content part is a call."""
    r = rng("lf-frameworks")
    words = [text(r, 1, 6).replace("\n", " ") or "w" for _ in range(r.randint(5, 30))]
    chunks = {f"llm.output_messages.{i}.message.content": w for i, w in enumerate(words)}
    chunks.update({f"llm.output_messages.{i}.message.role": "assistant" for i in range(len(words))})
    obs = [
        {"id": "root", "traceId": "t", "type": "AGENT", "name": f"run.{r.getrandbits(32):08x}-1a2b-3c4d-5e6f-"
                                                                 "00112233aabb", "startTime": "2025-01-01T00:00:00Z"},
        {"id": "it", "traceId": "t", "type": "SPAN", "name": "iteration-1", "parentObservationId": "root",
         "startTime": "2025-01-01T00:00:01Z"},
        {"id": "st", "traceId": "t", "type": "SPAN", "name": "agent.react.start-4", "parentObservationId": "it",
         "startTime": "2025-01-01T00:00:02Z", "output": None},
        {"id": "g0", "traceId": "t", "type": "GENERATION", "name": "backend.openai.chat.start-14",
         "parentObservationId": "st", "startTime": "2025-01-01T00:00:03Z", "output": None},
        {"id": "g1", "traceId": "t", "type": "GENERATION", "name": "llm.chat", "parentObservationId": "it",
         "startTime": "2025-01-01T00:00:04Z", "output": [{"role": "assistant", "content": [
             {"function": {"name": "HelloTool", "arguments": {"name": "Bob"}}, "id": "c1", "type": "function"}]}]},
        {"id": "g2", "traceId": "t", "type": "GENERATION", "name": "backend.openai.chat.success-16",
         "parentObservationId": "it", "startTime": "2025-01-01T00:00:05Z", "metadata": {"attributes": chunks}},
    ]
    (tmp_path / "lf.json").write_text(json.dumps({"id": "t", "name": obs[0]["name"], "observations": obs}))
    (t,), errors = _read(tmp_path / "lf.json")
    assert errors == [], f"seed {SEED}"
    assert [(s.agent, s.content) for s in t.steps] == [("assistant", 'Tool call: HelloTool({"name": "Bob"})'),
                                                       ("assistant", "".join(words))]
