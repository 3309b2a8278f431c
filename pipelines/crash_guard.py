"""Crash memory of the engines: a worker process that dies (segfault, OOM kill, SIGKILL) is pinned to the trace
that killed it, so a poison trace is rejected instead of killing every retry and resume.

`FileLedger` counts starts and finishes per key in OUTDIR/_ledger.json (the local engine's ledger, and the state
of the Ray engine's ledger actor); `CrashGuard` runs a unit (a shard's CPU stage or a pack) one trace at a time
against a ledger once the unit crashed its worker `PACK_CRASHES_BEFORE_ONE_BY_ONE` times.
"""

from __future__ import annotations

import json
from pathlib import Path


class CrashGuard:
    """Pins crashes of a worker *process* (segfault, OOM kill, SIGKILL) to single traces, for either stage.

    `begin_fn(key) -> crashes so far` / `done_fn(key)` are a ledger's (Ray: an actor; local: `FileLedger`, a
    file in OUTDIR that survives the process). A start without a finish is a crash. `begin(trace_id)` returns
    the error reason when this trace already crashed a worker TRACE_CRASHES_BEFORE_REJECT times on its own: the
    caller then rejects it. (An interruption by a signal is no crash: `FileLedger.interrupted` takes its starts
    back. A kill -9 or an OOM kill of the whole process cannot be told from a crash the trace caused, hence two
    crashes alone, not one: three such kills in a row still reject no trace.) A rejected trace keeps its count
    until its unit (pack or CPU stage) finishes, whose `done` drops the unit's trace keys with it: if another
    trace of the unit crashes the process before the unit is committed, the rerun rejects the first one again
    at once instead of running it from zero (k poison traces in one unit: 2 + 2k crashes)."""

    def __init__(self, begin_fn, done_fn, prefix: str):
        self.begin_fn, self.done_fn, self.prefix = begin_fn, done_fn, prefix

    def begin(self, trace_id: str) -> str | None:
        if self.begin_fn(self.prefix + trace_id) < TRACE_CRASHES_BEFORE_REJECT:
            return None
        return "worker_crashed"  # its key stays until the unit is done (see the class docstring)

    def done(self, trace_id: str) -> None:
        self.done_fn(self.prefix + trace_id)


PACK_CRASHES_BEFORE_ONE_BY_ONE = 2  # one crash may be a killed worker; two point at a trace in the unit
TRACE_CRASHES_BEFORE_REJECT = 2  # a trace is rejected only after it crashed its process alone this often


class FileLedger:
    """Start/finish counts per key in one JSON file (OUTDIR/_ledger.json) that outlives the process: the crash
    memory of the local engine across resumes, and of the Ray engine's ledger actor across its restarts and the
    driver's. Keys are deterministic (shard id, pack content, trace id), so a resumed run finds them; a key
    whose starts and finishes match is dropped, and `done(unit)` drops the unit's trace keys (`unit/...`)."""

    def __init__(self, path):
        from masprism_batch.outdir.manifest import read_control

        self.path = Path(path)
        self._mine: set[str] = set()  # keys begun by this process and not finished yet
        text = read_control(self.path)  # never blocks: a FIFO in its place is refused (OutdirUnsafe)
        try:
            loaded = json.loads(text) if text else {}
        except ValueError:
            loaded = {}
        ok = isinstance(loaded, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in loaded.values())
        self.started: dict[str, int] = {str(k): int(v) for k, v in loaded.items()} if ok else {}

    def _save(self) -> None:
        from masprism_batch.outdir.parts import write_json_atomic

        write_json_atomic(self.started, self.path, durable=False)  # a process crash keeps the page cache

    def begin(self, key: str) -> int:
        crashes = self.started.get(key, 0)
        self.started[key] = crashes + 1
        self._mine.add(key)
        self._save()
        return crashes

    def done(self, key: str) -> None:
        self._mine.discard(key)
        inner = [k for k in self.started if k.startswith(key + "/")]
        for k in inner:
            self.started.pop(k)
            self._mine.discard(k)
        if self.started.pop(key, None) is not None or inner:
            self._save()

    def interrupted(self) -> None:
        """The process is being stopped by a signal: its open starts are no crash of theirs, so they are taken
        back (the pack runs whole again on resume, and no trace is blamed for the interruption)."""
        for key in self._mine:
            left = self.started.get(key, 0) - 1
            if left > 0:
                self.started[key] = left
            else:
                self.started.pop(key, None)
        self._mine.clear()
        self._save()
