"""The OUTDIR lock: one live command per OUTDIR (`run`, `attribute`, `eval`, `ingest`), taken before anything in
OUTDIR is read, cleaned or written, and never through a symbolic link (docs/scale-out.md, "One run per OUTDIR").
Re-exported by `masprism_batch.outdir.parts`."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

from masprism_batch.outdir import manifest

log = logging.getLogger(__name__)


LOCK_NAME = "_LOCK"
LOCK_STALE_SECONDS = 6 * 3600  # fallback only (no flock): a lock of another host untouched this long is stale


class OutdirLocked(FileExistsError, ValueError):
    """OUTDIR is in use by another live run. Both a FileExistsError and a ValueError, so every command's
    existing handler reports it as one `error:` line and exits 1 (never 3, never a traceback)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "OUTDIR is in use by another run"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_HELD: dict[tuple[str, int], int] = {}  # (lock path, thread id) -> nesting depth, for the holding thread only


class OutdirLock:
    """Exclusive lock of an OUTDIR for a whole command (`run`, `attribute`, `ingest`).

    `OUTDIR/_LOCK` is opened and `flock`ed (non-blocking) for the life of the command and holds the owner
    (pid, host, command, start time). The kernel drops an flock when its process dies, however it dies, so a
    lock left by a killed run is never an obstacle: the next command takes it over (and logs the stale
    owner). Where the filesystem has no flock (ENOLCK/ENOTSUP, e.g. some NFS setups), the owner record is
    the lock: it is stale when its pid is dead on this host, or, from another host, untouched for
    LOCK_STALE_SECONDS (`touch()` refreshes it at every commit). The file is never deleted (no unlink race):
    a released lock is an empty file. Readers ignore it (leading underscore). Re-entrant within one thread (a
    command that locks OUTDIR and then calls an engine that locks it again); another thread or process is refused.
    """

    def __init__(self, outdir: Path | str, command: str = "run"):
        self.outdir = Path(outdir)
        self.path = self.outdir / LOCK_NAME
        self.command = command
        self._fd: int | None = None
        self._flock = True
        self._nested: tuple[str, int] | None = None
        self._key: tuple[str, int] | None = None

    def _owner(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
            return json.loads(text) if text.strip() else {}
        except (OSError, ValueError):
            return {}

    @staticmethod
    def _describe(o: dict[str, Any]) -> str:
        return (f"pid {o.get('pid', '?')} on host {o.get('host', '?')} ({o.get('command', '?')}, "
                f"started {o.get('started_at', '?')})")

    def _stale(self, o: dict[str, Any]) -> bool:
        if not o:
            return True
        if o.get("host") == socket.gethostname():
            return not _pid_alive(int(o.get("pid", 0) or 0))
        try:
            age = time.time() - self.path.stat().st_mtime
        except OSError:
            return True
        return age > LOCK_STALE_SECONDS

    def acquire(self) -> OutdirLock:
        self.outdir.mkdir(parents=True, exist_ok=True)
        key = (os.path.realpath(self.path), threading.get_ident())
        if key in _HELD:  # this thread holds it already: nest
            _HELD[key] += 1
            self._nested = key
            return self
        manifest.refuse_links(self.outdir)  # before the lock file is opened, cleaned or written
        try:  # O_NOFOLLOW: a link planted at _LOCK must not make us truncate its target
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            raise manifest.OutdirUnsafe(f"{self.path} is a symbolic link: OUTDIR is a tree this tool owns and it "
                                        f"never follows a link inside it; remove it or use a new OUTDIR") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise manifest.OutdirUnsafe(f"{self.path} is not a regular file; remove it or use a new OUTDIR")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutdirLocked(f"{self.outdir} is in use by another run ({self._describe(self._owner())}); "
                               f"wait for it to finish or use another OUTDIR") from None
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EINVAL):
                os.close(fd)
                raise
            self._flock = False  # no flock here: the owner record is the lock
            owner = self._owner()
            if owner and not self._stale(owner):
                os.close(fd)
                raise OutdirLocked(f"{self.outdir} is in use by another run ({self._describe(owner)}); "
                                   f"wait for it to finish or use another OUTDIR") from None
        owner = self._owner()
        if owner:
            log.warning("%s: taking over a stale lock of %s (that run died)", self.outdir, self._describe(owner))
        me = {"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        os.fsync(fd)
        self._fd = fd
        self._key = key
        _HELD[key] = 1
        return self

    def touch(self) -> None:
        """Heartbeat for the no-flock fallback (called at every shard commit)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def release(self) -> None:
        if self._nested is not None:
            _HELD[self._nested] -= 1
            self._nested = None
            return
        if self._fd is None:
            return
        _HELD.pop(self._key, None)
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        with contextlib.suppress(OSError):
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> OutdirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
