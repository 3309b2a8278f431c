"""What a file is before it is JSON: its text encoding (UTF-8, or UTF-16 / UTF-32 named by a byte-order mark,
as PowerShell's `>` and Windows tools write) and zip containers (Inspect AI's `.eval` logs, zipped exports).

A zip is read member by member, in the archive's order, each as the file it would be on its own (its name
decides JSON vs JSON lines); members that are not data files (`.json`, `.jsonl`, `.ndjson`, `.traj`) are
skipped. Bounded like any input: at most `MAX_MEMBERS` members (checked from the end records before the
directory is parsed), read one at a time, each capped at `max_file_bytes` as it is decompressed (a declared size
is not trusted), and the archive's decompressed total at `MAX_TOTAL_FACTOR` times that cap. A damaged member
(bad deflate stream, CRC mismatch) costs itself: one row, the other members are read.
"""

from __future__ import annotations

import codecs
import io
import struct
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator

from masprism_batch.ingest.common import Context, IngestError, decode_utf8
from masprism_batch.ingest.file_bytes import open_stream
from masprism_batch.ingest.limits import LIMITS

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


_BAD_UNITS = threading.local()  # undecodable units met by `iter_text_lines` (one thread reads one file)


def _count_replace(e: UnicodeDecodeError) -> tuple[str, int]:
    _BAD_UNITS.n = getattr(_BAD_UNITS, "n", 0) + 1
    return "\ufffd", e.end


codecs.register_error("masprism-count-replace", _count_replace)


def bad_units() -> int:
    """Undecodable units replaced by U+FFFD so far in this thread's `iter_text_lines` reads."""
    return getattr(_BAD_UNITS, "n", 0)


def iter_text_lines(path: str, codec: str, reject: Callable[[IngestError], None]) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of a possibly gzipped UTF-16 / UTF-32 text file (its byte-order mark
    dropped), decoded and split as it streams (memory: one line, never the whole file): the UTF-8 path of
    `iter_lines` for the other encodings. A line longer than `max_record_bytes` characters is that line's
    rejection; undecodable units become U+FFFD (counted by `bad_units`)."""
    lim = LIMITS.get()
    cap = lim.max_record_bytes
    n = 0
    with open_stream(path, lambda: n) as f:
        text = io.TextIOWrapper(f, encoding=codec, errors="masprism-count-replace", newline=None)
        try:
            while True:
                line = text.readline(cap + 1)
                if not line:
                    break
                n += 1
                if n == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                if len(line) > cap:
                    skipped = len(line)
                    while not line.endswith("\n"):
                        line = text.readline(cap + 1)
                        if not line:
                            break
                        skipped += len(line)
                        if skipped > lim.max_file_bytes:
                            raise IngestError("record_too_large", f"line {n} is longer than {lim.max_file_bytes} "
                                              "characters (max_file_bytes); it and the rest of the file were not "
                                              "read", f"line {n}")
                    reject(IngestError("record_too_large", f"line {n} is {skipped} characters, longer than {cap} "
                                       "(max_record_bytes): skipped; the lines after it were read", f"line {n}"))
                    continue
                yield n, line
        finally:
            text.detach()


def is_zip(data: bytes) -> bool:
    return data[:4] == ZIP_MAGIC


def _declared_entries(data: bytes) -> int | None:
    """How many members the archive's central directory holds, counted from its end record by hopping over the
    entry headers (no ZipInfo built, at most MAX_MEMBERS + 1 hops): the larger of that and the declared count, so
    neither a lying count nor a huge directory is parsed. None when no end record is found (zipfile then says
    what is wrong)."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 22 - 65535))
    if at < 0 or at + 22 > len(data):
        return None
    count, cd_size = struct.unpack_from("<HI", data, at + 10)
    end = at
    if count == 0xFFFF or cd_size == 0xFFFFFFFF:  # ZIP64: the locator just before names the ZIP64 end record
        loc = at - 20
        if loc >= 0 and data[loc:loc + 4] == b"PK\x06\x07":
            (rec,) = struct.unpack_from("<Q", data, loc + 8)
            if rec + 56 <= len(data) and data[rec:rec + 4] == b"PK\x06\x06":
                count, cd_size = struct.unpack_from("<QQ", data, rec + 32)
                end = rec
    pos, n = max(0, end - cd_size), 0  # the directory ends where the end records start (as zipfile finds it)
    while n <= MAX_MEMBERS and pos + 46 <= end and data[pos:pos + 4] == b"PK\x01\x02":
        name, extra, comment = struct.unpack_from("<HHH", data, pos + 28)
        pos += 46 + name + extra + comment
        n += 1
    return max(count, n)


class ZipArchive:
    """A zip container read member by member: the member count is checked from the end records BEFORE the
    central directory is parsed, and one member is decompressed at a time (capped as it is read), so memory is
    the archive's bytes plus one member. A member that cannot be read (bad deflate stream, CRC mismatch, too
    large) is that member's failure, handed back in its place; the others are read."""

    def __init__(self, data: bytes):
        declared = _declared_entries(data)
        if declared is not None and declared > MAX_MEMBERS:
            raise IngestError("file_too_large", f"the zip archive's directory lists more than {MAX_MEMBERS} members "
                              f"({declared} declared or counted from its end record): not read")
        try:
            self._zf = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zf.infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error) as e:
            raise IngestError("invalid_zip", f"not a readable zip archive: {e}") from None
        if len(infos) > MAX_MEMBERS:
            raise IngestError("file_too_large", f"{len(infos)} members in the zip archive (more than {MAX_MEMBERS})")
        self.infos = [i for i in infos if not i.is_dir() and i.filename.lower().endswith(MEMBER_SUFFIXES)]
        self.names = [i.filename for i in self.infos]
        self._total = 0

    def read(self, info: zipfile.ZipInfo) -> bytes:
        """One member's decompressed bytes; IngestError for that member (the archive's total cap ends it)."""
        cap = LIMITS.get().max_file_bytes
        name = info.filename
        try:
            with self._zf.open(info) as f:
                body = f.read(cap + 1)
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, RuntimeError, EOFError,
                zlib.error) as e:
            raise IngestError("invalid_zip", f"member {name!r} cannot be read: {type(e).__name__}: {e}", name) from None
        if len(body) > cap:
            raise IngestError("file_too_large", f"member {name!r}: more than {cap} bytes after decompression "
                              "(max_file_bytes)", name)
        self._total += len(body)
        if self._total > MAX_TOTAL_FACTOR * cap:
            raise ArchiveTooLarge("file_too_large", f"more than {MAX_TOTAL_FACTOR * cap} bytes decompressed from the "
                                  "zip archive: the members after this one were not read", name)
        return body

    def read_named(self, name: str) -> bytes | None:
        info = next((i for i in self.infos if i.filename == name), None)
        return None if info is None else self.read(info)

    def members(self) -> Iterator[tuple[str, bytes | IngestError]]:
        """(name, bytes) of each data member in the archive's order, or (name, its IngestError) for a member
        that cannot be read; past the archive's total cap, ArchiveTooLarge ends the archive."""
        for info in self.infos:
            try:
                yield info.filename, self.read(info)
            except ArchiveTooLarge:
                raise
            except IngestError as e:
                yield info.filename, e


class ArchiveTooLarge(IngestError):
    """The archive's decompressed total passed its cap: the rest of the archive is not read."""
