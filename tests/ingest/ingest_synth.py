"""Random synthetic inputs for the ingest tests (fresh seed each run unless MASPRISM_TEST_SEED is set)."""

from __future__ import annotations

import json
import os
import random
import string
from datetime import datetime, timedelta, timezone

SEED = int(os.environ.get("MASPRISM_TEST_SEED", random.randrange(2**31)))
T0 = datetime(2025, 3, 19, 16, 40, tzinfo=timezone.utc)


def rng(salt: str) -> random.Random:
    return random.Random(f"{SEED}-{salt}")


def text(r: random.Random, lo: int = 1, hi: int = 200) -> str:
    alphabet = string.ascii_letters + string.digits + " \n\t{}[]\"'\\/.,:;-é漢字🙂"
    return "".join(r.choice(alphabet) for _ in range(r.randint(lo, hi)))


def who_and_when(r: random.Random, hand_crafted: bool) -> dict:
    n = r.randint(1, 13)
    agents = ["Orchestrator", "WebSurfer", "FileSurfer", "Assistant"] if hand_crafted else \
        ["Expert_A", "Verification_Expert", "Computer_terminal"]
    hist, expect = [], []
    for _ in range(n):
        a = r.choice(agents)
        if hand_crafted:
            role = a + r.choice(["", " (thought)", " (-> WebSurfer)", " (termination condition)"])
            hist.append({"content": text(r), "role": role})
        else:
            role = r.choice(["assistant", "user"])
            hist.append({"content": text(r), "role": role, "name": a})
        expect.append((a, role))
    ms = r.randrange(n)
    doc = {"history": hist, "question": text(r), "ground_truth": "GROUND-TRUTH-" + text(r, 5, 10),
           "mistake_agent": expect[ms][0], "mistake_step": str(ms), "mistake_reason": "REASON-" + text(r, 5, 10),
           "question_ID": text(r, 8, 8), "level": r.choice(["1", 2])}
    doc["is_corrected" if hand_crafted else "is_correct"] = False
    if not hand_crafted:
        doc["system_prompt"] = {a: text(r) for a in agents}
    return doc, expect


def oi_span(sid: str, kind: str | None, name: str, t: datetime | str, **attrs) -> dict:
    a = dict(attrs)
    if kind:
        a["openinference.span.kind"] = kind
    return {"trace_id": "t", "span_id": sid, "parent_span_id": None, "span_name": name,
            "timestamp": t if isinstance(t, str) else t.isoformat().replace("+00:00", "Z"), "span_attributes": a, "child_spans": [],
            "events": [], "service_name": "svc"}


def trail_trace(r: random.Random, tid: str) -> tuple[dict, list[dict]]:
    """A nested smolagents-like tree: main -> CodeAgent.run -> Step k -> LLM (+ TOOL / nested search agent).

    Returns the trace and the expected steps (span_id, agent, kind, content-marker) in order."""
    t = T0 + timedelta(seconds=r.randint(0, 10**6))
    ids = iter(f"{r.getrandbits(64):016x}" for _ in range(10**6))
    root = oi_span(next(ids), None, "main", t)
    agent = oi_span(next(ids), "AGENT", "CodeAgent.run", t, **{"input.value": json.dumps({"task": "TASK " + text(r)})})
    root["child_spans"].append(agent)
    expected = []
    for k in range(r.randint(1, 6)):
        t += timedelta(seconds=r.uniform(0.5, 5))
        step = oi_span(next(ids), "CHAIN", f"Step {k + 1}", t, **{"output.value": "Execution logs: " + text(r)})
        agent["child_spans"].append(step)
        t += timedelta(microseconds=r.randint(1, 999))
        out = text(r)
        llm = oi_span(next(ids), "LLM", "LiteLLMModel.__call__", t, **{
            "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": "HISTORY " + text(r),
            "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": out,
            "output.value": json.dumps({"role": "assistant", "content": out})})
        step["child_spans"].append(llm)
        expected.append((llm["span_id"], "CodeAgent", "llm", out))
        if r.random() < 0.5:  # the manager calls a managed search agent
            t += timedelta(seconds=1)
            sub = oi_span(next(ids), "AGENT", "ToolCallingAgent.run", t,
                          **{"input.value": json.dumps({"task": "You're a helpful agent named 'search_agent'."})})
            step["child_spans"].append(sub)
            for _ in range(r.randint(1, 3)):
                t += timedelta(seconds=1)
                q = text(r, 1, 30)
                q = json.dumps({"query": q}, ensure_ascii=False)
                tool = oi_span(next(ids), "TOOL", "SearchInformationTool", t, **{
                    "tool.name": "web_search", "input.value": q, "output.value": "RESULT"})
                sub["child_spans"].append(tool)
                expected.append((tool["span_id"], "search_agent", "tool", q))
    # the final reformulation LLM call sits outside any agent: its agent is the service name
    t += timedelta(seconds=1)
    final = oi_span(next(ids), "LLM", "LiteLLMModel.__call__", t, **{"llm.output_messages.0.message.content": "FINAL"})
    root["child_spans"].append(final)
    expected.append((final["span_id"], "svc", "llm", "FINAL"))
    # children listed in a shuffled order: ordering must come from timestamps, not list position
    for node in [agent] + agent["child_spans"]:
        r.shuffle(node["child_spans"])
    return {"trace_id": tid, "spans": [root]}, expected


def write_json(path, obj, gz: bool = False) -> None:
    import gzip

    data = json.dumps(obj).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
