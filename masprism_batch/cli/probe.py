"""A forced `--format` checked on the first input files before a model loads or OUT is written: a
wrong one used to read and reject every file (68 rejections for a folder of TRAIL traces) and create
OUT before saying so. (A `--ranker` file is checked by `common.check_ranker`.)
"""

from __future__ import annotations

from itertools import islice

from masprism_batch.cli.common import fail

PROBE_FILES = 3  # files read to decide; one that parses under the forced format is enough


def _first_trace(path: str, fmt: str):
    from masprism_batch.ingest.common import Context
    from masprism_batch.ingest.detect import read_file

    errors: list[dict] = []
    try:
        return next(iter(read_file(path, fmt, Context(path, errors.append))), None), errors
    except Exception as exc:  # noqa: BLE001 - the real run reports it with its reason; here only "no trace"
        return None, [{"reason": type(exc).__name__, "message": str(exc)}]


def _name_of(trace) -> str:
    """The `--format` value that reads this trace (what auto-detection chose)."""
    from masprism_batch.ingest import FORMATS

    for cand in (trace.metadata.get("format"), (trace.source or "").split("/")[0]):
        if isinstance(cand, str) and cand in FORMATS:
            return cand
    return "auto"


def check_format(inputs: list[str], fmt: str) -> None:
    """`--format fmt` must read at least one of the first files; else exit 1 naming the detected format."""
    if fmt == "auto":
        return
    from masprism_batch.ingest.sources import expand

    files = list(islice(expand(list(inputs), lambda _row: None), PROBE_FILES))
    if not files or any(p.endswith((".parquet",)) for p in files):
        return  # nothing to probe, or canonical Parquet (read in place, checked by its schema)
    seen = []
    for path in files:
        trace, errors = _first_trace(path, fmt)
        if trace is not None:
            return
        found, _ = _first_trace(path, "auto")
        seen.append((path, _name_of(found) if found is not None else None, errors))
    path, detected, errors = seen[0]
    why = f" ({errors[0]['reason']}: {str(errors[0].get('message', ''))[:160]})" if errors else ""
    hint = (f"it looks like --format {detected}" if detected and detected != fmt else
            "auto-detection reads no trace from it either")
    raise fail(f"--format {fmt} reads no trace from the first {len(seen)} input file(s), e.g. {path}{why}; {hint} "
               f"(or --format auto); nothing was written")
