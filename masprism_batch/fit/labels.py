"""Labels for `masprism-batch fit`: from the traces themselves or from a labels file.

Labels file: JSON lines or CSV, one labelled step per row, columns `trace_id`, `step` (0-based index into the
trace's steps; a whole float such as 3.0, as pandas writes a column with blanks, is step 3) or `span_id`, optionally `agent` (the blamed agent) and `category` (what went wrong there, in the
team's own words: a kind of the run's taxonomy, fit/categories.py). Outcomes, per row:
- a trace id that is in none of the runs, a step out of range, a span id the trace does not have, or a row with
  neither step nor span id: the row is skipped and reported with its line number and reason; a row whose step,
  span id, agent and category are all blank (a `masprism-batch pick` file's row not filled in) is counted apart,
  as not labelled yet;
- a line that does not parse (invalid JSON or UTF-8, `Infinity`/`NaN`, nesting past the parser, an unterminated
  CSV quote, a field over 128 KiB) or whose values are not label values (`"step": true`, an agent that is an
  object, a key named twice): skipped and reported alike, never a crash; CSV rows are one per line (a quote never
  spans lines), and a header naming a column twice is refused (the later column would win in every row);
- several rows of one trace: a trace with several labelled steps (a verdict naming any of them is a hit);
  their agents are all accepted; a step labelled with several categories has each of them.
With a labels file, labels carried by the traces are not used. An annotation tool's export (Phoenix span
annotations, Langfuse scores, LangSmith feedback) is read by fit/tool_labels.py (docs/labels.md).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from masprism_batch.fit import tool_labels
from masprism_batch.fit.label_files import MAX_LABELS_BYTES, Gold, LabelsFileError, read_labels_bytes
from masprism_batch.trace import Trace, norm_agent, unsheet
from masprism_batch.verdict.checked_json import KeyTwice, unique_keys

__all__ = ["MAX_LABELS_BYTES", "Gold", "LabelsFileError", "from_file", "from_trace", "read_label_rows",
           "read_labels_bytes"]


def from_trace(t: Trace) -> Gold | None:
    """Who&When fields (mistake_step, mistake_agent), TRAIL annotations / canonical labels (error_locations)."""
    lab = t.labels
    if lab is None:
        return None
    agents = [norm_agent(lab.mistake_agent)] if norm_agent(lab.mistake_agent) else []
    if lab.mistake_step is not None:
        steps = [lab.mistake_step] if 0 <= lab.mistake_step < len(t.steps) else []
    else:
        locs = set(lab.error_locations or [])
        steps = [i for i, s in enumerate(t.steps) if s.span_id in locs]
    g = Gold(steps, agents)
    by_span = {s.span_id: i for i, s in enumerate(t.steps) if s.span_id}
    for loc, kind in zip(lab.error_locations or [], lab.error_categories or [], strict=False):
        if loc in by_span and isinstance(kind, str):  # TRAIL: each error's category at its span
            g.add_kind(by_span[loc], kind)
    return g if steps else None


MAX_FIELD_BYTES = 128 * 1024  # a label field (trace id, agent, span id) is short; longer is not a label row


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number a label can hold")


def _json_row(line: str) -> dict:
    # Infinity / NaN refused; a key named twice too (JSON would keep the last: a label moved without a word)
    obj = json.loads(line, parse_constant=_reject_constant, object_pairs_hook=unique_keys)
    if not isinstance(obj, dict):
        raise ValueError(f"a JSON {type(obj).__name__}, not an object")
    return obj


def _csv_fields(line: str) -> list[str]:
    """One physical line as CSV (a label row never spans lines): an unterminated quote or an oversized field
    is this line's error, never a quote that swallows the rows after it."""
    if len(line.encode("utf-8", "surrogatepass")) > 8 * MAX_FIELD_BYTES:
        raise ValueError(f"line longer than {8 * MAX_FIELD_BYTES:,} bytes")
    try:
        fields = next(csv.reader([line], strict=True))
    except csv.Error as exc:
        raise ValueError(f"not one CSV row ({exc})") from None
    if any(len(f.encode("utf-8", "surrogatepass")) > MAX_FIELD_BYTES for f in fields):
        raise ValueError(f"a field longer than {MAX_FIELD_BYTES // 1024} KiB")
    return fields


def read_label_rows(path: Path, problems: list[str] | None = None, raw: bytes | None = None) -> list[tuple[int, dict]]:
    """(line number, row) of a JSON-lines or CSV labels file (CSV when the first line is not a JSON object). A
    line that does not parse (invalid JSON or UTF-8, Infinity, nesting past the parser, a bad CSV quote, an
    oversized field) is skipped, with its line number appended to `problems`; only a file with no usable
    structure at all (no trace_id column, no row) is a LabelsFileError."""
    problems = [] if problems is None else problems
    raw = read_labels_bytes(path, MAX_LABELS_BYTES) if raw is None else raw  # the module's cap, read when called
    wide = _wide(raw)
    if wide:  # every line would be 'not UTF-8' or a header that does not parse
        raise LabelsFileError(f"{path}: {wide} text (a spreadsheet's 'Unicode text' export); save it as CSV UTF-8 "
                              "or JSON lines")
    lines: list[tuple[int, str]] = []
    ends = b"\n" if b"\n" in raw or b"\r" not in raw else b"\r"  # CR alone: Excel for Mac's 'CSV (Macintosh)'
    for n, b in enumerate(raw.removeprefix(b"\xef\xbb\xbf").split(ends), 1):
        b = b.removesuffix(b"\r")
        try:
            text = b.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"{Path(path).name}:{n}: not UTF-8 text (byte {exc.start + 1}): row skipped")
            continue
        if text.strip():
            lines.append((n, text))
    rows: list[tuple[int, dict]] = []
    if lines and lines[0][1].lstrip().startswith("{"):
        for n, line in lines:
            try:
                rows.append((n, _json_row(line)))
            except KeyTwice as exc:
                problems.append(f"{Path(path).name}:{n}: names {exc.key[:40]!r} twice: row skipped")
            except (ValueError, RecursionError) as exc:
                problems.append(f"{Path(path).name}:{n}: not a JSON object "
                                f"({type(exc).__name__}: {str(exc)[:120]}): row skipped")
    elif lines:
        head = lines[0][1].strip()
        try:  # JSON, but not an object per line: said as such (a CSV reading would say "no trace_id column")
            is_json = not isinstance(json.loads(head, parse_constant=_reject_constant), dict)
        except (ValueError, RecursionError):
            is_json = head.startswith("[")
        if is_json:
            raise LabelsFileError(f"{path}:{lines[0][0]}: a JSON {'array' if head.startswith('[') else 'value'} "
                                  "where a labels file has one JSON object per line (trace_id, step or span_id, "
                                  "agent) or a CSV header naming those columns")
        try:
            header = _csv_fields(lines[0][1])
        except ValueError as exc:
            raise LabelsFileError(f"{path}:{lines[0][0]}: the CSV header does not parse ({exc})") from None
        twice = sorted({h for h in header if h and header.count(h) > 1})
        if twice:  # the later column would win for every row
            raise LabelsFileError(f"{path}: the CSV header names {twice[0][:40]!r} twice: keep one column")
        if "trace_id" not in header:
            raise LabelsFileError(f"{path}: no trace_id column in the header {lines[0][1][:80]!r} "
                                  f"({_header_hint(header)})")
        for n, line in lines[1:]:
            try:
                fields = _csv_fields(line)
            except ValueError as exc:
                problems.append(f"{Path(path).name}:{n}: does not parse as a CSV row ({exc}): row skipped")
                continue
            if len(fields) > len(header):
                problems.append(f"{Path(path).name}:{n}: {len(fields)} fields for {len(header)} columns: row skipped")
                continue
            rows.append((n, {k: (v if v != "" else None) for k, v in zip(header, fields, strict=False)}))
    if not rows and not problems:
        raise LabelsFileError(f"{path}: no labelled rows")
    return rows


def _wide(raw: bytes) -> str | None:
    """'UTF-16' / 'UTF-32' where the file is text of that encoding (its byte order mark, or NUL bytes between the
    characters of its first line), else None."""
    if raw[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff") or raw[:4].count(b"\x00") == 3:
        return "UTF-32"
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in raw[:2]:
        return "UTF-16"
    return None


def _header_hint(header: list[str]) -> str:
    """What a CSV header without a `trace_id` column most likely needs."""
    one = header[0] if len(header) == 1 else ""
    for sep, name in ((";", "';'"), ("\t", "a tab")):
        if sep in one and "trace_id" in one.lower():
            return f"its columns are separated by {name}: save the file with commas (CSV UTF-8)"
    return "a labels file has the lower-case columns trace_id, step or span_id, agent; or is JSON lines"


def _text(v) -> str | None:
    """A label's id or agent: text (CSV), or a JSON string or integer; anything else (a dict, a list, a
    boolean, a float) is no label value."""
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return None


def _step(v) -> int | None:
    """A 0-based step index: a JSON integer or a CSV text of digits; `true` is no step (int(True) == 1). A text
    int() refuses though str.isdigit() holds ("²", "--5") is no step either. A whole number written as a float
    (3.0, "3.0": what pandas writes for a column with a blank cell) is that step; 3.5 is none."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() and abs(v) < 1e12 else None
    if isinstance(v, str):
        t = v.strip()
        if t.endswith(".0") and t[:-2].lstrip("-").isdigit():  # "3.0", never "3.5" nor "3."
            t = t[:-2]
        if t.lstrip("-").isdigit() and len(t) <= 12:
            try:
                return int(t)
            except ValueError:
                return None
    return None


def from_file(path: Path, traces: dict[str, Trace], match=None) -> tuple[dict[str, Gold], list[str]]:
    """({trace_id: Gold}, problems: one message per skipped row). An annotation tool's export (Phoenix, Langfuse,
    LangSmith) is read by fit/tool_labels.py, `match` (tool_labels.Match) saying which records are labels."""
    gold: dict[str, Gold] = {}
    problems: list[str] = []
    try:  # the file is read once, for both readers
        raw = read_labels_bytes(path, MAX_LABELS_BYTES)
        tool = tool_labels.read_records(path, problems, raw)
    except ValueError as exc:
        raise LabelsFileError(str(exc)) from None
    if tool is not None:
        return tool_labels.from_tool(path, *tool, traces, match or tool_labels.Match.default(), problems)
    for n, r in read_label_rows(path, problems, raw):
        where = f"{Path(path).name}:{n}"
        tid = _text(r.get("trace_id"))
        if tid is None and r.get("trace_id") is not None:
            problems.append(f"{where}: trace_id is not a string: row skipped")
            continue
        t = traces.get(tid) if tid is not None else None
        if t is None and tid is not None and unsheet(tid) != tid:  # as `pick` guarded it for a spreadsheet
            tid = unsheet(tid)
            t = traces.get(tid)
        if t is not None and r.get("agent") is not None and _text(r.get("agent")) is None:
            problems.append(f"{where}: agent is not a string: row skipped")
            continue
        if tid is None:
            problems.append(f"{where}: no trace_id (a row names its trace by `trace_id`): row skipped")
            continue
        if t is None:
            problems.append(f"{where}: unknown trace {tid[:80] if tid else tid!r} (in none of the runs given): row skipped")
            continue
        step = r.get("step")
        if step is not None:
            if _step(step) is None:
                problems.append(f"{where}: step {str(step)[:40]!r} is not an integer: row skipped")
                continue
            step = _step(step)
            if not 0 <= step < len(t.steps):
                problems.append(f"{where}: step {step} out of range (trace {tid!r} has {len(t.steps)} steps, "
                                "0-based): row skipped")
                continue
        elif r.get("span_id") is not None:
            span = _text(r["span_id"])
            idx = [i for i, s in enumerate(t.steps) if span is not None and s.span_id == span]
            if not idx:
                problems.append(f"{where}: span {str(r['span_id'])[:80]!r} is not a step of trace {tid!r}: row skipped")
                continue
            step = idx[0]
        elif all(r.get(k) in (None, "") for k in ("agent", "category")):  # a picked row not filled in yet
            problems.append(f"{where}: not labelled yet (step and agent blank): row skipped")
            continue
        else:
            problems.append(f"{where}: neither step nor span_id: row skipped")
            continue
        g = gold.setdefault(t.trace_id, Gold())
        g.add_step(step)
        a = norm_agent(unsheet(_text(r.get("agent")) or "")) if r.get("agent") is not None else None
        if a:
            g.add_agent(a)
        if r.get("category") is not None:
            if _text(r["category"]) is None or isinstance(r["category"], int):
                problems.append(f"{where}: category is not a string: its step is kept, the category skipped")
            else:
                g.add_kind(step, _text(r["category"])[:200])
    return gold, problems
