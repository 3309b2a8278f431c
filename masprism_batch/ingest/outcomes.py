"""Graded outcomes: which runs passed, as the team grades them (issue 60). Only a graded outcome sets a run aside
(ingest/status.py `attributable`); an execution status of OK says no exception was raised, not that the answer
was right.

Three graders, the first that has a word on a trace decides:
- `--outcomes FILE`: the team's own outcomes, one or more rows per trace, as eval tools export them (below);
- `--outcome-name NAME`: a score of that name recorded in the log itself (Langfuse trace `scores`, LangSmith root
  run `feedback_stats`), kept by the readers in the trace's metadata `scores`;
- what the log grades itself: tau-bench's `reward`, a canonical row's `run_status` ("succeeded", "passed", ...).

An outcomes file is CSV, JSON lines, JSON (an array, or the public API's `{"data": [...]}`) or Parquet. Columns,
by the names the tools write them (first found wins):
- trace id: `trace_id`, `context.trace_id` (Phoenix trace evaluations), `traceId` (Langfuse scores), `run_id`
  (LangSmith feedback on the root run; its id is the trace id);
- the evaluation's name: `name` (Langfuse), `key` (LangSmith), `annotation_name` / `eval_name` (Phoenix); rows of
  another name than `--outcome-name` are ignored; without it, a file of several names is refused;
- the outcome: a word in `label` / `stringValue` / `value` / `passed` / `pass` / `outcome` (pass, passed, correct,
  true, yes, success, 1 / fail, failed, incorrect, false, no, failure, 0), else a number in `score` / `value`
  compared with `--pass-threshold` (default 1.0: a 0/1 score passes at 1).
A trace passes when every row of it passes; one failing row makes it failed.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ID_COLUMNS = ("trace_id", "context.trace_id", "traceId", "run_id")
NAME_COLUMNS = ("name", "key", "annotation_name", "eval_name")
WORD_COLUMNS = ("label", "stringValue", "value", "passed", "pass", "outcome")
SCORE_COLUMNS = ("score", "value")
PASS_WORDS = {"pass", "passed", "correct", "true", "yes", "success", "succeeded", "solved", "resolved", "1"}
FAIL_WORDS = {"fail", "failed", "incorrect", "false", "no", "failure", "error", "wrong", "unsolved", "0"}
# the signals a set-aside row names (errors/ `succeeded_run`, message prefix): counted apart in every summary
SIGNALS = ("outcomes", "score", "reward", "run_status")


MAX_OUTCOMES_BYTES = 1 << 30  # an operator file: a bounded read, never /dev/zero to MemoryError


def _rows(path: Path) -> list[dict[str, Any]]:
    """The file's rows. Only a regular file is read (`config_checks.read_regular`: a FIFO never blocks), at most
    MAX_OUTCOMES_BYTES; a document or line of the wrong shape is a ValueError saying what was expected."""
    from masprism_batch.config_checks import read_regular

    raw, size = read_regular(path, MAX_OUTCOMES_BYTES)  # NotRegularFile is a ValueError naming the path
    if max(size, len(raw)) > MAX_OUTCOMES_BYTES:
        raise ValueError(f"{max(size, len(raw)):,} bytes; an outcomes file is at most {MAX_OUTCOMES_BYTES:,}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import io

        import pyarrow.parquet as pq

        return pq.read_table(io.BytesIO(raw)).to_pylist()
    text = raw.decode("utf-8-sig")
    if suffix == ".csv":
        return list(csv.DictReader(text.splitlines()))
    stripped = text.lstrip()
    if stripped.startswith("[") or (stripped.startswith("{") and suffix == ".json"):
        doc = json.loads(text)
        doc = doc.get("data", [doc]) if isinstance(doc, dict) else doc
        if not isinstance(doc, list):
            raise ValueError(f"`data` is a JSON {type(doc).__name__}; expected a list of rows (objects)")
        rows = doc
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if (bad := next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)) is not None:
        raise ValueError(f"row {bad + 1} is a JSON {type(rows[bad]).__name__}; expected an object per row "
                         "(a trace id and a pass/fail label or a score)")
    return rows


def _first(row: dict, cols: tuple[str, ...]) -> Any:
    for c in cols:
        v = row.get(c)
        if v not in (None, "") and not (isinstance(v, float) and math.isnan(v)):
            return c, v
    return None, None


def row_passed(row: dict, threshold: float) -> bool | None:
    """One row's outcome: a pass/fail word, else its score against `threshold`; None when it has neither."""
    for c in WORD_COLUMNS:
        v = row.get(c)
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in PASS_WORDS | FAIL_WORDS:
            return v.strip().lower() in PASS_WORDS
    _c, v = _first(row, SCORE_COLUMNS)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x >= threshold


def load_outcomes(path: str | Path, name: str | None = None, threshold: float = 1.0) -> dict[str, bool]:
    """{trace id: passed} from an outcomes file (module docstring). ValueError names what is missing."""
    path = Path(path)
    try:
        rows = _rows(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"--outcomes {path}: cannot read it ({exc})") from None
    names = {str(v) for r in rows for _c, v in [_first(r, NAME_COLUMNS)] if v is not None}
    if name is None and len(names) > 1:
        raise ValueError(f"--outcomes {path} holds {len(names)} evaluations ({', '.join(sorted(names)[:5])}): "
                         f"name the one that grades a run with --outcome-name")
    out: dict[str, bool] = {}
    for r in rows:
        _c, tid = _first(r, ID_COLUMNS)
        if tid is None:
            raise ValueError(f"--outcomes {path}: a row without a trace id (one of {', '.join(ID_COLUMNS)}): {r}")
        if name is not None and str(_first(r, NAME_COLUMNS)[1]) != name:
            continue
        ok = row_passed(r, threshold)
        if ok is None:
            raise ValueError(f"--outcomes {path}: trace {tid}: no pass/fail word or score ({', '.join(WORD_COLUMNS)}"
                             f", {', '.join(SCORE_COLUMNS)})")
        out[str(tid)] = out.get(str(tid), True) and ok
    if rows and not out:
        raise ValueError(f"--outcomes {path}: no row of evaluation {name!r} (it holds {', '.join(sorted(names))})")
    return out


@dataclass
class Grader:
    """The outcomes a run is given (`IngestConfig.outcomes`, `outcome_name`, `pass_threshold`)."""

    outcomes: dict[str, bool] = field(default_factory=dict)
    name: str | None = None
    threshold: float = 1.0

    @classmethod
    def of(cls, limits) -> Grader | None:
        """The grader an IngestConfig asks for (None: the log's own grades only)."""
        path, name = getattr(limits, "outcomes", None), getattr(limits, "outcome_name", None)
        threshold = getattr(limits, "pass_threshold", 1.0)
        if path is None and name is None:
            return None
        return cls(load_outcomes(path, name, threshold) if path else {}, name, threshold)

    def grade(self, trace) -> tuple[bool, str, str] | None:
        """(passed, signal, detail) from the team's outcomes or the named recorded score; None: no word on it."""
        if trace.trace_id in self.outcomes:
            ok = self.outcomes[trace.trace_id]
            return ok, "outcomes", f"the outcomes file grades it {'passed' if ok else 'failed'}"
        scores = (trace.metadata or {}).get("scores") if isinstance(trace.metadata, dict) else None
        if self.name is not None and isinstance(scores, dict) and self.name in scores:
            ok = row_passed({"value": scores[self.name]}, self.threshold)
            if ok is not None:
                return ok, "score", f"its recorded score {self.name}={scores[self.name]!r} (pass at >= {self.threshold:g})"
        return None


_GRADERS: dict[tuple, Grader | None] = {}  # one load of an outcomes file per run (validate calls once a trace)


def grade(trace, limits):
    """`trace` with the grade `limits` asks for (`--outcomes`, `--outcome-name`): run_status succeeded or
    failed, and metadata `graded_by` (the signal) and `graded_why`; unchanged where no grader has a word."""
    key = (getattr(limits, "outcomes", None), getattr(limits, "outcome_name", None),
           getattr(limits, "pass_threshold", 1.0))
    if key[:2] == (None, None):
        return trace
    if key[0] is not None:
        st = Path(key[0]).stat()
        key += (st.st_size, st.st_mtime_ns)  # a file rewritten between two runs of one process is read again
    if key not in _GRADERS:
        if len(_GRADERS) > 8:
            _GRADERS.clear()
        _GRADERS[key] = Grader.of(limits)
    graded = _GRADERS[key].grade(trace)
    if graded is None:
        return trace
    ok, signal, why = graded
    trace.run_status = "succeeded" if ok else "failed"
    trace.metadata = {**(trace.metadata if isinstance(trace.metadata, dict) else {}), "graded_by": signal,
                      "graded_why": why}
    return trace


def signal_of(message: str | None) -> str:
    """The signal a `succeeded_run` row names (its message's first word); older rows: `run_status`."""
    head = (message or "").split(":", 1)[0].strip()
    return head if head in SIGNALS else "run_status"


def count_signals(rows) -> dict[str, int]:
    """{signal: runs} of errors/ rows ({reason, message} dicts): the runs set aside, by what graded them."""
    out: dict[str, int] = {}
    for r in rows:
        if r.get("reason") == "succeeded_run":
            sig = signal_of(r.get("message"))
            out[sig] = out.get(sig, 0) + 1
    return out
