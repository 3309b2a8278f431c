"""What makes an OUTDIR trustworthy: a tree the tool owns (no link inside it is ever followed) and committed
parts that are checked against their manifest entry before anything reads or resumes them.

- `refuse_links`: OUTDIR must hold no symbolic link. A link inside it would make start-up clean-up delete, a
  commit overwrite, or the lock truncate files of someone else, so the commands that write OUTDIR
  and the analytics commands refuse such an OUTDIR with one clear message before touching anything.
- `part_record` / `check_part`: each committed part is recorded in its shard's manifest entry with its row
  count, size and SHA-256, and carries the run id of its OUTDIR in its Parquet metadata. A part that is missing,
  truncated, replaced (by another shard's or another run's part) or is a link is *damaged*: readers refuse the
  OUTDIR naming the file, a resume re-runs exactly the damaged shards.
- `read_control` / `require_regular`: the tool's own control files (`_ledger.json`, manifest entries, markers,
  staged parts) are opened without blocking and only if they are regular files, so a FIFO or device planted
  under one of their names is refused at once instead of hanging a run or a reader.

Hashing reads every part once per process: digests are cached by (device, inode, size, mtime), so the many
reads of one `report` cost one pass over the files.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

RUN_ID_KEY = b"masprism.run_id"
_DIGESTS: dict[tuple[int, int, int, int], str] = {}


class OutdirUnsafe(ValueError):
    """OUTDIR holds a symbolic link (or its lock is not a plain file): refused before anything is touched."""


class DamagedOutput(ValueError):
    """A committed part or manifest record does not match what was committed (message names the file)."""


def refuse_links(outdir: Path | str) -> None:
    """Raise OutdirUnsafe when any entry under OUTDIR (OUTDIR itself excepted: the user named it) is a symlink.
    Walks without following links, so the check itself never leaves the tree."""
    outdir = Path(outdir)
    if not outdir.is_dir():
        return
    found: list[str] = []
    stack = [str(outdir)]
    while stack and len(found) < 3:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_symlink():
                        found.append(e.path)
                    elif e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except FileNotFoundError:
            continue  # removed meanwhile (a reader beside a resume's clean-up): nothing to follow there
    if found:
        raise OutdirUnsafe(
            f"{outdir} holds a symbolic link ({', '.join(sorted(found))}): OUTDIR is a tree this tool owns and it "
            f"never follows a link inside it (clean-up, commits and the lock could change files elsewhere); "
            f"remove the link or use a new OUTDIR")


class NotRegular(OutdirUnsafe, DamagedOutput):
    """A control file or part of OUTDIR that is not a regular file (FIFO, socket, device, link): refused by the
    commands that write OUTDIR (unsafe) and by its readers (damage), never opened in a way that could block."""


def require_regular(path: Path | str) -> None:
    """Refuse (OutdirUnsafe) a control file or part that exists but is not a regular file; never opens it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(f"{path} is not a regular file (a link, FIFO, socket or device): this tool only "
                           f"ever writes regular files there; remove it or use a new OUTDIR")


def read_control(path: Path | str, limit: int = 64 * 1024**2) -> str | None:
    """Text of one of the tool's control files (None: it does not exist). Opened with O_NONBLOCK and O_NOFOLLOW
    and checked on the descriptor, so a FIFO never blocks and a link is never followed (both: OutdirUnsafe);
    at most `limit` bytes are read (a control file is small; more is damage, not something to load)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link (O_NOFOLLOW), or a socket/FIFO without a writer
            raise NotRegular(f"{path} is not a regular file ({exc.strerror}): remove it or use a new OUTDIR") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(f"{path} is not a regular file (a FIFO, socket or device): this tool only ever "
                               f"writes regular files there; remove it or use a new OUTDIR")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise DamagedOutput(f"{path} is larger than {limit} bytes: not a file this tool wrote")
    return data.decode("utf-8-sig", errors="replace")


def read_json(path: Path | str, strict: bool = False) -> dict | None:
    """A JSON-object control file (a marker, `_COMPLETE.json`) read by `read_control`: None when absent, or when
    unreadable unless `strict` (then a ValueError naming it)."""
    import json

    text = read_control(path)
    try:
        obj = json.loads(text) if text is not None else None
        if obj is not None and not isinstance(obj, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        if strict:
            raise ValueError(f"{path} is unreadable ({exc}): use a new OUTDIR") from None
        return None
    return obj


def sha256_of(path: Path) -> str:
    st = os.stat(path, follow_symlinks=False)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def with_run_id(table: pa.Table, run_id: str | None) -> pa.Table:
    if not run_id:
        return table
    return table.replace_schema_metadata({**(table.schema.metadata or {}), RUN_ID_KEY: run_id.encode()})


def part_record(path: Path, rows: int) -> dict[str, Any]:
    """What the manifest entry keeps of one written part (after its rename: the bytes that are on disk)."""
    return {"rows": int(rows), "bytes": os.stat(path).st_size, "sha256": sha256_of(path)}


def check_part(path: Path, rec: dict[str, Any] | None, run_id: str | None) -> str | None:
    """Why `path` is not the part its manifest record describes (None: it is). `rec` None: an entry written
    before records existed, for which only presence is checked."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return "missing (deleted after it was committed)"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a link or a special file)"
    if rec is None:
        return None
    if st.st_size != rec.get("bytes"):
        return f"{st.st_size} bytes, the manifest recorded {rec.get('bytes')} (truncated or replaced)"
    if sha256_of(path) != rec.get("sha256"):
        return "content differs from the committed part (checksum mismatch: replaced or overwritten)"
    try:
        meta = pq.read_metadata(path)
    except (OSError, pa.ArrowException) as e:
        return f"unreadable Parquet ({e})"
    if meta.num_rows != rec.get("rows"):
        return f"{meta.num_rows} rows, the manifest recorded {rec.get('rows')}"
    owner = (meta.metadata or {}).get(RUN_ID_KEY, b"").decode() or None
    if run_id and owner != run_id:
        return f"written by another run ({owner or 'no run id'}, this OUTDIR is run {run_id})"
    return None
