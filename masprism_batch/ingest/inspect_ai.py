"""Inspect AI evaluation logs (`--format inspect`, source `inspect`): the `.json` log and the `.eval` zip.

- `.json`: `{"version", "status", "eval": {"task", "run_id", "model", ...}, "plan", "results", "stats",
  "samples": [...]}` (`inspect eval --log-format json`).
- `.eval` (the default log format): a zip holding `header.json` (the same header, no samples; `_journal/start.json`
  while the run is still going) and one `samples/<id>_epoch_<n>.json` per sample.
A sample: `id`, `epoch`, `input` (text or messages), `target`, `messages` (`role` system / user / assistant /
tool; `content` text or parts `text` / `reasoning` / `image`; assistant `tool_calls: [{"id", "function": name,
"arguments": {...}}]`; tool messages name their `function` and may carry `error: {"type", "message"}`),
`output`, `scores: {scorer: {"value", "answer", "explanation"}}`.

One trace per sample, steps as Chat Completions messages (a tool result speaks as its function, an error is
appended to its text). question = the sample's input; metadata: task, model, sample id, epoch, target, the
scorers' values. Trace id `inspect/<task>/<run id>/<sample id>#<epoch>`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, loads, short
from masprism_batch.ingest.messages import question_of
from masprism_batch.ingest.openai_chat import chat_steps
from masprism_batch.trace import Trace


def is_log(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("eval"), dict) and "version" in d and (
        "samples" in d or "status" in d)


def is_eval_zip(names: list[str]) -> bool:
    return any(n.startswith("samples/") for n in names) and (
        "header.json" in names or "_journal/start.json" in names)


def _part(p: Any) -> Any:
    if isinstance(p, dict) and p.get("type") == "reasoning" and isinstance(p.get("reasoning"), str):
        return {"type": "text", "text": f"Reasoning: {p['reasoning']}"} if p["reasoning"].strip() else None
    return p


def _message(m: Any) -> Any:
    """An Inspect ChatMessage as a Chat Completions message (tool call names are plain `function` text)."""
    if not isinstance(m, dict):
        return m
    out = {k: m[k] for k in ("role", "content", "tool_call_id") if k in m}
    if isinstance(out.get("content"), list):
        out["content"] = [q for q in (_part(p) for p in out["content"]) if q is not None]
    calls = m.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [{"id": c.get("id"), "function": {
            "name": c["function"] if isinstance(c.get("function"), str) else "?",
            "arguments": c.get("arguments") if isinstance(c.get("arguments"), str) else json.dumps(
                c.get("arguments"), ensure_ascii=False, default=str)}} if isinstance(c, dict) else c for c in calls]
    if m.get("role") == "tool":
        if isinstance(m.get("function"), str):
            out["name"] = m["function"]
        err = m.get("error")
        if isinstance(err, dict) and err.get("message"):
            text = out.get("content") if isinstance(out.get("content"), str) else ""
            out["content"] = f"{text}\nError ({err.get('type')}): {err['message']}".strip()
    return out


def _sample(s: Any, head: dict, i: int) -> Trace:
    ev = head.get("eval") if isinstance(head.get("eval"), dict) else {}
    if not isinstance(s, dict):
        raise IngestError("invalid_record", f"samples[{i}] must be an object, got {type(s).__name__}")
    sid, epoch = s.get("id", i + 1), s.get("epoch", 1)
    tid = f"inspect/{ev.get('task') or '?'}/{ev.get('run_id') or ev.get('eval_id') or '?'}/{sid}#{epoch}"
    msgs = s.get("messages")
    if not isinstance(msgs, list):
        raise IngestError("invalid_record", f"samples[{i}].messages must be a list, got {type(msgs).__name__}", tid)
    if not msgs:
        raise IngestError("empty_trace", f"samples[{i}].messages is empty", tid)
    steps = chat_steps([_message(m) for m in msgs], tid, f"samples[{i}].messages")
    inp = s.get("input")
    question = question_of(inp if isinstance(inp, str) else [_message(m) for m in inp] if isinstance(
        inp, list) else None) or question_of(msgs)
    meta: dict[str, Any] = {"format": "inspect", "sample_id": sid, "epoch": epoch}
    for k in ("task", "model", "run_id"):
        if isinstance(ev.get(k), str):
            meta[k] = ev[k]
    if isinstance(s.get("target"), (str, list)):
        meta["target"] = s["target"]
    scores = s.get("scores")
    if isinstance(scores, dict):
        meta["scores"] = {k: v.get("value") if isinstance(v, dict) else v for k, v in scores.items()}
    return Trace(trace_id=tid, source="inspect", system=ev.get("task") if isinstance(ev.get("task"), str) else None,
                 question=question, steps=steps, labels=None, metadata=meta)


def _samples(samples: list, head: dict, ctx: Context) -> Iterator[Trace]:
    for i, s in enumerate(samples):
        try:
            yield _sample(s, head, i)
        except Exception as e:  # noqa: BLE001 - one sample's failure is its rejection, the log goes on
            ctx.reject(e if isinstance(e, IngestError) else IngestError(
                "invalid_record", f"{type(e).__name__}: {short(str(e), 300)}", f"samples[{i}]"))


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    if not is_log(doc):
        raise IngestError("invalid_record", "an Inspect log needs 'version', 'eval' and 'samples'")
    samples = doc.get("samples")
    if not isinstance(samples, list) or not samples:
        raise IngestError("empty_trace", "the Inspect log holds no samples (written with --no-log-samples?)")
    yield from _samples(samples, doc, ctx)


def parse_zip(arc: Any, ctx: Context) -> Iterator[Trace]:
    """An `.eval` archive (`containers.ZipArchive`): the header, then each `samples/*.json` as one sample, read
    one at a time; a sample member that is damaged or not valid JSON is that sample's row, the others are read."""
    try:
        raw = arc.read_named("header.json") or arc.read_named("_journal/start.json") or b"{}"
        head = loads(raw.decode("utf-8", errors="replace"), "header.json")
    except IngestError as e:  # no header: samples are still read, their ids lack the task
        ctx.reject_any(e, "header.json")
        head = {}
    head = head if isinstance(head, dict) else {}
    read = 0
    for i, (name, body) in enumerate(arc.members()):
        if not name.startswith("samples/"):
            continue
        try:
            if isinstance(body, IngestError):
                raise body
            s = loads(body.decode("utf-8", errors="replace"), name)
            body = None
            read += 1
            yield _sample(s, head, i)
        except Exception as e:  # noqa: BLE001 - one sample's failure is its rejection, the log goes on
            ctx.reject_any(e, name)
    if not read and not ctx.rejected:
        raise IngestError("empty_trace", "the .eval archive holds no readable samples/")
