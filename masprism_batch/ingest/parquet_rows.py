"""Canonical Parquet read in bounded pieces, for `ingest` (canonical.parse_parquet) and for a dataset read in place
by `run`/`attribute` (pipelines/plan.read_shard, plan_inputs).

A Parquet file is small on disk for what it holds: a value repeated through a dictionary page, or a page that
compresses 1,000:1, decodes to gigabytes (a 22 KB file took 4.1 GB when a row group was read whole).
Three bounds, each checked before the values are decoded:
- a row group whose columns claim (footer statistics) more than `max_file_bytes` uncompressed is not read;
- string columns are read as dictionaries (`read_dictionary`), so a value repeated a million times is held once,
  and the decoded size of every row is computed from the dictionary lengths; a row over `max_record_bytes` is
  rejected alone (`record_too_large`), as a JSON line over it is;
- rows are read `BATCH_ROWS` at a time, decoded together when the batch is within one record's cap, else one
  at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from masprism_batch import schema
from masprism_batch.config import IngestConfig
from masprism_batch.ingest.common import MAX_TRACE_ID_CHARS, IngestError, short
from masprism_batch.ingest.file_bytes import regular_file

BATCH_ROWS = 64  # rows per batch: each batch carries its row group's dictionaries, so not fewer


@contextlib.contextmanager
def open_file(path: str, columns: list[str] | None = None) -> Iterator[tuple[pq.ParquetFile, list[str], pa.DataType]]:
    """(file opened with its string columns kept as dictionaries, the canonical columns it has, a row of them
    with plain strings: what a row is decoded to), for the block. The file is opened as every input is
    (`file_bytes.regular_file`: O_NONBLOCK, fstat on the descriptor, regular files only) and Parquet reads from
    that descriptor: a FIFO swapped in under the name after the walk's check is refused, never waited on."""
    with regular_file(path) as f:
        try:
            plain = pq.ParquetFile(f)
            names = plain.schema_arrow.names
            cols = [c for c in (columns or schema.TRACES.names) if c in names]
            strings = [c.path for c in plain.schema if c.physical_type == "BYTE_ARRAY" and c.path.split(".")[0] in cols]
            dense = pa.struct([plain.schema_arrow.field(c) for c in cols])
            pf = pq.ParquetFile(f, metadata=plain.metadata, read_dictionary=strings)
        except (OSError, pa.ArrowException) as e:
            raise IngestError("invalid_parquet", f"not a readable Parquet file: {short(str(e), 300)}") from None
        yield pf, cols, dense


def value_bytes(arr: pa.Array) -> np.ndarray:
    """Decoded bytes of each element of `arr` (strings through their dictionary, lists and structs summed), from
    lengths only: nothing is decoded."""
    n = len(arr)
    t = arr.type
    if pa.types.is_dictionary(t):
        return _ints(pc.take(pa.array(value_bytes(arr.dictionary)), arr.indices))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return _ints(pc.binary_length(arr))
    if pa.types.is_struct(t):
        out = np.zeros(n, dtype=np.int64)
        for child in arr.flatten():
            out += value_bytes(child)
        return out
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        child = value_bytes(arr.flatten())
        parents = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
        return np.bincount(parents, weights=child, minlength=n).astype(np.int64)
    try:  # a fixed-width column (numbers, times; mistyped columns included), or a null column (no width)
        width = t.bit_width
    except (ValueError, AttributeError):
        width = 8
    return np.full(n, max(1, width // 8), dtype=np.int64)


def _ints(arr: pa.Array) -> np.ndarray:
    # nulls count 0 (to_numpy gives NaN for them; pyarrow's fill_null would import pandas, ~1.4 s once)
    return np.nan_to_num(arr.to_numpy(zero_copy_only=False)).astype(np.int64)


def _group_bytes(pf: pq.ParquetFile, g: int, cols: list[str]) -> int:
    rg = pf.metadata.row_group(g)
    return sum(rg.column(i).total_uncompressed_size for i in range(rg.num_columns)
               if rg.column(i).path_in_schema.split(".")[0] in cols)


def _groups(pf: pq.ParquetFile, start: int, stop: int | None) -> Iterator[tuple[int, int, int]]:
    """(row group, its first row, its end) of the groups that hold rows of [start, stop)."""
    offset = 0
    for g in range(pf.metadata.num_row_groups):
        lo, offset = offset, offset + pf.metadata.row_group(g).num_rows
        if offset > start and (stop is None or lo < stop):
            yield g, lo, offset


def read_rows(path: str, limits: IngestConfig, start: int = 0, stop: int | None = None,
              columns: list[str] | None = None) -> Iterator[tuple[int, int, dict[str, Any] | IngestError]]:
    """(first row, end row, the row as a dict or the IngestError that rejects rows [first, end)) for the rows of
    [start, stop) (0-based), in order; a row group refused whole is one item spanning its rows in range."""
    with open_file(path, columns) as (pf, cols, dense):
        yield from _read_groups(pf, cols, dense, limits, start, stop)


def _read_groups(pf: pq.ParquetFile, cols: list[str], dense: pa.DataType, limits: IngestConfig, start: int,
                 stop: int | None) -> Iterator[tuple[int, int, dict[str, Any] | IngestError]]:
    for g, lo, hi in _groups(pf, start, stop):
        first, end = max(lo, start), hi if stop is None else min(hi, stop)
        size = _group_bytes(pf, g, cols)
        if size > limits.max_file_bytes:
            yield first, end, IngestError(
                "record_too_large", f"rows {first + 1}-{end} (row group {g}) hold {size} bytes uncompressed, more "
                f"than max_file_bytes ({limits.max_file_bytes}): not read", f"rows {first + 1}-{end}")
            continue
        row = lo
        try:
            for batch in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[g], columns=cols):
                struct = batch.to_struct_array()
                sizes = value_bytes(struct)
                # decoded (dictionaries cast to plain strings: to_pylist on a dictionary array is ~20x slower)
                # together when the whole batch is within one record's cap, else one row at a time
                rows = struct.cast(dense).to_pylist() if sizes.sum() <= limits.max_record_bytes else None
                for j in range(batch.num_rows):
                    i = row + j
                    if first <= i < end:
                        yield i, i + 1, rows[j] if rows is not None else _row(struct, dense, j, int(sizes[j]), i,
                                                                              limits)
                row += batch.num_rows
                if row >= end:
                    break
        except (OSError, pa.ArrowException, RecursionError) as e:
            raise IngestError("invalid_parquet", f"Parquet read failed after row {row}: {short(str(e), 300)}") from None


def _row(struct: pa.StructArray, dense: pa.DataType, j: int, size: int, i: int,
         limits: IngestConfig) -> dict[str, Any] | IngestError:
    if size > limits.max_record_bytes:
        return IngestError("record_too_large", f"row {i + 1} decodes to {size} bytes, more than max_record_bytes "
                           f"({limits.max_record_bytes}): not read", f"row {i + 1}")
    return struct.slice(j, 1).cast(dense).to_pylist()[0]


def trace_id_keys(path: str, limits: IngestConfig) -> list[str | None]:
    """Per row, its trace id for duplicate checks, read in bounded pieces: an id longer than MAX_TRACE_ID_CHARS
    (rejected when its row is read) stands as a digest, so a repeated 1 MB id is never decoded per row."""
    keys: list[str | None] = []
    with open_file(path, ["trace_id"]) as (pf, cols, _):
        for g, lo, hi in _groups(pf, 0, None):
            if _group_bytes(pf, g, cols) > limits.max_file_bytes:
                keys += [None] * (hi - lo)  # the group is refused row by row when read (read_rows)
                continue
            for batch in pf.iter_batches(batch_size=64 * 1024, row_groups=[g], columns=cols):
                col = batch.column(0)
                if not pa.types.is_dictionary(col.type):
                    col = pc.dictionary_encode(col)
                entries = [_key(col.dictionary[k], n) for k, n in enumerate(value_bytes(col.dictionary))]
                keys += [None if k is None else entries[k] for k in col.indices.to_pylist()]
    return keys


def _key(value: pa.Scalar, nbytes: int) -> str:
    if nbytes <= MAX_TRACE_ID_CHARS:  # a character is at least a byte: short enough to be a real id
        return value.as_py()
    return "\0long-id:" + hashlib.blake2b(value.as_buffer(), digest_size=16).hexdigest()
