"""Claude Code session transcripts (`--format claude-code`, source `claude-code`): the JSON lines Claude Code
writes under `~/.claude/projects/<project>/<session>.jsonl` (and sub-agents' `agent-<id>.jsonl`).

A line: `type` (`user` | `assistant` | `system` | `summary` | `file-history-snapshot`), `uuid`, `parentUuid`,
`sessionId`, `timestamp`, `isSidechain` (true: a sub-agent started with the `Task` tool), `agentId`, `isMeta`
(client-injected text), `message: {"role", "content": text | [{"type": "text" | "thinking" | "tool_use" |
"tool_result", ...}]}` (one content block per line for assistant messages, sharing `message.id`).

One trace per `sessionId`, steps in time order: the user's prompts (agent `user`), the main agent's turns
(agent `claude-code`: text, `Reasoning:` thinking, `Tool call: name(input)`; blocks of one message joined),
tool results (agent = the tool, `Error:` when `is_error`; an empty result named in its call's step). A
sidechain is a sub-agent: its turns speak as the `Task` call's `subagent_type` (else `subagent`), its prompt
as the main agent. question = the first user prompt; metadata: version, git branch, summaries.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, check_trace_id, short
from masprism_batch.ingest.messages import content_text, join, tool_call_line
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.spantree import parse_time
from masprism_batch.ingest.status import error_text
from masprism_batch.trace import Step, Trace

LINE_TYPES = {"user", "assistant", "system", "summary", "file-history-snapshot"}
# lines Claude Code writes beside the conversation: file backups, hook / sub-agent progress mirrors, the input
# queue, titles, modes. Skipped by name (counted in metadata `skipped_lines`), never a step, a row or a format vote.
AUXILIARY = {"file-history-snapshot", "progress", "queue-operation", "custom-title", "permission-mode",
             "agent-name", "tag", "last-prompt"}
MAIN = "claude-code"
MAX_SKIPPED_TYPES = 32  # distinct skipped line types named in metadata; the rest are counted together
OTHER_TYPES = "(other types)"
MAX_SUMMARIES, MAX_SUMMARY_CHARS = 32, 2000  # per session: summary lines without a session are copied into each
_ID_KEYS = ("uuid", "agentId")  # ids a line's step or agent is keyed by: a string or absent, else the line is refused


def is_line(d: Any) -> bool:
    if not isinstance(d, dict) or not isinstance(d.get("type"), str):
        return False
    t = d["type"]
    if t == "file-history-snapshot":
        return "snapshot" in d or "messageId" in d
    if t in AUXILIARY:
        return "sessionId" in d and ("data" in d or "operation" in d or "uuid" in d or len(d) > 2)
    return t in LINE_TYPES and (
        "sessionId" in d and ("message" in d or "uuid" in d) or t == "summary" and "leafUuid" in d)


def _blocks(content: Any) -> list:
    return content if isinstance(content, list) else [{"type": "text", "text": content}] if content else []


def _result_text(b: dict) -> tuple[str, str | None]:
    """A tool result's text and, when Claude Code marks it `is_error`, its error (`status.error_text`)."""
    text = content_text(b.get("content")).strip()
    if b.get("is_error") is True and text:
        err = error_text(text)
        return err, err
    return text, None


def _session(lines: list[dict], tid: str) -> Trace:
    lines = sorted(lines, key=lambda d: (parse_time(d.get("timestamp")) is None, str(d.get("timestamp") or "")))
    calls: dict[str, str] = {}  # tool_use id -> tool name
    sub_by_call: dict[str, str] = {}  # Task tool_use id -> subagent_type
    sub_by_agent: dict[str, str] = {}  # agentId -> subagent_type (from the Task result that names it)
    for d in lines:
        for b in _blocks((d.get("message") or {}).get("content") if isinstance(d.get("message"), dict) else None):
            if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("id"), str):
                calls[b["id"]] = str(b.get("name") or "tool")
                inp = b.get("input") if isinstance(b.get("input"), dict) else {}
                if isinstance(inp.get("subagent_type"), str):
                    sub_by_call[b["id"]] = inp["subagent_type"]
            if isinstance(b, dict) and b.get("type") == "tool_result" and isinstance(d.get("agentId"), str) and \
                    isinstance(b.get("tool_use_id"), str) and b["tool_use_id"] in sub_by_call and \
                    not d.get("isSidechain"):
                sub_by_agent[d["agentId"]] = sub_by_call[b["tool_use_id"]]
    steps: list[Step] = []
    question, last_msg = None, None
    only_side = all(d.get("isSidechain") is True for d in lines if d.get("type") in ("user", "assistant"))
    meta: dict[str, Any] = {"format": "claude-code"}
    for d in lines:
        if d.get("type") == "summary":
            if isinstance(d.get("summary"), str):  # a file's summaries go to each of its sessions: bounded copies
                said = meta.setdefault("summaries", [])
                if len(said) < MAX_SUMMARIES:
                    said.append(d["summary"][:MAX_SUMMARY_CHARS])
                else:
                    meta["summaries_not_kept"] = meta.get("summaries_not_kept", 0) + 1
            continue
        msg = d.get("message") if isinstance(d.get("message"), dict) else None
        if msg is None or d.get("isMeta"):
            continue
        for k in ("version", "gitBranch"):
            if isinstance(d.get(k), str) and d[k]:
                meta[k] = d[k]
        side = bool(d.get("isSidechain"))
        agent = (sub_by_agent.get(d.get("agentId")) or "subagent") if side else MAIN
        when = parse_time(d.get("timestamp"))
        if d.get("type") == "assistant":
            text = join(*(_assistant_block(b) for b in _blocks(msg.get("content"))))
            if not text:
                continue
            if steps and msg.get("id") and msg.get("id") == last_msg and steps[-1].agent == agent:
                steps[-1].content = join(steps[-1].content, text)  # blocks of one message: one step
                continue
            last_msg = msg.get("id")
            steps.append(Step(index=len(steps), agent=agent, content=text, role="assistant", kind="message",
                              span_id=d.get("uuid"), start_time=when))
            continue
        last_msg = None
        for b in _blocks(msg.get("content")):
            if isinstance(b, dict) and b.get("type") == "tool_result":
                tool = calls.get(b.get("tool_use_id"), "tool") if isinstance(b.get("tool_use_id"), str) else "tool"
                text, err = _result_text(b)
                if not text and steps and steps[-1].role == "assistant":
                    steps[-1].content = join(steps[-1].content, f"Tool result {tool}: (empty)")
                    continue
                steps.append(Step(index=len(steps), agent=tool, content=text or "(empty result)", role="tool",
                                  kind="tool", span_id=d.get("uuid"), start_time=when, error=err))
            else:
                text = content_text([b]).strip()
                if not text:
                    continue
                role = "system" if d.get("type") == "system" else "user"
                who = ("system" if role == "system" else MAIN if side else "user")
                if role == "user" and question is None and (not side or only_side):
                    question = text  # a sub-agent's own transcript: its task is the prompt it was given
                steps.append(Step(index=len(steps), agent=who, content=text, role=role, kind="message",
                                  span_id=d.get("uuid"), start_time=when))
    if not steps:
        raise IngestError("empty_trace", "no user prompts, assistant turns or tool results in the session", tid)
    return Trace(trace_id=tid, source="claude-code", system="claude-code", question=question, steps=steps,
                 labels=None, metadata=meta)


def _assistant_block(b: Any) -> str:
    if not isinstance(b, dict):
        return content_text(b)
    if b.get("type") == "tool_use":
        return tool_call_line({"name": b.get("name"), "arguments": b.get("input")})
    if b.get("type") in ("thinking", "redacted_thinking"):
        t = b.get("thinking")
        return f"Reasoning: {t}" if isinstance(t, str) and t.strip() else ""
    return content_text([b]).strip()


def _trace_id(sid: str, lines: list[dict]) -> str:
    """A sub-agent's own transcript (`agent-<id>.jsonl`: every turn a sidechain of one agentId) carries its parent's
    sessionId: it is trace `<sessionId>/agent-<agentId>`, so it never collides with the parent session's trace."""
    turns = [d for d in lines if d.get("type") in ("user", "assistant")]
    agents = {d.get("agentId") for d in turns}
    if turns and all(d.get("isSidechain") is True for d in turns) and len(agents) == 1:
        agent = next(iter(agents))
        if isinstance(agent, str) and agent:
            return f"{sid}/agent-{agent}"
    return sid


def parse_lines(docs: list, ctx: Context) -> Iterator[Trace]:
    """The lines of one transcript file, one trace per `sessionId` (a line of another shape is rejected alone;
    auxiliary lines are skipped by their `type`, counted in each trace's metadata `skipped_lines`)."""
    sessions: dict[str, list[dict]] = {}
    skipped: dict[str, int] = {}
    for i, d in enumerate(docs):
        t = d.get("type") if isinstance(d, dict) else None
        sid = d.get("sessionId") if isinstance(d, dict) else None
        if isinstance(t, str) and (t in AUXILIARY or t not in LINE_TYPES and isinstance(sid, str)):
            # by name: a snapshot, progress, queue line, ...; a file of thousands of made-up types names the
            # first MAX_SKIPPED_TYPES (the count is copied into every session's metadata: bounded)
            name = t[:64] if t[:64] in skipped or len(skipped) < MAX_SKIPPED_TYPES else OTHER_TYPES
            skipped[name] = skipped.get(name, 0) + 1
            continue
        if not is_line(d) or sid is not None and not isinstance(sid, str):
            ctx.reject(IngestError("invalid_record", f"not a Claude Code transcript line (needs a string 'type' in "
                                   f"{sorted(LINE_TYPES)} and a string 'sessionId'): {short(d, 120)}",
                                   f"record {i + 1}"))
            continue
        bad = next((k for k in _ID_KEYS if d.get(k) is not None and not isinstance(d[k], str)), None)
        if bad is not None:  # an id of another type costs its own line, not the session it would be keyed into
            ctx.reject(IngestError("invalid_record", f"Claude Code line: '{bad}' must be a string, got "
                                   f"{short(d[bad], 60)}", f"record {i + 1}"))
            continue
        sessions.setdefault(sid if sid else f"claude-code/{base_name(ctx.input_path)}", []).append(d)
    summaries = sessions.pop(f"claude-code/{base_name(ctx.input_path)}", None) if len(sessions) > 1 else None
    for sid, lines in sessions.items():
        try:
            tr = _session(lines + (summaries or []), check_trace_id(_trace_id(sid, lines)))
        except IngestError as e:
            e.record_id = e.record_id or short(sid, 200)
            ctx.reject(e)
            continue
        except Exception as e:  # noqa: BLE001 - a value of an unexpected type costs its session, not the file
            ctx.reject(IngestError("invalid_record", f"session could not be read: {type(e).__name__}: "
                                   f"{short(str(e), 200)}", short(sid, 200)))
            continue
        if skipped:
            tr.metadata["skipped_lines"] = dict(skipped)
        yield tr
    if not sessions:
        raise IngestError("empty_trace", f"no Claude Code session lines among {len(docs)} records"
                          + (f" (skipped by type: {skipped})" if skipped else ""))
