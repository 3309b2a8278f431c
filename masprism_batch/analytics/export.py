"""`export`: attributions in the formats of existing tools.

Every format names the run's verdict as `attributions` holds it: rank 1 is `pred_step` and the blamed agent is
`pred_agent` (chosen by `pred_agent_rule`; it may differ from the step's author under the "aggregate" rule);
nothing here re-derives either.

- phoenix: Arize Phoenix span annotations, one row per (trace, candidate rank <= top_k) whose step has a span
  id: span_id, name, annotator_kind (CODE), label, score, explanation, metadata (a struct, read by pandas as
  a dict). Parquet when FILE ends in .parquet, else JSON lines; load with pandas and pass the frame to
  `phoenix.client.Client().spans.log_span_annotations_dataframe(dataframe=df)`. Traces whose candidate steps
  carry no span id (chat logs: AG2, OpenAI, Who&When) get one Phoenix *trace* annotation each instead, in a
  second file beside FILE (`<stem>.trace_annotations<suffix>`): trace_id, name, annotator_kind, label, score,
  explanation (the top-k steps and agents), metadata.
- otel: OpenTelemetry `gen_ai.evaluation.result` events as OTLP/JSON log records, one
  ExportLogsServiceRequest per line (the Collector's otlpjsonfile receiver format), one record per blamed step.
- jsonl: one JSON object per trace keyed by `custom_id` (= trace_id), read back with `read_jsonl`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import io
from . import load

log = logging.getLogger(__name__)
FORMATS = ("phoenix", "otel", "jsonl")
ANNOTATION_NAME = "masprism_failure_attribution"
_HEX32, _HEX16 = re.compile(r"^[0-9a-f]{32}$"), re.compile(r"^[0-9a-f]{16}$")
_OTLP_BATCH = 1000

# step/step_agent: the annotated step and its author; blamed_step/blamed_agent: the trace's verdict
# (attributions.pred_step / pred_agent), agent_rule: how the agent was chosen (attributions.pred_agent_rule).
_META_TYPE = pa.struct([("trace_id", pa.string()), ("source", pa.string()), ("step", pa.int32()),
                        ("step_agent", pa.string()), ("rank", pa.int32()), ("n_candidates", pa.int32()),
                        ("blamed_step", pa.int32()), ("blamed_agent", pa.string()), ("agent_rule", pa.string()),
                        ("model_id", pa.string()), ("config_hash", pa.string())])
PHOENIX_SCHEMA = pa.schema([
    ("span_id", pa.string()), ("name", pa.string()), ("annotator_kind", pa.string()), ("label", pa.string()),
    ("score", pa.float64()), ("explanation", pa.large_string()),
    ("metadata", _META_TYPE),
])
TRACE_SCHEMA = pa.schema([
    ("trace_id", pa.string()), ("name", pa.string()), ("annotator_kind", pa.string()), ("label", pa.string()),
    ("score", pa.float64()), ("explanation", pa.large_string()),
    ("metadata", _META_TYPE),
])


class NothingToExport(load.AnalyticsInputError):
    """Zero records would be written: nothing is written, and the command says why (exit 1)."""


_COLS = ["trace_id", "source", "system", "n_steps", "pred_step", "pred_agent", "pred_span_id", "candidates",
         "symptoms", "method", "model_id", "config_hash", "attributed_at", "pred_step_agent", "pred_agent_rule",
         "agent_ranking"]


def _label(rank: int) -> str:
    return "failure_source" if rank == 1 else "candidate"


def _rule(a: dict) -> str:
    return a.get("pred_agent_rule") or "author"


def _author(a: dict, step) -> str | None:
    return next((c.get("agent") for c in a.get("candidates") or [] if c.get("step") == step), None)


def _verdict(a: dict) -> str:
    """The trace's verdict in words, from attributions' columns only."""
    author = a.get("pred_step_agent") or _author(a, a["pred_step"])
    how = "the step's author" if _rule(a) == "author" else "summed step probabilities per agent"
    return (f"Blamed: step {a['pred_step']} (written by {author or '-'}); blamed agent {a['pred_agent'] or '-'} "
            f"({how}).")


def _score(c: dict) -> float:
    return float(c["score"]) if c.get("score") is not None else float("nan")


def _explain(a: dict, c: dict, rank: int) -> str:
    sym = ", ".join(str(s) for s in c.get("symptoms") or []) or "none"
    verdict = "most likely caused the failure" if rank == 1 else "is a candidate cause of the failure"
    return (f"MASPrism rank {rank} of {len(a['candidates'] or [])} (score {_score(c):.4g}): step {c['step']} by "
            f"agent {c['agent'] or '-'} {verdict}; symptom steps pointing to it: {sym}. {_verdict(a)} "
            f"model {a['model_id']}, config {a['config_hash']}.")


def _meta(a: dict, c: dict, r: int) -> dict:
    return {"trace_id": a["trace_id"], "source": a["source"], "step": c["step"], "step_agent": c["agent"],
            "rank": r, "n_candidates": len(a["candidates"] or []), "blamed_step": a["pred_step"],
            "blamed_agent": a["pred_agent"], "agent_rule": _rule(a), "model_id": a["model_id"],
            "config_hash": a["config_hash"]}


def _attributions(outdir: Path) -> Iterator[dict[str, Any]]:
    for batch in load.iter_batches(Path(outdir), "attributions", _COLS):
        yield from batch.to_pylist()


def _ranked(a: dict, top_k: int) -> list[tuple[int, dict]]:
    """Rank 1 = the attributions row's pred_step (never re-derived), then the other candidates in order. A row
    whose candidates do not hold its pred_step gives no record (another step must never be the failure source)."""
    cands = a["candidates"] or []
    first = next((c for c in cands if c["step"] == a["pred_step"]), None)
    if a["pred_step"] is None or first is None:
        return []
    rest = [c for c in cands if c["step"] != a["pred_step"] and c.get("score") is not None]
    return list(enumerate([first, *rest][:top_k], start=1))


def _trace_row(a: dict, ranked: list[tuple[int, dict]]) -> dict:
    r, c = ranked[0]
    others = "; ".join(f"#{k} step {x['step']} ({x['agent'] or '-'}, score {_score(x):.4g})" for k, x in ranked[1:])
    return {"trace_id": a["trace_id"], "name": ANNOTATION_NAME, "annotator_kind": "CODE", "label": _label(r),
            "score": _score(c), "explanation": _explain(a, c, r) + (f" Next candidates: {others}." if others
                                                                     else ""),
            "metadata": _meta(a, c, r)}


def phoenix_trace_rows(outdir: Path, top_k: int = 1) -> list[dict]:
    """Trace annotations for the traces `phoenix_rows` skips (no span id on any top-k candidate)."""
    rows = []
    for a in _attributions(outdir):
        ranked = _ranked(a, top_k)
        if ranked and not any(c.get("span_id") for _, c in ranked):
            rows.append(_trace_row(a, ranked))
    return rows


def trace_annotations_path(out: Path | str) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}.trace_annotations{out.suffix}")


def phoenix_rows(outdir: Path, top_k: int = 1) -> tuple[list[dict], int]:
    """(span annotation rows, traces skipped because their candidate steps carry no span id: those get a
    trace annotation, `phoenix_trace_rows`)."""
    rows, skipped = [], 0
    for a in _attributions(outdir):
        got = [(r, c) for r, c in _ranked(a, top_k) if c.get("span_id")]
        skipped += not got
        for r, c in got:
            rows.append({"span_id": c["span_id"], "name": ANNOTATION_NAME, "annotator_kind": "CODE",
                         "label": _label(r), "score": _score(c), "explanation": _explain(a, c, r),
                         "metadata": _meta(a, c, r)})
    return rows, skipped


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
    for a in _attributions(outdir):
        when = a["attributed_at"]
        ns = str(int(when.timestamp() * 1e9)) if isinstance(when, datetime) else "0"
        for r, c in _ranked(a, top_k):
            rec: dict[str, Any] = {"timeUnixNano": ns, "observedTimeUnixNano": ns, "severityNumber": 9,
                                   "severityText": "INFO", "eventName": "gen_ai.evaluation.result"}
            # The event belongs on the evaluated span; ids that are not OTel-shaped hex stay attributes only.
            if _HEX32.match(a["trace_id"] or ""):
                rec["traceId"] = a["trace_id"]
            if _HEX16.match(c.get("span_id") or "") and "traceId" in rec:
                rec["spanId"] = c["span_id"]
            rec["attributes"] = [
                _kv("gen_ai.evaluation.name", ANNOTATION_NAME), _kv("gen_ai.evaluation.score.value", _score(c)),
                _kv("gen_ai.evaluation.score.label", _label(r)),
                _kv("gen_ai.evaluation.explanation", _explain(a, c, r)),
                _kv("masprism.trace_id", a["trace_id"]), _kv("masprism.source", a["source"]),
                _kv("masprism.step", int(c["step"])), _kv("masprism.step_agent", c["agent"]),
                _kv("masprism.span_id", c.get("span_id")), _kv("masprism.rank", r),
                _kv("masprism.blamed_step", int(a["pred_step"])), _kv("masprism.blamed_agent", a["pred_agent"]),
                _kv("masprism.agent_rule", _rule(a)),
                _kv("masprism.model_id", a["model_id"]), _kv("masprism.config_hash", a["config_hash"])]
            yield rec


def jsonl_records(outdir: Path) -> Iterator[dict[str, Any]]:
    for a in _attributions(outdir):
        when = a.pop("attributed_at")
        yield {"custom_id": a["trace_id"], **a, "attributed_at": when.isoformat() if when else None}


def read_jsonl(path: Path | str) -> dict[str, dict[str, Any]]:
    """A jsonl export back as {custom_id: record}."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                rec = json.loads(line)
                if "custom_id" not in rec:
                    raise ValueError(f"{path}:{n}: record has no custom_id")
                out[rec["custom_id"]] = rec
    return out


def export(outdir: Path | str, to: str, out: Path | str, top_k: int = 1) -> int:
    """Write the export; returns the number of records (all files together)."""
    return sum(export_files(outdir, to, out, top_k).values())


def export_files(outdir: Path | str, to: str, out: Path | str, top_k: int = 1) -> dict[Path, int]:
    """Write the export; returns {file: records}. Raises NothingToExport (and writes nothing) when there would
    be no record at all. The output's folder must exist: it is never created here."""
    outdir, out = Path(outdir), Path(out)
    if to not in FORMATS:
        raise ValueError(f"unknown export format {to!r}; one of {', '.join(FORMATS)}")
    attr = load.read(outdir, "attributions", columns=["trace_id"])  # clear error when OUTDIR has no attributions
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output folder {out.parent} does not exist (it is not created for you)")
    if to == "phoenix":
        rows, skipped = phoenix_rows(outdir, top_k)
        trace_rows = phoenix_trace_rows(outdir, top_k) if skipped else []
        if not rows and not trace_rows:
            raise NothingToExport(f"nothing to export: {attr.num_rows} attributed trace(s), none with a ranked "
                                  f"candidate; no file written")
        written: dict[Path, int] = {}
        for path, recs, sch in ((out, rows, PHOENIX_SCHEMA), (trace_annotations_path(out), trace_rows, TRACE_SCHEMA)):
            if not recs:
                continue
            if path.suffix == ".parquet":
                io.write_table_atomic(pa.Table.from_pylist(recs, schema=sch), path)
            else:
                _write_lines(recs, path)
            written[path] = len(recs)
        if trace_rows:
            log.info("%d trace(s) without span ids (chat logs) -> Phoenix trace annotations in %s", len(trace_rows),
                     trace_annotations_path(out))
        return written
    if to == "otel":
        n = 0
        if not any(True for _ in otel_records(outdir, top_k)):
            raise NothingToExport(f"nothing to export: {attr.num_rows} attributed trace(s), none with a ranked "
                                  f"candidate; no file written")
        with io.atomic_output(out) as f:
            batch: list[dict] = []
            for rec in otel_records(outdir, top_k):
                batch.append(rec)
                n += 1
                if len(batch) >= _OTLP_BATCH:
                    f.write(_otlp_line(batch))
                    batch = []
            if batch:
                f.write(_otlp_line(batch))
        return {out: n}
    if attr.num_rows == 0:
        raise NothingToExport("nothing to export: attributions/ holds no rows; no file written")
    return {out: _write_lines(jsonl_records(outdir), out)}


def _otlp_line(records: list[dict]) -> str:
    req = {"resourceLogs": [{"resource": {"attributes": [_kv("service.name", "masprism-batch")]},
                             "scopeLogs": [{"scope": {"name": "masprism_batch.analytics"}, "logRecords": records}]}]}
    return json.dumps(req, ensure_ascii=False) + "\n"


def _write_lines(rows, out: Path) -> int:
    n = 0
    with io.atomic_output(out) as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
            n += 1
    return n
