"""The crash ledger of a Ray run: one named actor holding start/finish counts (a `FileLedger` in
OUTDIR/_ledger.json on the driver's node, so a killed ledger actor restarts with them), and the calls to it,
retried while it restarts (`ledger_call`), so a ledger that dies never fails the run.

Kept apart from the engine (`ray_engine.py`): it is the crash rule's state, not the run's data flow.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from masprism_batch.pipelines.crash_guard import PACK_CRASHES_BEFORE_ONE_BY_ONE, CrashGuard, FileLedger

log = logging.getLogger(__name__)

LEDGER_ACTOR = "masprism-ledger"  # + the OUTDIR's run id: named, so an operator (or a test) can find it
LEDGER_ATTEMPTS = 6  # calls to the ledger actor: tried this often, waits doubling from 0.5 s (~30 s in all)


def retry(call, retryable: tuple[type[BaseException], ...], attempts: int = LEDGER_ATTEMPTS, wait: float = 0.5,
          sleep=time.sleep):
    """`call()` again after a `retryable` error (the ledger actor died and is restarting), `attempts` times in
    all with doubling waits; the last error is raised."""
    for i in range(attempts):
        try:
            return call()
        except retryable as exc:
            if i == attempts - 1:
                raise
            log.warning("ledger call failed (%s: %s): retrying", type(exc).__name__, exc)
            sleep(wait * 2**i)
    raise AssertionError("unreachable")


def ledger_call(ledger, method: str, *args):
    """One call to the ledger actor, retried while it restarts (a killed ledger must not abort the run)."""
    import ray

    errors = (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError,
              getattr(ray.exceptions, "ActorUnavailableError", ray.exceptions.RayActorError))
    return retry(lambda: ray.get(getattr(ledger, method).remote(*args), timeout=60), errors)


def ledger_guard(ledger, key: str) -> CrashGuard | None:
    """begin(key) on the ledger actor; past the crash rule, a guard that pins crashes to single traces."""
    crashes = ledger_call(ledger, "begin", key)
    if crashes < PACK_CRASHES_BEFORE_ONE_BY_ONE:
        return None
    log.warning("%s crashed a worker %d times: running its traces one by one", key, crashes)
    return CrashGuard(lambda k: ledger_call(ledger, "begin", k), lambda k: ledger_call(ledger, "done", k), key + "/")


class Ledger(FileLedger):
    """Start/finish counts per key, held by one actor; a crash leaves a start without a finish. Kept in
    OUTDIR/_ledger.json (`FileLedger`): a restarted actor, and a resumed run, start from the counts. Where the
    actor's node cannot write OUTDIR (a cluster without the shared filesystem the docs ask for), the counts stay
    in memory, as before, with one warning: crash counting must not fail the run."""

    def __init__(self, path):
        try:
            super().__init__(path)
        except OSError as exc:  # OutdirUnsafe (a FIFO there) is a ValueError and still refuses the run
            self.path, self._mine, self.started = Path(path), set(), {}
            self._warned = True
            log.warning("ledger %s not readable here (%s): crash counts kept in memory only", path, exc)

    def _save(self) -> None:
        try:
            super()._save()
        except OSError as exc:
            if not getattr(self, "_warned", False):
                self._warned = True
                log.warning("ledger %s not writable here (%s): crash counts kept in memory only", self.path, exc)

    def settle(self) -> None:
        """The run finished: every unit it began is done. A finish sent without waiting (`ModelActor`) may not
        have arrived yet; none is a crash, so nothing is kept."""
        self._mine.clear()
        if self.started:
            self.started.clear()
            self._save()
