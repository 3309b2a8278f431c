"""Finding input files and reading their bytes: directories are walked, `.gz` is decompressed.

Nothing here interprets content; `detect.py` decides the format. Input paths are only ever *read*.
"""

from __future__ import annotations

import gzip
import logging
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from .common import IngestError, error_row

log = logging.getLogger(__name__)

# Files picked up when walking a directory (explicitly named files are always tried).
DATA_SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet")
MAX_FILE_BYTES = 4 * 1024**3  # decompressed; a guard against gzip bombs, far above any real single trace


def _is_data_file(name: str) -> bool:
    base = name[:-3] if name.endswith(".gz") else name
    return base.endswith(DATA_SUFFIXES)


_SIDECARS = {"annotations", "errors", "attributions", "step_scores"}


def _label_sidecar_dir(dirpath: str, name: str) -> bool:
    # TRAIL keeps labels in `annotations/` beside `traces/`: those files are read with their trace
    # (openinference.py), never as traces of their own. Likewise an OUTDIR given as input means its
    # `traces/` dataset, not the errors/attributions/step_scores tables beside it.
    return name in _SIDECARS and os.path.isdir(os.path.join(dirpath, "traces"))


def expand(paths: list[str], on_error: Callable[[dict], None], skipped: list[str] | None = None) -> Iterator[str]:
    """Yield the data files under `paths` in a stable (sorted) order; missing paths become error rows."""
    for p in paths:
        p = str(p)
        if os.path.isfile(p):
            yield p
        elif os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p):  # does not follow symlinked dirs: no loops
                dirnames[:] = sorted(d for d in dirnames
                                     if not d.startswith((".", "_")) and not _label_sidecar_dir(dirpath, d))
                for name in sorted(filenames):
                    full = os.path.join(dirpath, name)
                    if name.startswith((".", "_")) or not _is_data_file(name):
                        if skipped is not None:
                            skipped.append(full)
                        continue
                    yield full
        else:
            log.error("input not found: %s", p)
            on_error(error_row(p, None, "not_found", "no such file or directory"))


def is_gzip(path: str) -> bool:
    if path.endswith(".gz"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def base_name(path: str) -> str:
    """File name without `.gz` and without the data suffix: 'traces/abc.json.gz' -> 'abc'."""
    name = os.path.basename(path)
    if name.endswith(".gz"):
        name = name[:-3]
    stem, dot, ext = name.rpartition(".")
    return stem if dot and ("." + ext) in DATA_SUFFIXES else name


def _gunzip(data: bytes) -> bytes:
    # One-shot zlib over the whole member is ~2x faster than GzipFile's chunked reads; members are looped
    # (concatenated .gz files are legal) and output is capped so a gzip bomb cannot exhaust memory.
    out: list[bytes] = []
    size = 0
    while data:
        d = zlib.decompressobj(wbits=31)
        chunk = d.decompress(data, MAX_FILE_BYTES + 1 - size)
        size += len(chunk)
        out.append(chunk)
        if size > MAX_FILE_BYTES:
            raise IngestError("file_too_large", f"more than {MAX_FILE_BYTES} bytes after decompression")
        if not d.eof:
            raise IngestError("invalid_gzip", "corrupt or truncated gzip: the stream ends before its end marker")
        data = d.unused_data.lstrip(b"\x00")  # padding after a member is tolerated, as gzip(1) does
    return b"".join(out)


def read_bytes(path: str) -> bytes:
    """Whole (decompressed) file; every failure is an IngestError with a stable reason."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise IngestError("unreadable_file", f"cannot read file: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            return _gunzip(data)
        except zlib.error as e:
            raise IngestError("invalid_gzip", f"corrupt gzip: {e}") from None
    if path.endswith(".gz"):
        raise IngestError("invalid_gzip", "file name ends in .gz but the data is not gzip")
    if len(data) > MAX_FILE_BYTES:
        raise IngestError("file_too_large", f"more than {MAX_FILE_BYTES} bytes")
    return data


def iter_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw line) of a possibly gzipped text file, streamed (memory: one line)."""
    try:
        f = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")
    except OSError as e:
        raise IngestError("unreadable_file", f"cannot read file: {e.strerror or e}") from None
    with f:
        n = 0
        try:
            for n, line in enumerate(f, 1):  # noqa: B007 - n is read after the loop on failure
                yield n, line
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise IngestError("invalid_gzip", f"corrupt or truncated gzip after line {n}: {e}") from None
        except OSError as e:
            raise IngestError("unreadable_file", f"read failed after line {n}: {e.strerror or e}") from None


def file_size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0
