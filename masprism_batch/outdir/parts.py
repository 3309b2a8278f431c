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
import stat
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


_STREAM_ALIASES = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/")


def output_target(path: Path | str) -> str:
    """What writing a result to `path` does: "new" (no file there), "file" (a regular file, replaced atomically)
    or "stream" (a character device or FIFO, or the process's own stdout/stderr: written into, never replaced).
    OutdirUnsafe for what is never touched: a symbolic link to a file (replacing it would replace the link, and
    following it would write outside where the user pointed), a block device, a socket."""
    p = str(path)
    if p.startswith(_STREAM_ALIASES):
        return "stream"
    try:
        st = os.stat(p)  # follows links
    except FileNotFoundError:
        if os.path.islink(p):
            raise OutdirUnsafe(f"output {p} is a symbolic link (to {os.readlink(p)}, which does not exist): it is "
                               "never replaced, --force or not; give another -o") from None
        return "new"
    except OSError as e:
        raise OutdirUnsafe(f"output {p}: {e.strerror or e}") from None
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return "stream"
    if os.path.islink(p):
        raise OutdirUnsafe(f"output {p} is a symbolic link (to {os.path.realpath(p)}): it is never replaced, "
                           "--force or not; give the file itself or another -o")
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if not stat.S_ISREG(st.st_mode):
        raise OutdirUnsafe(f"output {p} is not a regular file (a block device or socket): not written")
    return "file"


@contextlib.contextmanager
def atomic_output(path: Path | str, mode: str = "w") -> Iterator[IO]:
    """Open a file to stream into; it appears at `path` only if the block finishes (reports, exports). A device
    or FIFO (`/dev/stdout`) is written into, never replaced; a link or other special file raises OutdirUnsafe
    (`output_target`)."""
    path = Path(path)
    text = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
    if output_target(path) == "stream":
        with open(path, mode, **text) as f:
            yield f
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{uuid.uuid4().hex}-{path.name}"
    try:
        with open(tmp, mode, **text) as f:
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
