"""What reading may cost: the run's caps (`LIMITS`, set by `read_inputs` from config section `ingest`) and the
estimate of what a JSON parse builds, checked before the parse (`common.check_parsed`), so memory is bounded by
what is parsed and not only by the bytes read."""

from __future__ import annotations

import contextvars

from masprism_batch.config import IngestConfig

LIMITS: contextvars.ContextVar[IngestConfig] = contextvars.ContextVar(
    "ingest_limits", default=IngestConfig())  # noqa: B039 - a frozen model; read_inputs sets the run's caps
# What a parse may build, as a multiple of the bytes it may read (max_file_bytes for a document, max_record_bytes
# for a JSON line): JSON of small containers (`[{},{},...]`) builds ~20x its size in Python objects, so a byte cap
# alone let a 128 KB .json.gz reach 3.4 GB. Real traces (text-heavy) estimate at ~1.1x their size.
PARSED_FACTOR = 4


def parsed_cost(text: str) -> int:
    """An upper estimate of the bytes `json.loads(text)` builds: the text, plus per container (a dict or list:
    ~64 bytes empty, and a pointer in its parent), per value separator (an item's slot, a number object) and per
    string (~50 bytes each). Linear C scans, ~1% of the parse's time."""
    return (len(text) + 72 * (text.count("{") + text.count("[")) + 48 * text.count(",")
            + 28 * text.count('"'))


def parsed_over(text: str, max_parsed: int) -> int | None:
    """The estimated bytes parsing `text` would build (`parsed_cost`) when more than `max_parsed`, else None; free
    for text too short to reach it (the estimate is at most 73x the text)."""
    if len(text) * 73 > max_parsed:
        cost = parsed_cost(text)
        if cost > max_parsed:
            return cost
    return None
