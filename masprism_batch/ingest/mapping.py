"""A way in for formats ingest does not know: a small declarative mapping (`ingest --map mapping.toml`) that says
where the traces and steps are in each JSON document (or JSON line) and where each step's agent, content, tool
calls and tool result are, by JSON path. docs/formats.md shows it on two real formats.

    source = "my-tool"          # the traces' `source` (required)
    traces = "$.runs[*]"        # where the traces are (default: the document is one trace)
    trace_id = "$.id"           # per trace (default: <source>/<file stem>#<n>)
    question = "$.task"         # per trace: the run's task
    steps = "$.events[*]"       # per trace (required)
    [step]                      # per step, all optional
    agent = "$.actor"
    role = "$.role"
    content = "$.text"
    tool_calls = "$.calls[*]"   # each written `Tool call: name(arguments)`
    tool_name = "$.name"        # per tool call
    tool_args = "$.arguments"   # per tool call
    result = "$.output"         # a tool result carried by the step

Paths: `$` (the current object), then `.key`, `["key"]`, `[n]` (negative from the end) and `[*]` (every item).
A path that finds nothing gives nothing; a mapping that does not parse is refused before anything is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from masprism_batch.ingest.caps import clean_name
from masprism_batch.ingest.common import LIMITS, Context, IngestError, check_trace_id
from masprism_batch.ingest.envelopes import value_text
from masprism_batch.ingest.messages import join, tool_call_line
from masprism_batch.ingest.sources import base_name
from masprism_batch.trace import Step, Trace

_TOKEN = re.compile(r"\.([A-Za-z_][\w\-]*)|\[\s*(\*|-?\d+|\"[^\"]*\"|'[^']*')\s*\]")
MAX_INDEX_DIGITS = 18  # a list position; longer is no list here (and int() refuses past 4,300 digits)
STEP_KEYS = ("agent", "role", "content", "tool_calls", "tool_name", "tool_args", "result")


def compile_path(p: Any, what: str) -> tuple:
    if not isinstance(p, str) or not p.startswith("$"):
        raise ValueError(f"{what}: a JSON path starting with '$' is needed, got {p!r}")
    out, i = [], 1
    while i < len(p):
        m = _TOKEN.match(p, i)
        if m is None:
            raise ValueError(f"{what}: cannot read {p!r} at character {i} (use .key, [\"key\"], [n] or [*])")
        key, idx = m.group(1), m.group(2)
        if idx is not None and idx[0] not in "\"'*" and len(idx.lstrip("-")) > MAX_INDEX_DIGITS:
            raise ValueError(f"{what}: index {idx[:20]}… ({len(idx)} characters) in {p[:60]!r} is not a list "
                             f"position (at most {MAX_INDEX_DIGITS} digits)")
        out.append(key if key is not None else "*" if idx == "*" else idx[1:-1] if idx[0] in "\"'" else int(idx))
        i = m.end()
    return tuple(out)


def select(doc: Any, path: tuple) -> list:
    """Every value `path` finds in `doc` (a list: `[*]` fans out), without recursion."""
    cur = [doc]
    for tok in path:
        nxt = []
        for v in cur:
            if tok == "*":
                nxt.extend(v if isinstance(v, list) else v.values() if isinstance(v, dict) else [])
            elif isinstance(tok, int):
                if isinstance(v, list) and -len(v) <= tok < len(v):
                    nxt.append(v[tok])
            elif isinstance(v, dict) and tok in v:
                nxt.append(v[tok])
        cur = nxt
    return cur


def first(doc: Any, path: tuple | None) -> Any:
    if path is None:
        return None
    got = select(doc, path)
    return got[0] if got else None


@dataclass(frozen=True)
class Mapping:
    source: str
    steps: tuple
    traces: tuple | None = None
    trace_id: tuple | None = None
    question: tuple | None = None
    step: dict[str, tuple] = field(default_factory=dict)


def load_mapping(path: str) -> Mapping:
    """A mapping file, checked whole (ValueError names the first key that does not fit)."""
    import tomllib  # Python 3.11+, like config files

    from masprism_batch import config_checks as checks

    try:
        raw = tomllib.loads(checks.read_config_file(path, "--map"))  # a regular file of bounded size
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:  # not a ValueError: would be an internal error
        raise ValueError(f"{path}: nested too deeply to be a mapping file") from None
    unknown = set(raw) - {"source", "traces", "trace_id", "question", "steps", "step"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    if not isinstance(raw.get("source"), str) or not raw["source"]:
        raise ValueError(f"{path}: 'source' (the traces' source name) is required")
    step = raw.get("step", {})
    if not isinstance(step, dict) or set(step) - set(STEP_KEYS):
        raise ValueError(f"{path}: [step] holds only {list(STEP_KEYS)}")
    try:
        opt = {k: compile_path(raw[k], k) for k in ("traces", "trace_id", "question") if k in raw}
        return Mapping(source=raw["source"], steps=compile_path(raw.get("steps"), "steps"),
                       step={k: compile_path(v, f"step.{k}") for k, v in step.items()}, **opt)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _step(s: Any, m: Mapping, i: int) -> Step:
    sp = m.step
    calls = [tool_call_line({"name": first(c, sp.get("tool_name")) or "?", "arguments": first(c, sp.get("tool_args"))})
             for c in (select(s, sp["tool_calls"]) if "tool_calls" in sp else [])]
    content = first(s, sp.get("content"))
    result = first(s, sp.get("result"))
    text = join(value_text(content) if content is not None else "", *calls,
                f"Output: {value_text(result)}" if result is not None else "")
    role, agent = first(s, sp.get("role")), first(s, sp.get("agent"))
    role = role if isinstance(role, str) else None
    return Step(index=i, agent=str(agent) if agent is not None else role or "agent", content=text, role=role,
                kind="tool" if result is not None and not calls else "message")


def parse(doc: Any, ctx: Context, m: Mapping, line: int | None = None) -> Iterator[Trace]:
    source = clean_name(m.source, LIMITS.get().max_agent_bytes)  # in every trace's id, source and system
    stem = f"{source}/{base_name(ctx.input_path)}" + (f"#{line}" if line is not None else "")
    traces = select(doc, m.traces) if m.traces is not None else [doc]
    if not traces:
        raise IngestError("empty_trace", "the mapping's 'traces' path finds nothing in this document")
    for n, t in enumerate(traces):
        where = f"traces[{n}]" + (f" of line {line}" if line is not None else "")
        try:  # one mapped trace's failure (a refused id, a value that cannot be read) is its row, the rest go on
            raw_id = first(t, m.trace_id)
            tid = check_trace_id(str(raw_id) if raw_id is not None else stem + (f"/{n}" if len(traces) > 1 else ""),
                                 where)
            steps = [_step(s, m, i) for i, s in enumerate(select(t, m.steps))]
            if not steps:
                raise IngestError("empty_trace", "the mapping's 'steps' path finds nothing in this trace", tid)
            q = first(t, m.question)
            trace = Trace(trace_id=tid, source=source, system=source, steps=steps, labels=None,
                          question=value_text(q) if q is not None else None, metadata={"format": "map"})
        except Exception as e:  # noqa: BLE001 - this trace's rejection
            if isinstance(e, IngestError) and e.record_id and e.record_id != where and e.reason == "invalid_trace_id":
                e.message = f"{where}: {e.message}"  # the id is refused: say where the trace is
            ctx.reject_any(e, where)
            continue
        yield trace
