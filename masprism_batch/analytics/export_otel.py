"""The OTel export: each ranked candidate as an OTLP/JSON log record (a `gen_ai.evaluation.result` event) on the
evaluated span, the verdict's failure kind as a second event, written in OTLP requests of `OTLP_BATCH` records.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from masprism_batch.analytics import export_text as txt
from masprism_batch.analytics.export_rows import (
    ANNOTATION_NAME,
    CATEGORY_ANNOTATION,
    each_verdict,
    hex_ids,
    json_line,
    ranked,
)

OTLP_BATCH = 1000


def _kv(key: str, v: Any) -> dict:
    # OTLP/JSON AnyValue: int64 travels as a decimal string.
    if isinstance(v, bool):
        val = {"boolValue": v}
    elif isinstance(v, int):
        val = {"intValue": str(v)}
    elif isinstance(v, float):
        val = {"doubleValue": v}
    else:
        val = {"stringValue": "" if v is None else str(v)}
    return {"key": key, "value": val}


def otel_records(outdir: Path, top_k: int = 1) -> Iterator[dict[str, Any]]:
    yield from each_verdict(outdir, lambda a: _verdict_records(a, top_k), "otel")


def _verdict_records(a: dict, top_k: int) -> Iterator[dict[str, Any]]:
    """One verdict's records (built whole or skipped: `one_verdict`)."""
    when = a["attributed_at"]
    ns = str(int(when.timestamp() * 1e9)) if isinstance(when, datetime) else "0"
    for r, c in ranked(a, top_k):
        rec: dict[str, Any] = {"timeUnixNano": ns, "observedTimeUnixNano": ns, "severityNumber": 9,
                               "severityText": "INFO", "eventName": "gen_ai.evaluation.result"}
        # The event belongs on the evaluated span: ids in the hex form OTLP/JSON takes (ids.py), whatever the
        # source carried; a log whose trace id is no OTel id (a chat log) gets the id derived from it
        # (ids.export_trace_id), so every record has a trace id; a span id only where the step has one.
        tid, sid = hex_ids(a, c)
        rec["traceId"] = tid
        if sid:
            rec["spanId"] = sid
        attrs = [_kv("gen_ai.evaluation.name", ANNOTATION_NAME)]
        if txt.score(a, r) is not None:  # [0, 1]: the verdict's confidence; none for a lower candidate
            attrs.append(_kv("gen_ai.evaluation.score.value", txt.score(a, r)))
        kind = _kind_record(rec, a) if r == 1 and a.get("category") else None
        rec["attributes"] = attrs + [
            _kv("gen_ai.evaluation.score.label", txt.label(r)),
            _kv("gen_ai.evaluation.explanation", txt.explain(a, c, r)),
            _kv("masprism.trace_id", a["trace_id"]), _kv("masprism.source", a["source"]),
            _kv("masprism.step", int(c["step"])), _kv("masprism.step_agent", c["agent"]),
            _kv("masprism.span_id", c.get("span_id")), _kv("masprism.rank", r),
            _kv("masprism.raw_score", txt.raw_score(c)),
            _kv("masprism.blamed_step", int(a["pred_step"])), _kv("masprism.blamed_agent", a["pred_agent"]),
            _kv("masprism.agent_rule", txt.agent_rule(a)), _kv("masprism.verdict_by", a.get("verdict_by")),
            _kv("masprism.model_id", a["model_id"]), _kv("masprism.config_hash", a["config_hash"]),
            *_set_attributes(a)]
        yield rec
        if kind is not None:
            yield kind


def _set_attributes(a: dict) -> list[dict]:
    """The verdict's steps to read as attributes (`masprism.read_steps`: the steps best first, comma-separated);
    none in outputs written before the step set."""
    s = txt.set_fields(a)
    if not s["read_steps"]:
        return []
    return [_kv("masprism.read_steps", ",".join(map(str, s["read_steps"]))), _kv("masprism.set_size", s["set_size"]),
            _kv("masprism.set_coverage", s["set_coverage"]), _kv("masprism.set_by", s["set_by"]),
            _kv("masprism.localised", s["localised"])]


def _kind_record(rec: dict, a: dict) -> dict:
    """The OTel evaluation event of the verdict's failure kind, on the same trace/span as rank 1's."""
    out = {k: v for k, v in rec.items() if k != "attributes"}
    attrs = [_kv("gen_ai.evaluation.name", CATEGORY_ANNOTATION)]
    if a.get("category_confidence") is not None:
        attrs.append(_kv("gen_ai.evaluation.score.value", float(a["category_confidence"])))
    out["attributes"] = attrs + [
        _kv("gen_ai.evaluation.score.label", a["category"]), _kv("gen_ai.evaluation.explanation", txt.kind_text(a)),
        _kv("masprism.trace_id", a["trace_id"]), _kv("masprism.category_family", a.get("category_family")),
        _kv("masprism.category_by", a.get("category_by")), _kv("masprism.blamed_step", int(a["pred_step"]))]
    return out


def otlp_line(records: list[dict]) -> str:
    req = {"resourceLogs": [{"resource": {"attributes": [_kv("service.name", "masprism-batch")]},
                             "scopeLogs": [{"scope": {"name": "masprism_batch.analytics"}, "logRecords": records}]}]}
    return json_line(req)
