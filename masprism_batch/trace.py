"""In-memory form of one canonical trace (a row of `schema.TRACES`).

Adapters build these; `to_row()` / `from_row()` convert to and from the Arrow row dict, so every stage after
ingest speaks the same types whether the trace came from a file or a Parquet dataset.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any


@dataclass
class Step:
    index: int
    agent: str | None
    content: str
    role: str | None = None
    kind: str = "message"  # message | llm | tool | agent | other
    span_id: str | None = None
    parent_span_id: str | None = None
    start_time: datetime | None = None
    # the error the log records for this step (ingest/status.py `error_text`), also inside `content`
    error: str | None = None


@dataclass
class Labels:
    mistake_step: int | None = None
    mistake_agent: str | None = None
    error_locations: list[str] | None = None
    error_impacts: list[str] | None = None
    error_categories: list[str] | None = None


@dataclass
class Trace:
    trace_id: str
    source: str
    steps: list[Step]
    system: str | None = None
    question: str | None = None
    labels: Labels | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    # failed | succeeded | unknown, as the log records it (ingest/status.py); only failed and unknown runs are
    # attributed unless --all-runs
    run_status: str = "unknown"

    def to_row(self) -> dict[str, Any]:
        """The one row encoder (ingest, staging, packs). Fields are read, not `asdict`-copied: the deep copy
        was a third of ingest time on real data, and the row is serialised at once."""
        labels = self.labels
        return {
            "trace_id": self.trace_id,
            "source": self.source,
            "system": self.system,
            "question": self.question,
            "steps": [{k: getattr(s, k) for k in _STEP_FIELDS} for s in self.steps],
            "labels": None if labels is None else {k: getattr(labels, k) for k in _LABEL_FIELDS},
            "metadata": json.dumps(self.metadata, ensure_ascii=False, default=str),
            "run_status": self.run_status,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Trace:
        labels = row.get("labels")
        meta = row.get("metadata")
        return cls(
            trace_id=row["trace_id"],
            source=row["source"],
            system=row.get("system"),
            question=row.get("question"),
            steps=[Step(**s) for s in (row.get("steps") or [])],
            labels=Labels(**labels) if labels is not None else None,
            metadata=json.loads(meta) if meta else {},
            run_status=row.get("run_status") or "unknown",  # outputs written before the field: unknown
        )

    @property
    def agents(self) -> list[str | None]:
        return [s.agent for s in self.steps]


_STEP_FIELDS = tuple(f.name for f in fields(Step))
_LABEL_FIELDS = tuple(f.name for f in fields(Labels))


_SUFFIX = re.compile(r"\s*\([^()]*\)\s*$")


def norm_agent(name: str | None) -> str | None:
    """An agent's name as labels and verdicts compare it: 'Orchestrator (-> WebSurfer)' -> 'orchestrator';
    'Websurfer' == 'WebSurfer' (case-insensitive); a blank name is None."""
    if name is None:
        return None
    s = name.strip()
    while True:
        t = _SUFFIX.sub("", s)
        if t == s:
            break
        s = t
    s = " ".join(s.split()).casefold()
    return s or None


# what starts a formula in a spreadsheet (OWASP, "CSV injection"): a trace id or agent name read from a log, written
# into a labels file a person opens in Excel or Sheets (`pick`), must not run as one there; `fit` reads it back
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def sheet_cell(text: str) -> str:
    """A text cell of a CSV a person opens in a spreadsheet: a leading apostrophe where it would start a formula
    (spreadsheets show the cell as text); `unsheet` takes it off again when the file comes back."""
    return "'" + text if text.startswith(FORMULA_START) else text


def unsheet(text: str) -> str:
    """A cell as `sheet_cell` had it before its guard: the apostrophe off where a formula character follows it."""
    return text[1:] if text[:1] == "'" and text[1:].startswith(FORMULA_START) else text
