"""Labels for `fit --labels` as annotation tools export them: Phoenix span annotations, Langfuse scores,
LangSmith feedback (the exact columns and fields: docs/labels.md).

A tool's record names a span (Phoenix `span_id` / `context.span_id`, Langfuse `observationId`, LangSmith
`run_id`), sometimes its trace (`traceId`, `trace_id`), a name (`annotation_name`/`name`, `name`, `key`) and a
value (`result.label`, `stringValue`/`value`, `value`/`score`). A record is a label "this step caused the
failure" when its name is `Match.name` (default: the name our own exports write) and its value one of
`Match.values` (default `failure_source`, the label of our exports' rank 1), compared without case; records of
other names or values are not labels (counted, never an error). The span is mapped to its step through the
runs' traces: the source's span id as carried, the span that carried an input-message step, or their OTel hex
form (what our exports write). A trace-level record (a chat log has no spans) names its step only through the
`step` of our own export's metadata. Where a trace has a label made in the tool (not our own exported verdict,
whose metadata carries `model_id` and `config_hash`), our exported verdicts of that trace are dropped: a
correction replaces the verdict it corrects.
"""

from __future__ import annotations

import ast
import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from masprism_batch.analytics import ids
from masprism_batch.fit.label_files import MAX_LABELS_BYTES, Gold, LabelsFileError, read_labels_bytes
from masprism_batch.trace import Trace

TOOLS = ("phoenix", "langfuse", "langsmith")
DEFAULT_VALUES = ("failure_source",)
_META_CHARS = 64 * 1024  # a metadata cell longer than this is not read (ours are a few hundred characters)


@dataclass(frozen=True)
class Match:
    """Which records are failure labels: annotation/score/feedback name and the values that mean "caused it"."""
    name: str
    values: tuple[str, ...] = DEFAULT_VALUES

    @classmethod
    def default(cls) -> Match:
        """Our own exports' annotation name (Phoenix, Langfuse, OTel) and their rank-1 label."""
        from masprism_batch.analytics.export_rows import ANNOTATION_NAME

        return cls(ANNOTATION_NAME)

    def hit(self, name: object, value: str | None) -> bool:
        return name == self.name and value is not None and value.strip().lower() in {
            v.strip().lower() for v in self.values}


@dataclass
class ToolRecord:
    line: int
    name: object
    value: str | None
    span: str | None
    trace: str | None
    meta: dict = field(default_factory=dict)


def classify(keys) -> str | None:
    """The tool whose export has these columns / fields, or None (our own labels format)."""
    k = set(keys)
    if "key" in k and "run_id" in k:
        return "langsmith"
    if "name" in k and ({"traceId", "observationId"} & k or ({"trace_id", "observation_id"} <= k)):
        return "langfuse"
    if ({"span_id", "context.span_id", "trace_id", "context.trace_id"} & k and {"annotation_name", "name"} & k
            and {"result.label", "result.score", "result", "label", "score", "annotator_kind"} & k):
        return "phoenix"
    return None


def _flat(rec: dict) -> dict:
    """Phoenix's REST form nests `result`; its dataframe flattens it to `result.label`: read both alike."""
    if isinstance(rec.get("result"), dict):
        rec = {**rec, **{f"result.{k}": v for k, v in rec["result"].items()}}
    return rec


def read_records(path: Path, problems: list[str], raw: bytes | None = None) -> tuple[str, list[tuple[int, dict]]] | None:
    """(tool, [(line or row number, record)]) of a tool's export, or None where the file is our own labels format.
    Parquet (a dataframe written with `to_parquet`; its `span_id` index is a column), CSV (`to_csv`; quoted
    fields may span lines), a JSON document (a list, or an API page `{"data": [...]}`) or JSON lines. `raw`: the
    file's bytes where the caller read them already."""
    path = Path(path)
    raw = read_labels_bytes(path) if raw is None else raw  # a regular file of a bounded size only
    if raw[:4] == b"PAR1":
        table = _parquet(path, raw)
        tool = classify(table.column_names)
        if tool is None:
            raise ValueError(f"{path}: a Parquet file with columns {', '.join(table.column_names[:8])}: not a "
                             "Phoenix span-annotation frame, Langfuse scores or LangSmith feedback")
        return tool, [(n, _flat(r)) for n, r in enumerate(table.to_pylist(), 2)]
    text = raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")
    head = text.lstrip()[:1]
    if head in ("[", "{"):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None  # JSON lines (or broken JSON: our own reader says where)
        if isinstance(doc, dict) and isinstance(doc.get("data"), list):
            doc = doc["data"]  # Langfuse GET /api/public/scores, Phoenix GET .../span_annotations
        if isinstance(doc, list):
            recs = [(n, _flat(r)) for n, r in enumerate(doc, 1) if isinstance(r, dict)]
            tool = classify(set().union(*(r.keys() for _, r in recs))) if recs else None
            return (tool, recs) if tool else None
        if isinstance(doc, dict):
            tool = classify(_flat(doc).keys())
            return (tool, [(1, _flat(doc))]) if tool else None
        return _json_lines(text, path, problems)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if classify(reader.fieldnames or []) is None:
        return None
    tool = classify(reader.fieldnames)
    out = []
    try:
        for r in reader:
            out.append((reader.line_num, {k: (v if v != "" else None) for k, v in r.items() if k is not None}))
    except csv.Error as exc:
        problems.append(f"{path.name}:{reader.line_num}: does not parse as CSV ({exc}): the rows after it skipped")
    return tool, out


MAX_PARQUET_ROWS = MAX_LABELS_BYTES // 64  # as many as a text file of the cap holds: a few KB of Parquet can say more


def _parquet(path: Path, raw: bytes):
    """A Parquet export's table, its row count read from the footer first; damaged: LabelsFileError naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(io.BytesIO(raw))
        if f.metadata.num_rows > MAX_PARQUET_ROWS:
            raise LabelsFileError(f"{path}: {f.metadata.num_rows:,} rows; a labels export holds at most "
                                  f"{MAX_PARQUET_ROWS:,} (filter it to the annotation that names the failure)")
        return f.read()
    except (OSError, pa.ArrowException) as exc:
        raise LabelsFileError(f"{path}: not a readable Parquet file ({str(exc)[:200]})") from None


def _json_lines(text: str, path: Path, problems: list[str]):
    lines = [(n, s) for n, s in enumerate(text.split("\n"), 1) if s.strip()]
    try:
        first = json.loads(lines[0][1]) if lines else None
    except (ValueError, RecursionError):
        return None
    tool = classify(_flat(first).keys()) if isinstance(first, dict) else None
    if tool is None:
        return None
    out = []
    for n, s in lines:
        try:
            obj = json.loads(s)
        except (ValueError, RecursionError) as exc:
            problems.append(f"{path.name}:{n}: not a JSON object ({type(exc).__name__}): row skipped")
            continue
        if isinstance(obj, dict):
            out.append((n, _flat(obj)))
    return tool, out


def _text(v) -> str | None:
    if v is None or isinstance(v, (dict, list)):
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _meta(v) -> dict:
    """A metadata cell: a dict (Parquet struct, JSON), JSON text, or a Python dict's repr (pandas' `to_csv`)."""
    if isinstance(v, dict):
        return v
    if not isinstance(v, str) or len(v) > _META_CHARS:
        return {}
    for parse in (json.loads, ast.literal_eval):  # literal_eval: literals only, never code
        try:
            out = parse(v)
        except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
            continue
        return out if isinstance(out, dict) else {}
    return {}


def record(tool: str, n: int, r: dict) -> ToolRecord:
    """One tool record in common terms (field names: docs/labels.md)."""
    if tool == "phoenix":
        return ToolRecord(n, r.get("annotation_name", r.get("name")), _text(r.get("result.label", r.get("label"))),
                          _text(r.get("span_id", r.get("context.span_id"))),
                          _text(r.get("trace_id", r.get("context.trace_id"))),
                          _meta(r.get("metadata")))
    if tool == "langfuse":
        value = r.get("stringValue", r.get("string_value"))
        if value is None:
            value = r.get("value")
            if str(r.get("dataType", r.get("data_type")) or "").upper() == "BOOLEAN" and value is not None:
                value = value not in (0, "0", 0.0, False, "false", "False")
        return ToolRecord(n, r.get("name"), _text(value), _text(r.get("observationId", r.get("observation_id"))),
                          _text(r.get("traceId", r.get("trace_id"))), _meta(r.get("metadata")))
    value = r.get("value")
    if value is None or isinstance(value, dict):
        value = r.get("score")
    return ToolRecord(n, r.get("key"), _text(value), _text(r.get("run_id")), _text(r.get("trace_id")),
                      _meta(r.get("extra")) or _meta(r.get("metadata")))


def _trace_keys(traces: dict[str, Trace]) -> dict[str, str]:
    """Every form a tool may hold a trace's id in -> the trace: as carried, OTel hex, the derived id of a log
    whose id is no OTel id (ids.export_trace_id)."""
    out: dict[str, str] = {}
    for tid in traces:
        for k in (tid, ids.otel_trace_id(tid), ids.export_trace_id(tid)):
            if k:
                out.setdefault(k, tid)
    return out


def _span_keys(traces: dict[str, Trace]) -> dict[str, list[tuple[str, int, bool]]]:
    """span id (as carried, its carrying span, their hex form) -> [(trace, step, the span's own step?)]."""
    out: dict[str, list[tuple[str, int, bool]]] = {}
    for tid, t in traces.items():
        dec = ids.decimal_ids(tid)
        for i, s in enumerate(t.steps):
            carrying = ids.carrying_span(s.span_id)
            if not carrying:
                continue
            own = s.span_id == carrying
            for k in dict.fromkeys((s.span_id, carrying, ids.otel_span_id(carrying, dec))):
                if k:
                    out.setdefault(k, []).append((tid, i, own))
    return out


def _pick(cands: list[tuple[str, int, bool]], meta: dict) -> int:
    """The step among those one span carries: our export's own `step` where it is one of them, else the span's
    own step, else the first."""
    steps = [i for _, i, _ in cands]
    if type(meta.get("step")) is int and meta["step"] in steps:  # `true` is no step (bool is an int)
        return meta["step"]
    return next((i for _, i, own in cands if own), steps[0])


def from_tool(path: Path, tool: str, rows: list[tuple[int, dict]], traces: dict[str, Trace], match: Match,
              problems: list[str]):
    """({trace_id: Gold}, problems) of a tool export's records (see the module docstring)."""
    tkeys, skeys = _trace_keys(traces), _span_keys(traces)
    found: dict[str, list[tuple[int, bool]]] = {}
    names: dict[str, int] = {}
    for n, r in rows:
        rec = record(tool, n, r)
        where = f"{Path(path).name}:{n}"
        if not match.hit(rec.name, rec.value):
            key = f"{rec.name}={rec.value}" if rec.name == match.name else str(rec.name)
            names[key] = names.get(key, 0) + 1
            continue
        tid = tkeys.get(rec.trace) or tkeys.get(ids.otel_trace_id(rec.trace) or "") if rec.trace else None
        if rec.trace and tid is None:
            problems.append(f"{where}: unknown trace {rec.trace[:80]!r} (in none of the runs given): row skipped")
            continue
        step = None
        if rec.span:
            cands = skeys.get(rec.span) or skeys.get(ids.otel_span_id(rec.span) or "") or []
            cands = [c for c in cands if tid is None or c[0] == tid]
            if len({c[0] for c in cands}) > 1:
                problems.append(f"{where}: span {rec.span[:80]!r} is in several traces and the record names none: "
                                "row skipped")
                continue
            if cands:
                tid, step = cands[0][0], _pick(cands, rec.meta)
            elif tid is None:
                problems.append(f"{where}: unknown trace of span {rec.span[:80]!r} (in none of the runs given): "
                                "row skipped")
                continue
        if step is None and tid is not None and isinstance(rec.meta.get("step"), int) \
                and 0 <= rec.meta["step"] < len(traces[tid].steps) and rec.meta.get("trace_id") in (None, tid):
            step = rec.meta["step"]  # a trace-level record of our own export (a chat log): the step it names
        if step is None:
            problems.append(f"{where}: span {str(rec.span)[:80]!r} is not a step of trace {tid!r}: row skipped"
                            if rec.span else f"{where}: a trace-level record names neither step nor span_id: "
                            "row skipped")
            continue
        ours = bool(rec.meta.get("model_id") and rec.meta.get("config_hash"))  # a Parquet struct has null keys
        found.setdefault(tid, []).append((step, ours))
    if not found and not problems:
        seen = ", ".join(f"{k} ({v})" for k, v in sorted(names.items(), key=lambda x: -x[1])[:6]) or "none"
        raise LabelsFileError(f"{path}: no {tool} record named {match.name!r} with value "
                              f"{' or '.join(map(repr, match.values))} (found: {seen}); name the annotation "
                              "with --label-name and the value meaning 'this step caused the failure' with "
                              "--label-value")
    gold: dict[str, Gold] = {}
    for tid, marks in found.items():
        keep = [s for s, ours in marks if not ours] or [s for s, _ in marks]  # a correction replaces ours
        gold[tid] = Gold(sorted(set(keep)), [])
    return gold, problems
