"""Old verdicts kept as history: before a command replaces a trace's live attribution row (`rescore --in-place`,
a nightly refresh), it copies the current row here, so no verdict a team acted on is lost.

`OUT/history/attributions-<UTC yyyymmddTHHMMSSffffffZ>-<reason>.parquet`: the attributions rows as they were, plus
`superseded_at` (when they were replaced) and `superseded_by` (the reason). The reason comes from a fixed set, never
from trace fields, so no file name is built from data. `show`/`stats` read the live `attributions/` only.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from masprism_batch.outdir import manifest
from masprism_batch.outdir.parts import write_table_atomic
from masprism_batch.outdir.reads import read_dataset

HISTORY_DIR = "history"
REASONS = ("rescore", "refresh")  # what may supersede a verdict; the file name's last part


def archive_attributions(out: Path, trace_ids: Collection[str] | None, reason: str) -> int:
    """Copy the current attribution rows of `trace_ids` (all when None) into one history file; the row count.

    Removing or replacing the live rows is the caller's job. Nothing is written when no row matches."""
    if reason not in REASONS:
        raise ValueError(f"unknown history reason {reason!r}; expected one of {', '.join(REASONS)}")
    out = Path(out)
    src = out / "attributions"
    if not src.is_dir():
        return 0
    flt = None
    if trace_ids is not None:
        # typed: an empty id list would be an array of type null, which Arrow cannot compare with strings
        flt = ds.field("trace_id").isin(pa.array(sorted(set(trace_ids)), pa.string()))
    table = read_dataset(src, filter=flt)
    if table.num_rows == 0:
        return 0
    now = datetime.now(timezone.utc)
    table = table.append_column(pa.field("superseded_at", pa.timestamp("us", tz="UTC")),
                                pa.array([now] * table.num_rows, pa.timestamp("us", tz="UTC")))
    table = table.append_column(pa.field("superseded_by", pa.string()), pa.array([reason] * table.num_rows, pa.string()))
    folder = out / HISTORY_DIR
    if folder.is_symlink():  # a tree this tool owns: never written through a link
        raise manifest.OutdirUnsafe(f"{folder} is a symbolic link: remove it or use a new OUTDIR")
    write_table_atomic(table, folder / f"attributions-{now.strftime('%Y%m%dT%H%M%S%fZ')}-{reason}.parquet",
                       durable=True)
    return table.num_rows


def history_files(out: Path) -> list[Path]:
    """The history files of OUTDIR `out`, oldest first (their names sort by time)."""
    folder = Path(out) / HISTORY_DIR
    return sorted(p for p in folder.glob("attributions-*.parquet")) if folder.is_dir() else []
