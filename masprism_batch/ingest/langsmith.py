"""LangSmith / LangChain run trees, which is also what LangGraph applications export (`--format langsmith`,
alias `langgraph`).

A run (LangSmith "run data format"): `id`, `name`, `run_type` (`llm` | `chain` | `tool` | `retriever` |
`prompt` | `parser` | `embedding`), `start_time`, `end_time`, `inputs`, `outputs`, `error`, `extra`
(`extra.metadata.langgraph_node` on LangGraph runs), `parent_run_id`, `trace_id`, `dotted_order`, and, when
read with its children, `child_runs`. Accepted shapes: one root run with nested `child_runs`; a list of
runs (flat with `parent_run_id`, nested, or both); `{"runs": [...]}` (the runs query API); JSON lines with
one run per line. Runs are grouped into traces by `trace_id` (else the root's `id`).

Steps: `llm` runs (kind `llm`: the generated message, its tool calls, the error if any) and `tool` /
`retriever` runs (kind `tool`: name, input, output, error), ordered by `start_time`, ties by tree position.
agent = the run's LangGraph node (`langgraph_node`; in a graph of subgraphs the top-level node, from
`langgraph_checkpoint_ns`), else the nearest enclosing LangGraph node (a chain run named as its own
`langgraph_node`), else the root run's name. source `langsmith`, system = the root run's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from masprism_batch.ingest import status
from masprism_batch.ingest.common import Context, IngestError, check_trace_id, request_id, short
from masprism_batch.ingest.context import input_messages, with_context
from masprism_batch.ingest.envelopes import output_text
from masprism_batch.ingest.messages import content_text, dumps, join, question_of, tool_calls_text
from masprism_batch.ingest.spantree import Node, build_steps, parse_time
from masprism_batch.trace import Trace

RUN_TYPES = {"llm", "chain", "tool", "retriever", "prompt", "parser", "embedding"}
MAX_TEXT = 200_000  # characters kept of one dumped input/output object


def is_run(d: Any) -> bool:
    return isinstance(d, dict) and d.get("run_type") in RUN_TYPES and "id" in d


def _meta(run: dict) -> dict:
    extra = run.get("extra") if isinstance(run.get("extra"), dict) else {}
    meta = extra.get("metadata") if isinstance(extra.get("metadata"), dict) else {}
    return meta or (run.get("metadata") if isinstance(run.get("metadata"), dict) else {})


def _message_text(msg: Any) -> str:
    """A LangChain message (serialised `{"lc": 1, "kwargs": {...}}`, `{"type", "data"}`) or an OpenAI message."""
    if not isinstance(msg, dict):
        return content_text(msg)
    kw = msg.get("kwargs") if isinstance(msg.get("kwargs"), dict) else msg.get("data") if isinstance(
        msg.get("data"), dict) else msg
    extra = kw.get("additional_kwargs") if isinstance(kw.get("additional_kwargs"), dict) else {}
    return join(content_text(kw.get("content")), tool_calls_text(kw.get("tool_calls") or extra.get("tool_calls")))


def _bounded(v: Any) -> str:
    s = v if isinstance(v, str) else dumps(v)
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + "…"


def _llm_text(outputs: Any) -> str:
    if not isinstance(outputs, dict):
        return content_text(outputs)
    gens = outputs.get("generations")
    if isinstance(gens, list):
        texts = []
        for g in (gens[0] if gens and isinstance(gens[0], list) else gens):
            if isinstance(g, dict):
                texts.append(_message_text(g["message"]) if isinstance(g.get("message"), dict)
                             else content_text(g.get("text")))
        return "\n".join(t for t in texts if t)
    choices = outputs.get("choices")  # runs traced with wrap_openai / @traceable keep the API response
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return _message_text(choices[0].get("message") or {"content": choices[0].get("text")})
    for k in ("output", "message", "messages"):
        if k in outputs:
            v = outputs[k]
            if isinstance(v, list) and v:
                v = v[-1]
            return _message_text(v) if isinstance(v, dict) else content_text(v)
    return _bounded(output_text(outputs))  # other envelopes (Responses, Gemini, ...) without usage or ids


def _tool_text(run: dict) -> str:
    parts = [f"Tool: {run.get('name') or '?'}"]
    inp, out = run.get("inputs"), run.get("outputs")
    if inp is not None:
        v = inp.get("input", inp) if isinstance(inp, dict) and len(inp) == 1 else inp
        parts.append(f"Input: {_bounded(v)}")
    if out is not None:
        v = out.get("output", out) if isinstance(out, dict) and "output" in out else out
        parts.append(f"Output: {_message_text(v) if isinstance(v, dict) and ('kwargs' in v or 'content' in v) else _bounded(v)}")
    return "\n".join(parts)


def _flatten(roots: list, record: str | None, ctx: Context | None = None,
             where_of: Callable[[int], str] | None = None) -> list[tuple[dict, str | None]]:
    """(run, parent id) of every run, nested `child_runs` included, without recursion. With `ctx`, a top-level
    run holding anything that is not a run (a list for a `run_type`, ...) is rejected alone, with the runs
    nested in it (one record, one row); without, it raises."""
    out: list[tuple[dict, str | None]] = []
    for i, root in enumerate(roots):
        try:
            out.extend(_tree(root, f"runs[{i}]", record))
        except IngestError as e:
            if ctx is None:
                raise
            rid = root.get("id") if isinstance(root, dict) else None
            ctx.reject_any(e, where_of(i) if where_of else short(rid, 200)[1:-1] if isinstance(rid, str) else
                           e.record_id or f"runs[{i}]")
    return out


def _tree(root: Any, at: str, record: str | None) -> list[tuple[dict, str | None]]:
    out: list[tuple[dict, str | None]] = []
    stack = [(root, None, at)]
    while stack:
        run, parent, where = stack.pop()
        if not isinstance(run, dict):
            raise IngestError("invalid_record", f"{where} must be a run object, got {type(run).__name__}", record)
        if run.get("id") in (None, "") or not isinstance(run.get("run_type"), str):
            raise IngestError("invalid_record", f"{where} is not a LangSmith run (needs 'id' and 'run_type' text); "
                              f"keys: {sorted(map(str, run))[:8]}", record)
        pid = run.get("parent_run_id") or parent
        out.append((run, str(pid) if pid is not None else None))
        kids = run.get("child_runs") or []
        if not isinstance(kids, list):
            raise IngestError("invalid_record", f"{where}.child_runs must be a list", record)
        stack.extend((k, str(run["id"]), f"{where}.child_runs[{j}]") for j, k in reversed(list(enumerate(kids))))
    return out


def _graph_agent(meta: dict) -> str | None:
    """The LangGraph node a run belongs to. In a graph of subgraphs (supervisor / multi-agent) the top-level
    node is the agent: `langgraph_checkpoint_ns` is `outer:<id>|inner:<id>`, its first name wins."""
    ns = meta.get("langgraph_checkpoint_ns")
    if isinstance(ns, str) and "|" in ns:
        top = ns.split("|", 1)[0].split(":", 1)[0]
        if top and not top.startswith("__"):
            return top
    node = meta.get("langgraph_node")
    return node if isinstance(node, str) else None


def _node(run: dict, parent: str | None) -> Node:
    rt = run["run_type"]
    meta = _meta(run)
    lg = _graph_agent(meta)
    name = run.get("name") if isinstance(run.get("name"), str) else None
    err = status.error_text(run["error"]) if isinstance(run.get("error"), str) and run["error"].strip() else ""
    n = Node(id=str(run["id"]), parent=parent, name=name, start=parse_time(run.get("start_time")), error=err)
    if rt == "llm":
        n.kind, n.role, n.content = "LLM", "assistant", join(_llm_text(run.get("outputs")), err)
        n.agent_name = lg
    elif rt in ("tool", "retriever"):
        n.kind, n.role, n.content = "TOOL", "tool", join(_tool_text(run), err)
        n.agent_name = lg
    elif meta.get("langgraph_node") == name and name is not None and not name.startswith("__"):
        n.kind, n.agent_name = "AGENT", name
    elif parent is None:
        n.kind, n.agent_name = "AGENT", name
    else:
        n.kind = rt.upper()
    return n


def parse_runs(runs: list, ctx: Context, record: str | None = None,
               where_of: Callable[[int], str] | None = None) -> Iterator[Trace]:
    """Every run of one input (file or JSON lines), grouped into traces; a run that is not one costs itself."""
    flat = _flatten(runs, record, ctx, where_of)
    if not flat:
        if ctx.rejected:
            return
        raise IngestError("empty_trace", "no runs in the LangSmith export", record)
    by_id = {str(r["id"]): r for r, _ in flat}
    parent_of = {str(r["id"]): p for r, p in flat}
    groups: dict[str, list[tuple[dict, str | None]]] = {}
    for run, pid in flat:
        tid = run.get("trace_id")
        if tid is None:  # climb to the root (bounded: a cycle is cut at the number of runs)
            cur, hops = str(run["id"]), 0
            while hops <= len(flat) and parent_of.get(cur) in by_id:
                cur, hops = parent_of[cur], hops + 1
            tid = by_id[cur].get("trace_id") or cur
        groups.setdefault(str(tid), []).append((run, pid))
    for raw_tid, members in groups.items():
        try:
            tid = check_trace_id(raw_tid)
            nodes = [_node(r, p) for r, p in members]
            ins = {str(r["id"]): input_messages(r.get("inputs")) for r, _ in members if r.get("run_type") == "llm"}
            roots = [r for r, p in members if p is None or p not in by_id]
            root = roots[0] if roots else members[0][0]
            steps, facts = build_steps(nodes, tid)
            if not steps:
                raise IngestError("empty_trace", f"no llm or tool runs among {len(nodes)} runs", tid)
            if facts["n_duplicate_spans_dropped"]:
                ctx.warn("duplicate_span", f"{facts['n_duplicate_spans_dropped']} exact copies of runs dropped", tid)
            system = root.get("name") if isinstance(root.get("name"), str) else None
            facts["format"] = "langsmith"
            if scores := status.recorded_scores(root):  # its feedback: `--outcome-name` reads it
                facts["scores"] = scores
            task = question_of(root.get("inputs"))
            steps, question = with_context(steps, ins, task, task_step=task is not None)
            yield Trace(trace_id=tid, source="langsmith", system=system, question=question,
                        steps=steps, labels=None, metadata=facts,
                        run_status=status.of_langsmith((r for r, _ in members), root))
        except Exception as e:  # noqa: BLE001 - any failure is this trace's rejection, the file goes on
            ctx.reject_any(e, short(raw_tid, 200))


def parse_lines(docs: list, ctx: Context) -> Iterator[Trace]:
    """JSON lines: one run (or `{"runs": [...]}`) per line; a line that is neither is rejected alone."""
    runs: list = []
    line_of: list[int] = []  # the record each run came from, to name it in a rejection
    for i, d in enumerate(docs):
        if isinstance(d, dict) and isinstance(d.get("runs"), list):
            runs.extend(d["runs"])
            line_of.extend([i] * len(d["runs"]))
        elif is_run(d):
            runs.append(d)
            line_of.append(i)
        else:
            ctx.reject(IngestError("invalid_record", f"not a LangSmith run (needs 'id' and 'run_type'): "
                                   f"{short(d, 120)}", request_id(ctx, i).replace("request", "record")))
    if runs:
        yield from parse_runs(runs, ctx, where_of=lambda k: request_id(ctx, line_of[k]).replace("request", "record"))


def is_batch(d: Any) -> bool:
    """A batch-ingest payload (`POST /runs/batch`, the SDKs' test data): `{"post": [runs], "patch": [updates]}`."""
    return isinstance(d, dict) and isinstance(d.get("post", d.get("patch")), list) and set(d) <= {"post", "patch"}


def _run_id(r: dict) -> str | None:
    if r.get("id") not in (None, ""):
        return str(r["id"])
    dotted = r.get("dotted_order")  # "<time>Z<root id>.<time>Z<run id>": the run's own id is last
    if isinstance(dotted, str) and "Z" in dotted:
        return dotted.rsplit(".", 1)[-1].split("Z", 1)[-1] or None
    return None


def merge_batch(doc: dict) -> list[dict]:
    """The runs of a batch payload, each patch merged into its post by run id (`id`, else `dotted_order`)."""
    runs: dict[str, dict] = {}
    for key in ("post", "patch"):
        items = doc.get(key) or []
        if not isinstance(items, list):
            raise IngestError("invalid_record", f"'{key}' must be a list of runs, got {type(items).__name__}")
        for i, r in enumerate(items):
            if not isinstance(r, dict):
                raise IngestError("invalid_record", f"{key}[{i}] must be a run object, got {type(r).__name__}")
            rid = _run_id(r)
            if rid is None:
                raise IngestError("invalid_record", f"{key}[{i}].id is missing (and no dotted_order to take it from)")
            run = runs.setdefault(rid, {"id": rid})
            run.update({k: v for k, v in r.items() if v is not None})
    for rid, run in runs.items():
        if not isinstance(run.get("run_type"), str):
            raise IngestError("invalid_record", f"run {short(rid)}: run_type is missing from its post and patch")
    return list(runs.values())


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    if is_batch(doc):
        doc = merge_batch(doc)
    if isinstance(doc, dict) and isinstance(doc.get("runs"), list):
        doc = doc["runs"]
    if isinstance(doc, dict):
        doc = [doc]
    if not isinstance(doc, list):
        raise IngestError("invalid_record", f"a LangSmith export is a run, a list of runs or {{'runs': [...]}}, "
                          f"got {type(doc).__name__}")
    yield from parse_runs(doc, ctx)
