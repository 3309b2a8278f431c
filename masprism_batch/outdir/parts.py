"""The only place that writes result files: Parquet datasets written part by part, each part atomically.

A part is written to a hidden temporary name in the same directory and renamed into place, so a reader
(DuckDB `read_parquet('DIR/*.parquet')`, `pyarrow.dataset.dataset(DIR)`) never sees a half-written file and a
killed run leaves no partial part behind (only `.tmp-*` files, which readers ignore and resume deletes).

Every write of a result file goes through the writers here, so no second writer can appear beside them; the
exactly-once layer of the batch engines (`outdir/shards.ShardStore`) writes its parts and manifest entries
with them, and the readers (`outdir/reads.py`) trust only the parts that layer committed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from masprism_batch.outdir.lock import LOCK_NAME, LOCK_STALE_SECONDS, OutdirLock, OutdirLocked  # noqa: F401 - re-exported
from masprism_batch.outdir.manifest import DamagedOutput, OutdirUnsafe  # noqa: F401 - re-exported: the errors of this module's API

log = logging.getLogger(__name__)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_table_atomic(table: pa.Table, path: Path, durable: bool = False) -> None:
    """Write `table` to `path` through a temporary name; `durable` also fsyncs (commit points need it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}"
    try:
        pq.write_table(table, tmp, compression="zstd")
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json_atomic(obj: Any, path: Path, durable: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=True, default=str)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            _fsync(path.parent)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_output(path: Path | str, mode: str = "w") -> Iterator[IO]:
    """Open a file to stream into; it appears at `path` only if the block finishes (reports, exports)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}"
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": "\n"})) as f:
            yield f
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
