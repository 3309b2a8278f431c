"""`export`: attributions in the formats of existing tools.

Every format names the run's verdict as `attributions` holds it: rank 1 is `pred_step` and the blamed agent is
`pred_agent` (chosen by `pred_agent_rule`; it may differ from the step's author under the "aggregate" rule);
nothing here re-derives either.

- phoenix: Arize Phoenix annotations, one file per Phoenix target, each taken as written by the Phoenix
  client (`phoenix_paths`; Parquet when FILE ends in .parquet, else JSON lines; a file with no row is not
  written): `FILE.spans`: the verdict's span annotation (rank 1) per trace whose blamed step has a span id,
  for `Client().spans.log_span_annotations_dataframe`; `FILE.traces`: one trace annotation per trace whose
  blamed step has none (chat logs: AG2, OpenAI, Who&When; the other candidates in its explanation), for
  `Client().traces.log_trace_annotations_dataframe`; `FILE.candidates` (`--top-k` > 1): the lower-ranked
  candidates' span annotations, for `log_span_annotations_dataframe` too, without a `score` column (a candidate
  has no calibrated probability, and Phoenix refuses a null score). Columns: span_id (spans, candidates),
  trace_id (both in OTel hex form; a log whose id is no OTel id, a chat log, gets the id derived from it,
  ids.export_trace_id), name, annotator_kind (CODE), label, score
  (the verdict's confidence, in [0, 1]; not in candidates), explanation, metadata (a struct, read by pandas as
  a dict; the source's ids and the raw MASPrism score). A step made of an input message (span id
  `<span>#input<j>`, ingest/context.py) is annotated on the span that carried it.
- otel: OpenTelemetry `gen_ai.evaluation.result` events as OTLP/JSON log records, one
  ExportLogsServiceRequest per line (the Collector's otlpjsonfile receiver format), one record per blamed step,
  traceId/spanId in hex, `gen_ai.evaluation.score.value` the verdict's confidence.
- langfuse: Langfuse scores, one score create body (`POST /api/public/scores`) per line (export_langfuse.py).
- jsonl: one JSON object per trace keyed by `custom_id` (= trace_id), read back with `read_jsonl`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from masprism_batch.analytics import export_text as txt
from masprism_batch.analytics import ids, load
from masprism_batch.analytics.export_langfuse import langfuse_scores
from masprism_batch.analytics.export_otel import OTLP_BATCH, otel_records, otlp_line
from masprism_batch.analytics.export_rows import (
    ANNOTATION_NAME,
    CATEGORY_ANNOTATION,
    attributions,
    hex_ids,
    json_line,
    one_verdict,
    ranked,
    say_shared_trace_ids,
    say_skipped,
)
from masprism_batch.outdir import parts as outdir_parts

log = logging.getLogger(__name__)
FORMATS = ("phoenix", "otel", "langfuse", "jsonl")

# trace_id/span_id: the ids as the source carried them (the columns outside hold the backend's hex form);
# step/step_agent: the annotated step and its author; blamed_step/blamed_agent: the trace's verdict
# (attributions.pred_step / pred_agent), agent_rule: how the agent was chosen (attributions.pred_agent_rule),
# verdict_by: what chose the step; raw_score: MASPrism's unbounded candidate score (`score` is the confidence).
_META_TYPE = pa.struct([("trace_id", pa.string()), ("span_id", pa.string()), ("source", pa.string()),
                        ("step", pa.int32()), ("step_agent", pa.string()), ("rank", pa.int32()),
                        ("n_candidates", pa.int32()), ("blamed_step", pa.int32()), ("blamed_agent", pa.string()),
                        ("agent_rule", pa.string()), ("verdict_by", pa.string()), ("confidence", pa.float64()),
                        ("raw_score", pa.float64()), ("model_id", pa.string()), ("config_hash", pa.string()),
                        # the verdict's steps to read (attributions' step set; null before it existed)
                        ("read_steps", pa.list_(pa.int32())), ("set_size", pa.int32()),
                        ("set_coverage", pa.float64()), ("set_by", pa.string()), ("localised", pa.bool_())])
# One file per Phoenix target, each loaded by its client method as is (docs/reporting.md): a null span_id or a
# null score in a frame is refused by the client, so neither column holds one where it is present.
_COMMON = [("trace_id", pa.string()), ("name", pa.string()), ("annotator_kind", pa.string()), ("label", pa.string())]
_TEXT = [("explanation", pa.large_string()), ("metadata", _META_TYPE)]
PHOENIX_SCHEMAS = {
    "spans": pa.schema([("span_id", pa.string()), *_COMMON, ("score", pa.float64()), *_TEXT]),
    "traces": pa.schema([*_COMMON, ("score", pa.float64()), *_TEXT]),
    "candidates": pa.schema([("span_id", pa.string()), *_COMMON, *_TEXT]),
}


class NothingToExport(load.AnalyticsInputError):
    """Zero records would be written: nothing is written, and the command says why (exit 1)."""




def _meta(a: dict, c: dict, r: int) -> dict:
    return {"trace_id": a["trace_id"], "span_id": c.get("span_id"), "source": a["source"], "step": c["step"],
            "step_agent": c["agent"], "rank": r, "n_candidates": len(a["candidates"] or []),
            "blamed_step": a["pred_step"], "blamed_agent": a["pred_agent"], "agent_rule": txt.agent_rule(a),
            "verdict_by": a.get("verdict_by"), "confidence": a.get("confidence"), "raw_score": txt.raw_score(c),
            "model_id": a["model_id"], "config_hash": a["config_hash"], **txt.set_fields(a)}


def phoenix_rows(outdir: Path, top_k: int = 1) -> dict[str, list[dict]]:
    """Every Phoenix annotation, by target ("spans", "traces", "candidates": `PHOENIX_SCHEMAS`). A trace whose
    blamed step has a span id gets a span annotation on it (and its next candidates with a span id, when
    `top_k` > 1, one "candidates" row each); one whose blamed step has none (a chat log) a trace annotation,
    the other candidates in its explanation."""
    out: dict[str, list[dict]] = {"spans": [], "traces": [], "candidates": []}
    skipped: list = []
    for a in attributions(outdir):
        with one_verdict(a, skipped):  # a verdict's annotations are added whole or not at all
            for target, rows in _phoenix_verdict(a, top_k).items():
                out[target] += rows
    say_skipped(skipped, "phoenix")
    return out


def _phoenix_verdict(a: dict, top_k: int) -> dict[str, list[dict]]:
    """One verdict's Phoenix annotations, by target."""
    out: dict[str, list[dict]] = {"spans": [], "traces": [], "candidates": []}
    picks = ranked(a, top_k)
    if not picks:
        return out
    (_, first), rest = picks[0], picks[1:]
    tid, sid = hex_ids(a, first)
    span = sid or ids.carrying_span(first.get("span_id"))
    text = txt.explain(a, first, 1)
    if not span and rest:
        text += " Next candidates: " + "; ".join(
            f"#{k} step {x['step']} ({x['agent'] or '-'})" for k, x in rest) + "."
    row = {"trace_id": tid, "name": ANNOTATION_NAME, "annotator_kind": "CODE",
           "label": txt.label(1), "score": txt.score(a, 1), "explanation": text, "metadata": _meta(a, first, 1)}
    kind = _kind_row(a, row)
    if span:
        out["spans"] += [{"span_id": span, **r} for r in (row, kind) if r]
    else:
        out["traces"] += [r for r in (row, kind) if r]
        return out
    for r, c in rest:
        _, csid = hex_ids(a, c)
        cspan = csid or ids.carrying_span(c.get("span_id"))
        if cspan:
            out["candidates"].append({"span_id": cspan, "trace_id": tid, "name": ANNOTATION_NAME,
                                      "annotator_kind": "CODE", "label": txt.label(r),
                                      "explanation": txt.explain(a, c, r), "metadata": _meta(a, c, r)})
    return out


def _kind_row(a: dict, row: dict) -> dict | None:
    """The verdict's failure kind as its own annotation on the same target (the kind as the label); none where
    the verdict has no kind or no confidence for it (a Phoenix score is never null)."""
    if not a.get("category") or a.get("category_confidence") is None:
        return None
    return {**row, "name": CATEGORY_ANNOTATION, "label": a["category"], "score": a["category_confidence"],
            "explanation": txt.kind_text(a)}


def phoenix_paths(out: Path | str) -> dict[str, Path]:
    """The file of each Phoenix target for `-o FILE`: `annotations.parquet` -> `annotations.spans.parquet`,
    `annotations.traces.parquet`, `annotations.candidates.parquet` (the suffix, Parquet or JSON lines, kept)."""
    out = Path(out)
    return {t: out.with_name(f"{out.stem}.{t}{out.suffix or '.jsonl'}") for t in PHOENIX_SCHEMAS}


def jsonl_records(outdir: Path) -> Iterator[dict[str, Any]]:
    """One object per trace: `custom_id` (= trace_id as the source carried it), every attribution field, and
    the trace and blamed span ids in OTel hex form (`otel_trace_id`, `otel_span_id`; null where none)."""
    skipped: list = []
    for a in attributions(outdir):
        rec, n_skipped = None, len(skipped)
        with one_verdict(a, skipped):
            when = a.pop("attributed_at")
            tid, sid = hex_ids(a, {"span_id": a.get("pred_span_id")})
            rec = {"custom_id": a["trace_id"], **a, "attributed_at": when.isoformat() if when else None,
                   "otel_trace_id": tid, "otel_span_id": sid}
            json.dumps(rec, ensure_ascii=False, default=str)  # a value JSON cannot hold costs this record only
        if rec is not None and len(skipped) == n_skipped:
            yield rec
    say_skipped(skipped, "jsonl")


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
    if to != "jsonl":  # the formats a backend reads by its hex trace id (jsonl keys each record by the log's own)
        say_shared_trace_ids(attr["trace_id"].to_pylist())
    if to == "phoenix":
        by_target = phoenix_rows(outdir, top_k)
        if not any(by_target.values()):
            raise NothingToExport(f"nothing to export: {attr.num_rows} attributed trace(s), none with a ranked "
                                  f"candidate; no file written")
        for target, path in phoenix_paths(out).items():
            if by_target[target] and path.suffix == ".parquet":
                parquet_target(path)  # before any file is written
        written = {}
        for target, path in phoenix_paths(out).items():
            rows = by_target[target]
            if not rows:
                continue
            if path.suffix == ".parquet":
                outdir_parts.write_table_atomic(pa.Table.from_pylist(rows, schema=PHOENIX_SCHEMAS[target]), path)
            else:
                _write_lines(rows, path)
            written[path] = len(rows)
        log.info("phoenix: %s", ", ".join(f"{n} {t} annotation(s)" for t, n in
                                           ((t, len(r)) for t, r in by_target.items()) if n))
        return written
    if to == "otel":
        n = 0
        if not any(True for _ in otel_records(outdir, top_k)):
            raise NothingToExport(f"nothing to export: {attr.num_rows} attributed trace(s), none with a ranked "
                                  f"candidate; no file written")
        with outdir_parts.atomic_output(out) as f:
            batch: list[dict] = []
            for rec in otel_records(outdir, top_k):
                batch.append(rec)
                n += 1
                if len(batch) >= OTLP_BATCH:
                    f.write(otlp_line(batch))
                    batch = []
            if batch:
                f.write(otlp_line(batch))
        return {out: n}
    if to == "langfuse":
        if not any(True for _ in langfuse_scores(outdir, top_k)):
            raise NothingToExport(f"nothing to export: {attr.num_rows} attributed trace(s), none with a ranked "
                                  f"candidate; no file written")
        return {out: _write_lines(langfuse_scores(outdir, top_k), out)}
    if attr.num_rows == 0:
        raise NothingToExport("nothing to export: attributions/ holds no rows; no file written")
    return {out: _write_lines(jsonl_records(outdir), out)}


def parquet_target(path: Path) -> None:
    """A Parquet export replaces its file atomically, so only a regular file (or none) is its target: a FIFO or
    device at the path is refused (OutdirUnsafe), never replaced by a regular file (`--force` replaces files
    only; a JSON lines FILE is written into a FIFO or device as it is)."""
    kind = outdir_parts.output_target(path)
    if kind not in ("new", "file"):
        raise outdir_parts.OutdirUnsafe(
            f"output {path} is {'a folder' if kind == 'dir' else 'a FIFO or device'}: a Parquet export replaces a "
            "regular file only, --force or not; give another -o (or a .jsonl FILE, written into a FIFO as it is)")


def _write_lines(rows, out: Path) -> int:
    n = 0
    with outdir_parts.atomic_output(out) as f:
        for r in rows:
            f.write(json_line(r))
            n += 1
    return n
