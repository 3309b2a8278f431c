"""The only place that writes result files: Parquet datasets written part by part, each part atomically.

A part is written to a hidden temporary name in the same directory and renamed into place, so a reader
(DuckDB `read_parquet('DIR/*.parquet')`, `pyarrow.dataset.dataset(DIR)`) never sees a half-written file and a
killed run leaves no partial part behind (only `.tmp-*` files, which readers ignore and resume deletes).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)


def write_table_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}"
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class DatasetWriter:
    """Buffers rows of one table and flushes them as numbered Parquet parts under `directory`.

    Memory stays bounded by `rows_per_part` rows (plus the largest single row).
    """

    def __init__(self, directory: Path | str, schema: pa.Schema, rows_per_part: int = 256, prefix: str | None = None):
        self.directory = Path(directory)
        self.schema = schema
        self.rows_per_part = rows_per_part
        self.prefix = prefix or f"part-{uuid.uuid4().hex[:8]}"
        self._buf: list[dict[str, Any]] = []
        self._parts = 0
        self.rows_written = 0
        self.directory.mkdir(parents=True, exist_ok=True)

    def write(self, row: dict[str, Any]) -> None:
        self._buf.append(row)
        if len(self._buf) >= self.rows_per_part:
            self.flush()

    def write_many(self, rows: Iterable[dict[str, Any]]) -> None:
        for r in rows:
            self.write(r)

    def flush(self) -> None:
        if not self._buf:
            return
        table = pa.Table.from_pylist(self._buf, schema=self.schema)
        write_table_atomic(table, self.directory / f"{self.prefix}-{self._parts:05d}.parquet")
        self._parts += 1
        self.rows_written += len(self._buf)
        self._buf.clear()

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_dataset(directory: Path | str, columns: list[str] | None = None, filter=None) -> pa.Table:
    """Read a dataset written by DatasetWriter (ignores temporary files); optionally only some columns/rows."""
    return _open_dataset(directory).to_table(columns=columns, filter=filter)


def iter_batches(directory: Path | str, columns: list[str] | None = None, filter=None,
                 batch_size: int = 1024) -> Iterator[pa.RecordBatch]:
    """Stream a dataset in record batches, so a reader's memory stays bounded on large outputs."""
    yield from _open_dataset(directory).to_batches(columns=columns, filter=filter, batch_size=batch_size)


def _open_dataset(directory: Path | str):
    import pyarrow.dataset as ds

    return ds.dataset(str(directory), format="parquet", exclude_invalid_files=True,
                      ignore_prefixes=[".", "_"])
