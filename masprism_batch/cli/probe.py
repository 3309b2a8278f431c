"""Checks of what a run was given, made before a model loads or OUT is written (issue 35, item 7):

- a forced `--format` on the first input files: a wrong one used to read and reject every file (68 rejections
  for a folder of TRAIL traces) and create OUT before saying so;
- a `--ranker` file: that it exists and reads as a ranker file (a CSV was caught only after the model loaded);
  whether it fits the model is checked once the model is known (`fit.check_ranker`).
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path

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


def check_ranker_file(cfg) -> None:
    """`--ranker` exists and parses as a ranker file, with the loader the model stage uses; exit 1 otherwise."""
    from masprism_batch.fit import rankfile

    path = cfg.method.ranker_weights
    if path is None or rankfile.is_packaged(path):
        return
    target = Path(path) / rankfile.PACKAGED if Path(path).is_dir() else Path(path)
    if not target.is_file():
        raise fail(f"ranker file not found: {target}")
    try:
        rankfile._cached(target)  # noqa: SLF001 - the same cached read the stage uses
    except (rankfile.RankerFileError, OSError, ValueError) as exc:
        raise fail(f"--ranker {path}: {exc}") from None
