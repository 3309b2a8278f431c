"""Pass 1 render: the one place in the call graph where a trace becomes its pass-1 prompt(s).

Planning (pipelines' CPU stage) calls `render_traces` once per trace and packs by the result; the model stage
(`stage.attribute.attribute_traces`) takes the result and never renders pass 1 again. `attribute_traces` called without
pre-rendered input (a library caller, a benchmark) calls the same `render_traces`, so there is still one site.

The render config is the model stage's: `max_context` clamped to the model's context (`render_config`), which
planning reads from the model's config without loading weights (`model.model_context`).

Across a process border (Ray) a render travels as one Arrow row (`to_row` / `from_row`, schema `RENDERED`):
token ids, step spans and the render decisions (per-step truncation and budget, and for windows every window's
ids, step ids and offsets). The rendered text is not shipped: nothing downstream of pass 1 reads it.
"""

from __future__ import annotations

import pyarrow as pa

from masprism_batch.config import PipelineConfig, RenderConfig
from masprism_batch.render import prompt as render
from masprism_batch.render import windows
from masprism_batch.schema import error_row
from masprism_batch.trace import Trace

Pass1 = render.Rendered | windows.Windowed

_SPANS = pa.list_(pa.list_(pa.int64(), 2))
_WINDOW = pa.struct([("input_ids", pa.list_(pa.int32())), ("sids", pa.list_(pa.int32())), ("n_steps", pa.int64()),
                     ("full_start", pa.int64()), ("full_end", pa.int64()), ("offset", pa.int64()),
                     ("steps", pa.list_(pa.int32()))])  # local step id -> log step (windows.Window)
RENDERED = pa.schema([
    ("trace_id", pa.string()),
    ("error_reason", pa.string()), ("error_message", pa.string()),  # set: not rendered, other columns null
    ("input_ids", pa.list_(pa.int32())), ("step_spans", _SPANS), ("step_truncated", pa.list_(pa.bool_())),
    ("step_content_tokens", pa.list_(pa.int64())), ("budget", pa.int64()), ("key_budget", pa.int64()),
    ("content_spans", _SPANS),
    ("windows", pa.list_(_WINDOW)), ("head_len", pa.int64()),  # null windows: one prompt (render.pass1 truncate)
])


def render_config(cfg: PipelineConfig, model_context: int) -> RenderConfig:
    """The render config of the model stage: no prompt longer than the model can read."""
    return cfg.render.model_copy(update={"max_context": min(cfg.render.max_context, model_context)})


def render_one(trace: Trace, tokenizer, rcfg: RenderConfig) -> Pass1:
    """THE pass-1 render (windows over the whole log, or one truncated prompt, per `rcfg.pass1`)."""
    if rcfg.pass1 == "windows":
        return windows.render_windows(trace, tokenizer, rcfg)
    return render.render_pass1(trace, tokenizer, rcfg)


def render_traces(traces: list[Trace], tokenizer, rcfg: RenderConfig) -> list[Pass1 | dict]:
    """Per trace, its render or the error row that rejects it (empty trace, too long for the context)."""
    out: list[Pass1 | dict] = []
    for t in traces:
        if not t.steps:
            out.append(error_row(record_id=t.trace_id, stage="render", reason="empty_trace",
                                 message="trace has no steps"))
            continue
        try:
            out.append(render_one(t, tokenizer, rcfg))
        except (render.TraceTooLong, ValueError) as exc:
            out.append(error_row(record_id=t.trace_id, stage="render",
                                 reason=getattr(exc, "reason", "trace_too_long"), message=str(exc)))
    return out


def n_tokens(r: Pass1 | dict) -> int:
    """Tokens the model stage will prefill for this trace (a rejected trace costs nothing)."""
    return 0 if isinstance(r, dict) else len(r.input_ids)


def to_row(trace_id: str, r: Pass1 | dict) -> dict:
    if isinstance(r, dict):
        return {"trace_id": trace_id, "error_reason": r["reason"], "error_message": r["message"]}
    full = r.full if isinstance(r, windows.Windowed) else r
    row = {"trace_id": trace_id, "input_ids": full.input_ids, "step_spans": [list(s) for s in full.step_spans],
           "step_truncated": full.step_truncated, "step_content_tokens": full.step_content_tokens,
           "budget": full.budget, "key_budget": full.key_budget,
           "content_spans": [list(s) for s in full.content_spans]}
    if isinstance(r, windows.Windowed):
        row["windows"] = [vars(w) for w in r.windows]
        row["head_len"] = r.head_len
    return row


def from_row(row: dict) -> Pass1 | dict:
    if row.get("error_reason") is not None:
        return error_row(record_id=row["trace_id"], stage="render", reason=row["error_reason"],
                         message=row["error_message"])
    full = render.Rendered(input_ids=list(row["input_ids"]), step_spans=[tuple(s) for s in row["step_spans"]],
                           step_truncated=list(row["step_truncated"]), text="",
                           step_content_tokens=list(row["step_content_tokens"] or []), budget=row["budget"],
                           key_budget=row["key_budget"], content_spans=[tuple(s) for s in row["content_spans"] or []])
    if row.get("windows") is None:
        return full
    return windows.Windowed(full=full, windows=[windows.Window(**w) for w in row["windows"]],
                            head_len=row["head_len"])
