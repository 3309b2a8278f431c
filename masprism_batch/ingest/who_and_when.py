"""Who&When (ICML 2025) failure logs: one JSON object per file, `history` is the list of steps.

- trace_id: the file's path without its suffix, `<parent folder>/<file stem>`, with more leading folders only
  where two input files would share it (sources.path_ids): the benchmark's `Algorithm-Generated/0`, and
  `team-a/x/0` / `team-b/x/0` for two folders holding the same names.
- System identity is never guessed from the content: a log is the benchmark's only when it sits in
  the benchmark's own folder (`Algorithm-Generated` -> source `who-and-when/Algorithm-Generated`, system
  CaptainAgent; `Hand-Crafted` -> Magentic-One). Any other log in this shape is source `who-and-when`, system
  null: the user names it (`--system`), and until then it gets the zero-training verdict, never a ranker fitted
  on a benchmark system.
- step i = history[i] (so the 0-based `mistake_step` indexes steps directly), kind `message`, role as logged;
  agent = `name` where the message has one, else `role` without its parenthesised suffix
  (`Orchestrator (-> WebSurfer)` -> `Orchestrator`); in the Hand-Crafted folder always the role, as published.
- Ground truth (`mistake_*`, `ground_truth`, `is_correct*`, `labels`, `mistake_type`) goes to `labels` or
  nowhere: metadata keeps only question_ID, level and the `system_prompt` map.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from masprism_batch.ingest.common import Context, IngestError, short
from masprism_batch.ingest.sources import base_name
from masprism_batch.ingest.validate import text_or_none
from masprism_batch.trace import Labels, Step, Trace

SUBSETS = {"Algorithm-Generated": "CaptainAgent", "Hand-Crafted": "Magentic-One"}
_SUFFIX = re.compile(r"\s*\([^()]*\)\s*$")


def agent_of_role(role: str | None) -> str | None:
    """'Orchestrator (thought)' -> 'Orchestrator'; plain roles unchanged."""
    return _SUFFIX.sub("", role) if role else role


def _subset(path: str) -> str | None:
    """The benchmark subset whose folder holds the file, else None (the content says nothing about the system)."""
    parent = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return parent if parent in SUBSETS else None


def trace_id(ctx: Context) -> str:
    """`ctx.path_id` (unique over the input); `<parent>/<stem>` when the adapter is called on one file alone."""
    if ctx.path_id:
        return ctx.path_id
    parent = os.path.basename(os.path.dirname(os.path.abspath(ctx.input_path)))
    return f"{parent}/{base_name(ctx.input_path)}" if parent else base_name(ctx.input_path)


def _labels(doc: dict[str, Any], n_steps: int, tid: str, ctx: Context) -> Labels | None:
    if "mistake_step" not in doc and "mistake_agent" not in doc:
        return None
    agent = doc.get("mistake_agent")
    if agent is not None and not isinstance(agent, str):
        ctx.warn("invalid_label", f"mistake_agent is {type(agent).__name__}, not a string; dropped", tid)
        agent = None
    raw, step = doc.get("mistake_step"), None
    if raw is not None:
        try:
            step = int(str(raw).strip()) if not isinstance(raw, (bool, float)) else None
        except ValueError:
            step = None
        if step is None or not 0 <= step < n_steps:
            ctx.warn("invalid_label", f"mistake_step {short(raw)} is not a step index in [0, {n_steps}); "
                     "kept the trace with mistake_step null", tid)
            step = None
    return Labels(mistake_step=step, mistake_agent=agent)


def parse(doc: Any, ctx: Context) -> Iterator[Trace]:
    if not isinstance(doc, dict):
        raise IngestError("invalid_record", f"Who&When record must be a JSON object, got {type(doc).__name__}")
    subset = _subset(ctx.input_path)
    tid = trace_id(ctx)
    hist = doc.get("history")
    if not isinstance(hist, list):
        raise IngestError("invalid_record", f"'history' must be a list, got {type(hist).__name__}", tid)
    if not hist:
        raise IngestError("empty_history", "'history' is empty", tid)
    hand = subset == "Hand-Crafted"
    steps = []
    for i, m in enumerate(hist):
        if not isinstance(m, dict):
            raise IngestError("invalid_record", f"history[{i}] must be an object, got {type(m).__name__}", tid)
        content = m.get("content")
        if not isinstance(content, str):
            raise IngestError("invalid_record", f"history[{i}].content must be a string, got "
                              f"{type(content).__name__}", tid)
        try:
            role, name = text_or_none(m.get("role")), text_or_none(m.get("name"))
        except TypeError as e:
            raise IngestError("invalid_record", f"history[{i}]: {e}", tid) from None
        agent = agent_of_role(role) if hand else (name or agent_of_role(role))
        steps.append(Step(index=i, agent=agent, content=content, role=role, kind="message"))
    question = doc.get("question")
    meta: dict[str, Any] = {"subset": subset} if subset else {}
    for k in ("question_ID", "level"):
        if isinstance(doc.get(k), (str, int)) and not isinstance(doc.get(k), bool):
            meta[k] = doc[k]
    if isinstance(doc.get("system_prompt"), dict):
        meta["system_prompt"] = {str(k): v for k, v in doc["system_prompt"].items() if isinstance(v, str)}
    yield Trace(trace_id=tid, source=f"who-and-when/{subset}" if subset else "who-and-when",
                system=SUBSETS.get(subset or ""),
                question=question if isinstance(question, str) else None, steps=steps,
                labels=_labels(doc, len(steps), tid, ctx), metadata=meta,
                run_status="failed")  # the data set holds failed runs only
