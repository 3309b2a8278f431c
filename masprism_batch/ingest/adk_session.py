"""Google ADK session events (`--format adk`, source `adk`): a saved `Session` (`{id, app_name | appName,
user_id | userId, state, events: [...]}`, what `adk web` / the API server's `/sessions/{id}` and the session
services store), its events alone (`{"events": [...]}`, no session envelope: ADK 2.x session files; trace
`adk/<file stem>`), or a bare event list (the `/run` response). ADK 1.x OTel traces are read as OTLP instead.

An event: `author` (`user` or the agent's name), `content: {role, parts: [{text} | {thought: true, text} |
{function_call | functionCall: {id, name, args}} | {function_response | functionResponse: {id, name,
response}}]}`, `invocation_id | invocationId`, `actions` (state deltas, transfers, escalation), `partial`,
`error_code` / `error_message` (`errorCode` / `errorMessage`), `timestamp`.

Steps, in event order: a user's text is a `user` step; an agent's event is one step speaking as its `author`:
its text, thoughts as `Reasoning:`, one `Tool call: name(args)` line per function call (parallel calls: several
lines in the one step); each function response is a step of its own, speaking as the tool it answers (`name`);
a response holding an `error` fills `Step.error`, as does an event's `error_message`. Streaming chunks
(`partial: true`) and events with no content (state deltas, transfers, escalations) are skipped, counted in
metadata `skipped_events`. question = the first user text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, check_trace_id
from masprism_batch.ingest.messages import content_text, dumps, join, tool_call_line
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.spantree import parse_time
from masprism_batch.ingest.status import error_text
from masprism_batch.trace import Step, Trace


def _get(d: dict, snake: str, camel: str) -> Any:
    return d.get(snake, d.get(camel))


def is_event(e: Any) -> bool:
    return isinstance(e, dict) and isinstance(e.get("author"), str) and (
        "invocation_id" in e or "invocationId" in e) and ("content" in e or "actions" in e)


def _has_events(events: list) -> bool:
    # any of the first events: one mistyped event (an `author` of another type) is its own row, never the session's
    return any(is_event(e) for e in events[:16])


def is_session(doc: Any) -> bool:
    if isinstance(doc, list):
        return _has_events(doc)
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        return False
    if _has_events(doc["events"]):  # the events say so, envelope or not (ADK 2.x `{"events"}`)
        return True
    return "id" in doc and not doc["events"] and any(
        k in doc for k in ("app_name", "appName", "user_id", "userId", "state", "past_events", "event_logs"))


def _response_text(r: dict) -> tuple[str, str | None]:
    body = r.get("response")
    err = None
    if isinstance(body, dict) and body.get("error") not in (None, ""):
        err = error_text(content_text(body["error"]))
    text = content_text(body) if isinstance(body, str) else dumps(body) if body is not None else ""
    return text, err


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    events = doc if isinstance(doc, list) else doc.get("events") if isinstance(doc, dict) else None
    sid = doc.get("id") if isinstance(doc, dict) and isinstance(doc.get("id"), str) and doc["id"] else None
    tid = check_trace_id(f"adk/{sid}" if sid else f"adk/{base_name(ctx.input_path)}")
    if not isinstance(events, list):
        raise IngestError("invalid_record", "an ADK session holds an 'events' list", tid)
    steps: list[Step] = []
    skipped: dict[str, int] = {}
    question = None
    for i, e in enumerate(events):
        if not is_event(e):
            ctx.reject(IngestError("invalid_record", f"events[{i}] is not an ADK event (author, invocation id, "
                                   f"content)", tid))
            continue
        if e.get("partial") is True:
            skipped["partial"] = skipped.get("partial", 0) + 1
            continue
        try:  # an event of an unexpected shape is its own row (`invalid_record`), the session's others are read
            question = _event(e, steps, skipped, question)
        except Exception as err:  # noqa: BLE001
            ctx.reject_any(err, f"{tid} events[{i}]")
    if not steps:
        raise IngestError("empty_trace", "no event with text, function calls or responses", tid)
    app = _get(doc, "app_name", "appName") if isinstance(doc, dict) else None
    meta: dict[str, Any] = {"format": "adk-session"}
    if skipped:
        meta["skipped_events"] = skipped
    yield Trace(trace_id=tid, source="adk", system=app if isinstance(app, str) and app else "adk", question=question,
                steps=steps, metadata=meta)


def _event(e: dict, steps: list[Step], skipped: dict[str, int], question: str | None) -> str | None:
    """Append the steps of one event; the question, once the first user text is seen."""
    author, when = e["author"], parse_time(e.get("timestamp"))
    content = e.get("content") if isinstance(e.get("content"), dict) else {}
    raw_parts = content.get("parts")
    if raw_parts is not None and not isinstance(raw_parts, list):
        raise IngestError("invalid_record", f"content.parts must be a list, got {type(raw_parts).__name__}")
    parts = [p for p in raw_parts or [] if isinstance(p, dict)]
    said, responses = [], []
    got: list[Step] = []  # appended once the whole event is read: a failure adds nothing
    for p in parts:
        call, resp = _get(p, "function_call", "functionCall"), _get(p, "function_response", "functionResponse")
        if isinstance(call, dict):
            said.append(tool_call_line({"name": call.get("name"), "arguments": call.get("args")}))
        elif isinstance(resp, dict):
            responses.append(resp)
        elif isinstance(p.get("text"), str) and p["text"].strip():
            said.append(f"Reasoning: {p['text'].strip()}" if p.get("thought") is True else p["text"].strip())
    msg = _get(e, "error_message", "errorMessage")
    err = error_text(msg, ()) if isinstance(msg, str) and msg else None
    if err:
        code = _get(e, "error_code", "errorCode")
        err = err.replace("Error: ", f"Error: {code}: ", 1) if code else err
    if said or err and not responses:
        user = author == "user"
        text = join("\n".join(said), err or "")
        if user and question is None and said:
            question = "\n".join(said)
        got.append(Step(index=len(steps) + len(got), agent=author, content=text, role="user" if user else "assistant",
                          kind="message", span_id=str(e["id"]) if e.get("id") else None, start_time=when,
                          error=err))
    for r in responses:
        text, rerr = _response_text(r)
        got.append(Step(index=len(steps) + len(got), agent=str(r.get("name") or "tool"), role="tool", kind="tool",
                          content=join(text, rerr if rerr and rerr not in text else "") or "(empty result)",
                          span_id=str(e["id"]) if e.get("id") else None, start_time=when, error=rerr))
    steps.extend(got)
    if not said and not responses and not err:
        skipped["no content"] = skipped.get("no content", 0) + 1
    return question
