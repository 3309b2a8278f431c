"""Span trees (OpenInference / OpenTelemetry) to ordered steps, without recursion.

Both span adapters reduce a raw span to a `Node`; this module links nodes into a tree by parent id, rejects
cycles and duplicate ids, finds each node's nearest enclosing AGENT, and orders the step nodes (LLM and
TOOL spans) by start time, ties broken by tree (pre-order) position. Every walk uses an explicit stack,
so a 5,000-deep tree costs memory, not Python stack frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from masprism_batch.ingest.common import IngestError, short
from masprism_batch.trace import Step

STEP_KINDS = {"LLM": "llm", "TOOL": "tool"}  # span kind -> Step.kind; other spans only give structure


@dataclass(slots=True)
class Node:
    id: str
    parent: str | None
    name: str | None = None
    kind: str | None = None  # LLM | TOOL | AGENT | CHAIN | ... (OpenInference span kind vocabulary)
    start: datetime | None = None
    agent_name: str | None = None  # AGENT nodes: readable agent name; on a step node it overrides the enclosing one
    content: str = ""  # LLM / TOOL nodes: the step text
    role: str | None = None
    service: str | None = None  # service.name of the emitting resource, the agent of last resort
    status: str | None = None  # the span's own status (ingest/status.py), read for Trace.run_status
    error: str = ""  # the error it records (status.error_text), already in `content` for step nodes


def parse_time(v: Any) -> datetime | None:
    """ISO-8601 text ('...Z' included) or a Unix epoch number in s/ms/us/ns (magnitude decides)."""
    if v is None or v == "":
        return None
    if isinstance(v, str):
        s = v.strip()
        if len(s) > 64:  # no time is written this long; int() of 4,300+ digits would raise
            return None
        if s.isdigit():
            v = int(s)
        else:
            try:
                t = datetime.fromisoformat(s.replace("Z", "+00:00") if s.endswith("Z") else s)
            except ValueError:
                return None
            return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            x = float(v)
        except OverflowError:  # an integer beyond any float: not a time
            return None
        scale = 1e9 if abs(x) >= 1e17 else 1e6 if abs(x) >= 1e14 else 1e3 if abs(x) >= 1e11 else 1.0
        try:
            return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=int(x / scale * 1e6))
        except (OverflowError, ValueError):
            return None
    return None


def build_steps(nodes: list[Node], trace_id: str, step_kinds: dict[str, str] | None = None,
                root_agent: Callable[[Node], str | None] | None = None) -> tuple[list[Step], dict[str, Any]]:
    """Ordered steps of one trace plus facts for its metadata (orphan spans, span count).

    `step_kinds`: node kind -> Step.kind of the nodes that become steps (default `STEP_KINDS`). `root_agent`:
    the agent a root names before any AGENT node (default: its service, else its name)."""
    step_kinds = STEP_KINDS if step_kinds is None else step_kinds
    by_id: dict[str, Node] = {}
    unique: list[Node] = []
    for n in nodes:
        first = by_id.get(n.id)
        if first is None:
            by_id[n.id] = n
            unique.append(n)
        elif first != n:  # an exact copy (seen in real TRAIL exports) is dropped; a conflicting one is fatal
            raise IngestError("duplicate_span_id", f"span id {short(n.id)} occurs twice with different content",
                              trace_id)
    dropped, nodes = len(nodes) - len(unique), unique
    children: dict[str, list[Node]] = {}
    roots: list[Node] = []
    orphans = 0
    for n in nodes:
        if n.parent is None or n.parent not in by_id:
            roots.append(n)
            orphans += n.parent is not None
        else:
            children.setdefault(n.parent, []).append(n)

    # Pre-order walk; each stack entry carries the agent that encloses the node.
    order: list[tuple[Node, str | None, int]] = []
    stack: list[tuple[Node, str | None]] = [(r, root_agent(r) if root_agent else r.service or r.name)
                                            for r in reversed(roots)]
    while stack:
        n, agent = stack.pop()
        if n.kind == "AGENT" and n.agent_name:
            agent = n.agent_name
        order.append((n, agent, len(order)))
        stack.extend((c, agent) for c in reversed(children.get(n.id, ())))
    if len(order) < len(nodes):
        seen = {n.id for n, _, _ in order}
        stuck = next(n.id for n in nodes if n.id not in seen)
        raise IngestError("span_cycle", f"{len(nodes) - len(order)} spans are in a parent-id cycle "
                          f"(e.g. span {short(stuck)}), so they are unreachable from any root", trace_id)

    picked = [(n, agent, pos) for n, agent, pos in order if n.kind in step_kinds]
    far = datetime.max.replace(tzinfo=timezone.utc)
    picked.sort(key=lambda x: (x[0].start is None, x[0].start or far, x[2]))
    steps = [Step(index=i, agent=n.agent_name or agent, content=n.content, role=n.role, kind=step_kinds[n.kind], span_id=n.id,
                  parent_span_id=n.parent, start_time=n.start, error=n.error or None)
             for i, (n, agent, _) in enumerate(picked)]
    if steps:
        attach_errors([(n, pos) for n, _, pos in order if n.error and n.kind not in step_kinds], picked, steps, children)
    return steps, {"n_spans": len(nodes), "n_orphan_spans": orphans, "n_duplicate_spans_dropped": dropped}


def attach_errors(errored: list[tuple[Node, int]], picked: list[tuple[Node, str | None, int]], steps: list[Step],
                  children: dict[str, list[Node]]) -> None:
    """The error of a span that is no step (a smolagents `Step N` CHAIN, an AGENT run) goes to the step that
    acted under it: its last step in step order, else the step just before it in the tree, else the first step.
    Its text is appended to that step's `content` (unless already there) and `error`."""
    step_of = {n.id: s for (n, _, _), s in zip(picked, steps, strict=True)}
    by_pos = sorted((pos, s) for (_, _, pos), s in zip(picked, steps, strict=True))
    for node, pos in errored:
        inside, stack = [], list(children.get(node.id, ()))
        while stack:
            c = stack.pop()
            if c.id in step_of:
                inside.append(step_of[c.id])
            stack.extend(children.get(c.id, ()))
        if inside:
            target = max(inside, key=lambda s: s.index)
        else:
            before = [s for p, s in by_pos if p < pos]
            target = before[-1] if before else steps[0]
        if node.error not in target.content:
            target.content = f"{target.content}\n{node.error}" if target.content else node.error
            target.error = f"{target.error}\n{node.error}" if target.error else node.error
