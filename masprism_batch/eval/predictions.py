"""A row's predictions as the scorers read them: ranked steps, the predicted agent and span, rows joined to
labelled traces (agent names compare by `trace.norm_agent`).

Exact match only (the original Who&When scorer's substring match counts "1" in "12" as correct).
A labelled trace without an attribution row (the pipeline failed on it) is scored as a miss by default and
counted in `n_missing`; rows without a trace and traces without labels are counted, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from masprism_batch.trace import Trace


def ranked_steps(row: dict[str, Any] | None) -> list[int]:
    """pred_step first, then the ranked candidates' steps, duplicates and nulls removed."""
    if row is None:
        return []
    seq = [row.get("pred_step")] + [c.get("step") for c in (row.get("candidates") or [])]
    out: list[int] = []
    for s in seq:
        if isinstance(s, int) and not isinstance(s, bool) and s not in out:
            out.append(s)
    return out


def step_agent(trace: Trace, row: dict[str, Any] | None, step: int) -> str | None:
    """Predicted agent for a predicted step: the row's pred_agent for its pred_step (a method may rank agents
    on their own, e.g. by summed step probabilities), else the agent the trace records for that step."""
    if row is not None and row.get("pred_step") == step and row.get("pred_agent") is not None:
        return row.get("pred_agent")
    if 0 <= step < len(trace.steps):
        return trace.steps[step].agent
    return None


def step_span(trace: Trace, row: dict[str, Any] | None, step: int) -> str | None:
    if 0 <= step < len(trace.steps) and trace.steps[step].span_id is not None:
        return trace.steps[step].span_id
    for c in (row or {}).get("candidates") or []:
        if c.get("step") == step:
            return c.get("span_id")
    return None


def index_rows(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        tid = r.get("trace_id")
        if tid in out:
            raise ValueError(f"two attribution rows for trace {tid!r}: merge or deduplicate the runs first")
        out[tid] = r
    return out
