"""CrewAI's own `output_log_file` (`Crew(output_log_file=...)`, `crewai/utilities/file_handler.py`), source
`crewai`; not its AgentOps or OTel exports (agentops.py, otel_genai.py).

Two shapes, the same entries (`task_name`, `task`, `agent`, `status` "started" | "completed", `output`; newer
versions also `error`, `level`, `tool`, `crew`, `input`, `message`, ...):
- text (`logs.txt`, the default, and any name not ending `.json`): one entry per line group,
  `YYYY-MM-DD HH:MM:SS: task_name="...", task="...", agent="...", status="started"`, values written raw (a task
  description keeps its newlines and quotes), so an entry runs until the next timestamped line;
- JSON (`*.json`): the file is rewritten as one array of `{"timestamp", "task_name", "task", "agent", "status",
  "output", ...}` on every entry.

Steps, in file order: a task handed to an agent (`started`) is one step spoken by `crew` (role user): the task
text, once per task (a task the same crew run already handed out is not repeated); its result (`completed`)
is one step of the agent (its role, as CrewAI names it) with the output. An entry with `error` (or level ERROR)
renders the error (`status.error_text`) in its step and fills `Step.error`; the run is then `failed`.
question = the first task. A file the crew appended several runs to is split: a task started again begins a new
run (trace `crewai/<file>#<n>`, which ingest turns into `crewai/<digest of the run>`: run_ids.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.common import Context, IngestError, check_trace_id, short
from masprism_batch.ingest.limits import LIMITS
from masprism_batch.ingest.messages import content_text, join
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.spantree import parse_time
from masprism_batch.trace import Step, Trace

KEYS = ("task_name", "task", "agent", "status", "output", "input", "message", "level", "crew", "flow", "tool",
        "error", "duration", "metadata")
_ENTRY = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d): (?=(?:' + "|".join(KEYS) + r')=")', re.M)
_KEY = re.compile(r'(?:^|", )(' + "|".join(KEYS) + r')="')


def is_text_log(text: str) -> bool:
    return _ENTRY.match(text.lstrip("\ufeff")[:200]) is not None


def is_json_log(doc: Any) -> bool:
    return isinstance(doc, list) and bool(doc) and isinstance(doc[0], dict) and all(
        k in doc[0] for k in ("timestamp", "agent", "status")) and ("task" in doc[0] or "task_name" in doc[0])


def _fields(body: str) -> dict[str, str]:
    """`task_name="a", task="b\nc", agent="d"` -> fields; a value runs to the next `", key="` or the end."""
    body = body.rstrip()
    marks = list(_KEY.finditer(body))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        val = body[m.end():end]
        out[m.group(1)] = val[:-1] if i + 1 == len(marks) and val.endswith('"') else val
    return out


def text_entries(text: str) -> list[dict[str, str]]:
    return list(line_entries(text.lstrip("\ufeff").splitlines(keepends=True)))


def line_entries(lines: Iterable[str]) -> Iterator[dict[str, str]]:
    """The entries of a text log from its lines, as they come: an entry runs from its timestamped line to the
    next one (memory: one entry). Text before the first entry is not an entry."""
    held: list[str] = []
    for line in lines:
        if _ENTRY.match(line):
            if held:
                yield _entry("".join(held))
            held = [line]
        elif held:
            held.append(line)
    if held:
        yield _entry("".join(held))


def _entry(text: str) -> dict[str, str]:
    m = _ENTRY.match(text)
    return {"timestamp": m.group(1), **_fields(text[m.end():])}


def _key(e: dict) -> str:
    """A task's identity within a run: its name (CrewAI writes "None" for an unnamed task), else its text."""
    name = e.get("task_name")
    return f"name:{name}" if name not in (None, "", "None") else f"text:{content_text(e.get('task')).strip()}"


def _runs(entries: Iterable[dict]) -> Iterator[list[dict]]:
    """The runs of a log as they end (memory: one run): a task the run already started starts again, the crew was
    kicked off anew."""
    run: list[dict] = []
    done: set[str] = set()
    for e in entries:
        key = _key(e)
        if e.get("status") == "started":
            if key in done and run:
                yield run
                run, done = [], set()
            done.add(key)
        run.append(e)
    if run:
        yield run


def _trace(entries: list[dict], tid: str) -> Trace:
    steps: list[Step] = []
    handed: set[str] = set()
    question, failed = None, False
    for e in entries:
        agent = str(e.get("agent") or "").strip() or "agent"
        task = content_text(e.get("task")).strip()
        when = parse_time(e.get("timestamp"))
        err_msg = e.get("error") if e.get("error") not in (None, "", "None") else (
            e.get("message") if str(e.get("level", "")).upper() == "ERROR" else None)
        err = status.error_text(content_text(err_msg)) if err_msg else ""
        failed = failed or bool(err) or str(e.get("status", "")).lower() in ("failed", "error")
        if task and _key(e) not in handed:  # the task once, when first handed out (or first seen in a result)
            handed.add(_key(e))
            question = question or task
            steps.append(Step(index=len(steps), agent="crew", content=f"Task for {agent}: {task}", role="user",
                              kind="message", start_time=when))
        if e.get("status") == "started" and e.get("output") in (None, ""):
            if err:
                steps.append(Step(index=len(steps), agent=agent, content=err, role="assistant", kind="message",
                                  start_time=when, error=err))
            continue
        out = content_text(e.get("output")).strip()
        tool = str(e.get("tool")).strip() if e.get("tool") not in (None, "", "None") else None
        text = join(f"Tool: {tool}" if tool else "", out or ("" if err else "(no output)"), err)
        steps.append(Step(index=len(steps), agent=agent, content=text, role="assistant", kind="message",
                          start_time=when, error=err or None))
    if not steps:
        raise IngestError("empty_trace", "no task entries in the CrewAI log", tid)
    crews = {str(e["crew"]) for e in entries if e.get("crew") not in (None, "", "None")}
    meta: dict[str, Any] = {"format": "crewai-output-log", "entries": len(entries)}
    return Trace(trace_id=tid, source="crewai", system=next(iter(crews)) if len(crews) == 1 else "crewai",
                 question=question, steps=steps, metadata=meta, run_status=status.FAILED if failed else status.UNKNOWN)


def _good(entries: Iterable[Any], ctx: Context) -> Iterator[dict]:
    for i, e in enumerate(entries):
        if isinstance(e, dict) and ("task" in e or "task_name" in e or "agent" in e):
            yield e
        else:
            ctx.reject(IngestError("invalid_record", f"not a CrewAI log entry: {short(e, 120)}", f"entry {i + 1}"))


def parse_entries(entries: Iterable[Any], ctx: Context) -> Iterator[Trace]:
    """Traces of a log's entries, each run as soon as it ends; a run is held until the next one starts (or the log
    ends), since its id says whether the file holds more than one (`#<n>`)."""
    stem = base_name(ctx.input_path)
    held: list[dict] | None = None
    n = 0
    for run in _runs(_good(entries, ctx)):
        n += 1
        if held is not None:
            yield from _one(held, f"crewai/{stem}#{n - 1}", ctx)
        held = run
    if held is None:
        raise IngestError("empty_trace", "no CrewAI log entries")
    yield from _one(held, f"crewai/{stem}" + (f"#{n}" if n > 1 else ""), ctx)


def _one(run: list[dict], tid: str, ctx: Context) -> Iterator[Trace]:
    try:
        yield _trace(run, check_trace_id(tid))
    except IngestError as e:
        e.record_id = e.record_id or tid
        ctx.reject(e)


def parse_text(text: str, ctx: Context) -> Iterator[Trace]:
    yield from parse_entries(text_entries(text), ctx)


def parse_lines(lines: Iterable[tuple[int, str]], ctx: Context) -> Iterator[Trace]:
    """A text log streamed line by line (`json_lines.decoded_lines`: gzip, an overlong line its own row): entries
    and runs are built as the lines come, so memory is about one run, never the whole file split into entries;
    past `max_file_bytes` (decompressed) the file ends with `file_too_large`, the runs before it kept."""
    cap = LIMITS.get().max_file_bytes

    def text() -> Iterator[str]:
        seen = 0
        for n, line in lines:
            seen += len(line)
            if seen > cap:
                raise IngestError("file_too_large", f"more than {cap} characters by line {n} (max_file_bytes): the "
                                  "runs that ended before it were read, the rest of the file was not")
            yield line.lstrip("\ufeff") if n == 1 else line

    yield from parse_entries(line_entries(text()), ctx)
