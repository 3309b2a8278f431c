"""What a file is before it is JSON: its text encoding (UTF-8, or UTF-16 / UTF-32 named by a byte-order mark,
as PowerShell's `>` and Windows tools write) and zip containers (Inspect AI's `.eval` logs, zipped exports).

A zip is read member by member, in the archive's order, each as the file it would be on its own (its name
decides JSON vs JSON lines); members that are not data files (`.json`, `.jsonl`, `.ndjson`, `.traj`) are
skipped. Bounded like any input: at most `MAX_MEMBERS` members, each capped at `max_file_bytes` as it is
decompressed (a declared size is not trusted), and the archive's decompressed total at `MAX_TOTAL_FACTOR` times
that cap.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator

from masprism_batch.ingest.common import Context, IngestError, decode_utf8
from masprism_batch.ingest.sources import LIMITS

# longest first: the UTF-32 LE mark starts with the UTF-16 LE one
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
         (b"\xfe\xff", "utf-16-be"))
ZIP_MAGIC = b"PK\x03\x04"
MEMBER_SUFFIXES = (".json", ".jsonl", ".ndjson", ".traj")
MAX_MEMBERS = 100_000
MAX_TOTAL_FACTOR = 4


def bom_codec(head: bytes) -> tuple[str, int] | None:
    """(codec, BOM length) when `head` starts with a UTF-16 / UTF-32 byte-order mark."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    return None


def decode_text(data: bytes, ctx: Context) -> str:
    """UTF-16 / UTF-32 when a byte-order mark says so, else strict UTF-8 (`common.decode_utf8`). Undecodable
    units become U+FFFD with one `invalid_utf8` warning (the reason names the file's text, whatever its codec)."""
    got = bom_codec(data[:4])
    if got is None:
        return decode_utf8(data, ctx)
    codec, skip = got
    try:
        return bytes(data[skip:]).decode(codec)
    except UnicodeDecodeError as e:
        ctx.warn("invalid_utf8", f"invalid {codec.upper()} at byte {e.start + skip}; bad units replaced by U+FFFD")
        return bytes(data[skip:]).decode(codec, errors="replace")


def is_zip(data: bytes) -> bool:
    return data[:4] == ZIP_MAGIC


def members(data: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, decompressed bytes) of each data member, capped as it is read; IngestError for a broken archive."""
    cap = LIMITS.get().max_file_bytes
    total = 0
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise IngestError("invalid_zip", f"not a readable zip archive: {e}") from None
    if len(infos) > MAX_MEMBERS:
        raise IngestError("file_too_large", f"{len(infos)} members in the zip archive (more than {MAX_MEMBERS})")
    for info in infos:
        name = info.filename
        if info.is_dir() or not name.lower().endswith(MEMBER_SUFFIXES):
            continue
        try:
            with zf.open(info) as f:
                body = f.read(cap + 1)
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, RuntimeError) as e:
            raise IngestError("invalid_zip", f"member {name!r} cannot be read: {e}") from None
        if len(body) > cap:
            raise IngestError("file_too_large", f"member {name!r}: more than {cap} bytes after decompression "
                              "(max_file_bytes)")
        total += len(body)
        if total > MAX_TOTAL_FACTOR * cap:
            raise IngestError("file_too_large", f"more than {MAX_TOTAL_FACTOR * cap} bytes decompressed from the "
                              "zip archive")
        yield name, body
