"""Reading result datasets: the parts a writer renamed into place, and inside a run's OUTDIR only those of
committed shards (`outdir/shards.py`), so a reader never sees a half-written file or a shard a resume will
rewrite. Temporary (`.tmp-*`) and hidden files are never read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from masprism_batch.outdir import manifest
from masprism_batch.outdir.shards import MANIFEST_DIR, ShardStore

log = logging.getLogger(__name__)


def read_dataset(directory: Path | str, columns: list[str] | None = None, filter=None) -> pa.Table:
    """Read a dataset written by DatasetWriter (ignores temporary files); optionally only some columns/rows."""
    try:
        return open_dataset(directory).to_table(columns=columns, filter=filter)
    except pa.ArrowInvalid as exc:
        raise damaged(directory, exc) from None


def iter_batches(directory: Path | str, columns: list[str] | None = None, filter=None,
                 batch_size: int = 1024) -> Iterator[pa.RecordBatch]:
    """Stream a dataset in record batches, so a reader's memory stays bounded on large outputs."""
    try:
        yield from open_dataset(directory).to_batches(columns=columns, filter=filter, batch_size=batch_size)
    except pa.ArrowInvalid as exc:
        raise damaged(directory, exc) from None


def damaged(directory: Path | str, exc: Exception) -> manifest.DamagedOutput:
    """What a reader says where a table's parts cannot be read (a stray or cut-short file among them: every
    command reading the OUTDIR would otherwise fail with pyarrow's words as an internal error): the parts whose
    footer does not read, named, and what to do. Costs a footer read per part, only on failure."""
    import pyarrow.parquet as pq

    bad = []
    for p in sorted(Path(directory).glob("*.parquet")):
        if p.name.startswith((".", "_")):
            continue
        try:
            pq.read_metadata(p)
        except (pa.ArrowException, OSError):
            bad.append(p.name)
    what = (f"{', '.join(bad[:5])}{f' and {len(bad) - 5} more' if len(bad) > 5 else ''} "
            f"{'is' if len(bad) == 1 else 'are'} not readable Parquet" if bad else "its parts cannot be read together")
    return manifest.DamagedOutput(
        f"{directory}: {what} ({exc}); move any file a run did not write out of the folder, or rerun the command "
        "that wrote it into a new OUTDIR")


def open_dataset(directory: Path | str):
    """The dataset under `directory`; inside a ShardStore OUTDIR only the parts of committed shards, so a
    reader of a run that is still going, or was killed, never counts a shard its resume will rewrite."""
    import pyarrow.dataset as ds

    directory = Path(directory)
    marker = directory.parent / "_INGEST.json"  # an `ingest` OUTDIR: complete only once the marker says so
    text = manifest.read_control(marker)  # never blocks: a FIFO planted here is refused (OutdirUnsafe)
    if text is not None:
        try:
            complete = json.loads(text).get("complete") is True
        except (AttributeError, ValueError):
            complete = False
        if not complete:
            log.warning("%s: the ingest that wrote it did not finish (%s): reading a partial output",
                        directory, marker)
    if not (directory.parent / MANIFEST_DIR).is_dir():
        got = ds.dataset(str(directory), format="parquet", exclude_invalid_files=True, ignore_prefixes=[".", "_"])
        schema = _schema(directory.name, got.schema)
        return got if schema is None else ds.dataset(got.files, schema=schema, format="parquet")
    keep = ShardStore(directory.parent).verified()
    files, dropped = [], 0
    for p in sorted(directory.glob("*.parquet")):
        if p.name.startswith((".", "_")):
            continue
        if p.name.startswith("shard-") and p.stem[len("shard-"):] not in keep:
            dropped += 1
            continue
        files.append(str(p))
    if dropped:
        log.info("%s: %d part(s) of uncommitted shards ignored", directory, dropped)
    if not files:
        from masprism_batch.schema import TABLES  # an empty dataset still has its table's columns

        return ds.dataset([], schema=TABLES.get(directory.name, pa.schema([])), format="parquet")
    import pyarrow.parquet as pq

    try:
        first = pq.read_schema(files[0])  # one footer, as pyarrow's own discovery reads
    except pa.ArrowInvalid as exc:
        raise damaged(directory, exc) from None
    schema = _schema(directory.name, first)
    return ds.dataset(files, schema=schema, format="parquet")  # schema None: the first file's, as before


def _schema(table: str, first: pa.Schema) -> pa.Schema | None:
    """The schema to read a table's files with: its own columns (schema.TABLES) and whatever the first file adds,
    so that an OUTDIR resumed across a release that added columns (issue 59's read_steps, set_size, ...) reads
    them as null in the older shards instead of losing them where an older shard happens to come first (pyarrow
    takes a dataset's schema from its first file). None for a table it does not know."""
    from masprism_batch.schema import TABLES

    want = TABLES.get(table)
    if want is None:
        return None
    try:
        return pa.unify_schemas([want, first], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # a column whose type changed: the files' own, as before
        return None
