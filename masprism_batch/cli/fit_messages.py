"""`fit`'s report of the label rows it could not use: one summary line (a labels file of another run listed 58
"unknown trace ... row skipped" lines before the 3-line result); each row's own message with --verbose."""

from __future__ import annotations

import re
from collections import Counter

# (phrase in labels.from_file's / build_cases' message, the reason as the summary names it)
_REASONS = [("unknown trace", "trace in none of the runs"), ("is not an integer", "step not an integer"),
            ("out of range", "step out of range"), ("is not a step of trace", "span not a step of its trace"),
            ("neither step nor span_id", "no step or span_id"),
            ("step_scores rows for", "step_scores do not match the trace's steps")]
_TRACE = re.compile(r"trace '([^']*)'")
SHOWN = 3


def _reason(msg: str) -> str:
    return next((name for phrase, name in _REASONS if phrase in msg), "other")


def skipped_summary(problems: list[str], shown: int = SHOWN) -> str:
    """`N label rows skipped: <count> <reason>, ...; first: <id>, <id>, <id> (-v lists each)`."""
    reasons = Counter(_reason(p) for p in problems)
    ids = []
    for p in problems:
        m = _TRACE.search(p)  # the row's trace id; a row without one by its file:line
        label = m.group(1) if m else p.split(": ", 1)[0]
        if label not in ids:
            ids.append(label)
    first = ", ".join(ids[:shown]) + (f", … ({len(ids) - shown} more)" if len(ids) > shown else "")
    why = ", ".join(f"{n} {r}" for r, n in reasons.most_common())
    return f"{len(problems)} label row(s) skipped: {why}; first: {first} (-v lists each row)"
