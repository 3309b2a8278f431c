"""Reading an input file's bytes: only a regular file is opened, gzip is decompressed as a stream.

Reading allocates what the file holds, never a fixed reservation: a regular file is read by its size, and gzip
is decompressed in chunks with the decompressed bytes counted as they are produced, so a bomb stops at
`max_file_bytes` (one JSON document) or `max_record_bytes` (one JSON line), with peak memory about the cap.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import stat
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

from masprism_batch.ingest.common import IngestError
from masprism_batch.ingest.limits import LIMITS

GZIP_CHUNK = 8 * 1024**2  # decompressed bytes produced per step


def regular_file(path: str) -> BinaryIO:
    """`path` opened for reading (binary, the caller closes it) only if it is a regular file: O_NONBLOCK so a FIFO
    swapped in after the walk cannot block, then fstat on the open descriptor (no check-then-open race). Every
    input is opened here, Parquet included (`parquet_rows` reads from this file object, never by path)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise IngestError("unreadable_file", f"cannot read file: {e.strerror or e}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IngestError("not_a_regular_file", "not a regular file: not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def open_regular(path: str) -> Iterator[BinaryIO]:
    """`regular_file` as a context: closed when the block ends."""
    with regular_file(path) as f:
        yield f

@contextlib.contextmanager
def open_stream(path: str, line: Callable[[], int]) -> Iterator[BinaryIO]:
    """A regular file read as a stream, decompressed as it is read when it is gzip (its magic bytes or a .gz
    name). A read failure inside the block is the IngestError of its reason, naming the last line read
    (`line()`): the one place the line readers (`iter_lines`, `containers.iter_text_lines`) turn them into rows."""
    with open_regular(path) as raw:
        gz = raw.read(2) == b"\x1f\x8b" or path.endswith(".gz")
        raw.seek(0)
        try:
            yield gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise IngestError("invalid_gzip", f"corrupt or truncated gzip after line {line()}: {e}") from None
        except OSError as e:
            raise IngestError("unreadable_file", f"read failed after line {line()}: {e.strerror or e}") from None


def _gunzip(f: BinaryIO, cap: int) -> bytearray:
    """Decompress a gzip stream (concatenated members allowed) chunk by chunk into one buffer, counting the
    decompressed bytes as they come: past `cap` it stops (peak about cap + one chunk, never twice the output).
    """
    out = bytearray()
    d = zlib.decompressobj(wbits=31)
    pending = b""
    while True:
        if d.eof:  # a member ended: padding is tolerated (as gzip(1) does), another member may follow
            rest = d.unused_data.lstrip(b"\x00")
            if not rest:
                rest = f.read(1 << 20).lstrip(b"\x00")
                if not rest:
                    return out
            d, pending = zlib.decompressobj(wbits=31), rest
        if not pending:
            pending = d.unconsumed_tail or f.read(1 << 20)
        # with no input left, zlib may still hold output of what it consumed: drain it before calling it truncated
        chunk = d.decompress(pending, min(GZIP_CHUNK, cap + 1 - len(out)))
        if not pending and not chunk and not d.eof:
            raise IngestError("invalid_gzip", "corrupt or truncated gzip: the stream ends before its end marker")
        pending = d.unconsumed_tail
        out += chunk
        if len(out) > cap:
            raise IngestError("file_too_large", f"more than {cap} bytes after decompression (max_file_bytes)")


def read_bytes(path: str) -> bytes | bytearray:
    """Whole (decompressed) file; every failure is an IngestError with a stable reason. Allocates what the
    file holds (never a fixed reservation); decompressed size is capped by `max_file_bytes` as it is read."""
    cap = LIMITS.get().max_file_bytes
    try:
        with open_regular(path) as f:
            magic = f.read(2)
            if magic == b"\x1f\x8b":
                f.seek(0)
                try:
                    return _gunzip(f, cap)
                except zlib.error as e:
                    raise IngestError("invalid_gzip", f"corrupt gzip: {e}") from None
            if path.endswith(".gz"):
                raise IngestError("invalid_gzip", "file name ends in .gz but the data is not gzip")
            size = os.fstat(f.fileno()).st_size
            if size > cap:
                raise IngestError("file_too_large", f"{size} bytes, more than {cap} (max_file_bytes)")
            f.seek(0)
            return f.read(size)  # what stat said at open: a file growing meanwhile is read as it was
    except OSError as e:
        raise IngestError("unreadable_file", f"cannot read file: {e.strerror or e}") from None


def iter_lines(path: str, reject: Callable[[IngestError], None] | None = None) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw line) of a possibly gzipped text file, streamed (memory: one line). A line
    longer than `max_record_bytes` (decompressed, counted as read) is that line's rejection (`record_too_large`,
    handed to `reject`): the rest of it is skipped in bounded chunks and the lines after it are read, unless the
    skipped part passes `max_file_bytes` (a one-line bomb), which ends the file. Without `reject` the long line
    ends the file, raised."""
    lim = LIMITS.get()
    cap = lim.max_record_bytes
    n = 0
    with open_stream(path, lambda: n) as f:
        while True:
            line = f.readline(cap + 1)
            if not line:
                break
            n += 1
            if len(line) > cap:
                if reject is None:
                    raise IngestError("record_too_large", f"line {n} is longer than {cap} bytes "
                                      "(max_record_bytes); it and the rest of the file were not read", f"line {n}")
                reject(_skip_line(f, line, n, cap, lim.max_file_bytes))
                continue
            yield n, line


def _skip_line(f: BinaryIO, line: bytes, n: int, cap: int, budget: int) -> IngestError:
    """Read past the rest of an overlong line in chunks of `cap` (memory: one chunk); its rejection."""
    skipped = len(line)
    while not line.endswith(b"\n"):
        line = f.readline(cap + 1)
        if not line:
            break
        skipped += len(line)
        if skipped > budget:  # one line of gigabytes: stop here rather than decompress all of it
            raise IngestError("record_too_large", f"line {n} is longer than {budget} bytes (max_file_bytes); it and "
                            f"the rest of the file were not read", f"line {n}")
    return IngestError("record_too_large", f"line {n} is {skipped} bytes, longer than {cap} (max_record_bytes): "
                       "skipped; the lines after it were read", f"line {n}")
