"""Labels for `masprism-batch fit` (issue 23): from the traces themselves or from a labels file.

Labels file: JSON lines or CSV, one labelled step per row, columns `trace_id`, `step` (0-based index into the
trace's steps) or `span_id`, and optionally `agent` (the blamed agent). Outcomes, per row:
- a trace id that is in none of the runs, a step out of range, a span id the trace does not have, or a row with
  neither step nor span id: the row is skipped and reported with its line number and reason;
- several rows of one trace: a trace with several labelled steps (a verdict naming any of them is a hit);
  their agents are all accepted.
With a labels file, labels carried by the traces are not used.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..eval.common import norm_agent
from ..trace import Trace


class LabelsFileError(ValueError):
    """The labels file cannot be read at all (not JSON lines / CSV, no trace_id column)."""


@dataclass
class Gold:
    steps: list[int] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)


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
    return Gold(steps, agents) if steps else None


def read_rows(path: Path) -> list[tuple[int, dict]]:
    """(line number, row) of a JSON-lines or CSV labels file (CSV when the first line is not a JSON object)."""
    text = Path(path).read_text(encoding="utf-8-sig")
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    rows: list[tuple[int, dict]] = []
    if first.lstrip().startswith("{"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LabelsFileError(f"{path}:{n}: not a JSON object ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise LabelsFileError(f"{path}:{n}: not a JSON object")
            rows.append((n, obj))
    else:
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames or "trace_id" not in reader.fieldnames:
            raise LabelsFileError(f"{path}: no trace_id column (JSON lines or CSV with trace_id, step or span_id, "
                                  "agent)")
        rows = [(n, {k: (v if v != "" else None) for k, v in r.items()}) for n, r in enumerate(reader, 2)]
    if not rows:
        raise LabelsFileError(f"{path}: no labelled rows")
    return rows


def from_file(path: Path, traces: dict[str, Trace]) -> tuple[dict[str, Gold], list[str]]:
    """({trace_id: Gold}, problems: one message per skipped row)."""
    gold: dict[str, Gold] = {}
    problems: list[str] = []
    for n, r in read_rows(path):
        where = f"{Path(path).name}:{n}"
        tid = r.get("trace_id")
        t = traces.get(str(tid)) if tid is not None else None
        if t is None:
            problems.append(f"{where}: unknown trace {tid!r} (in none of the runs given): row skipped")
            continue
        step = r.get("step")
        if step is not None:
            try:
                step = int(step)
            except (TypeError, ValueError):
                problems.append(f"{where}: step {step!r} is not an integer: row skipped")
                continue
            if not 0 <= step < len(t.steps):
                problems.append(f"{where}: step {step} out of range (trace {tid!r} has {len(t.steps)} steps, "
                                "0-based): row skipped")
                continue
        elif r.get("span_id") is not None:
            idx = [i for i, s in enumerate(t.steps) if s.span_id == str(r["span_id"])]
            if not idx:
                problems.append(f"{where}: span {r['span_id']!r} is not a step of trace {tid!r}: row skipped")
                continue
            step = idx[0]
        else:
            problems.append(f"{where}: neither step nor span_id: row skipped")
            continue
        g = gold.setdefault(t.trace_id, Gold())
        if step not in g.steps:
            g.steps.append(step)
        a = norm_agent(r.get("agent")) if r.get("agent") is not None else None
        if a and a not in g.agents:
            g.agents.append(a)
    return gold, problems
