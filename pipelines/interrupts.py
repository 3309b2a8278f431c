"""Stopping a run by a signal, and what an interrupted run tells its user and leaves behind.

SIGTERM/SIGHUP end the run through the normal unwinding path (`interruptible`), SIGINT raises Python's own
KeyboardInterrupt; either way the engine commits the packs that had finished (`Committer.flush`), then
`record_interruption` writes what was kept and what will be redone: a line for the user (attached to the
exception as `kept`, printed by the CLI with the signal's name) and a record `OUTDIR/_manifest/interrupted-*.json`
that `stats` turns into a row of `stats/runs.parquet` (status `interrupted`). run.json is not written: it is the
record of a finished run.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import uuid

log = logging.getLogger(__name__)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by SIGTERM or SIGHUP (SIGINT raises a plain KeyboardInterrupt): no failure of any
    trace. Committed work stays; re-running the same command resumes. Exit status 128 + signal number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_status(exc: KeyboardInterrupt) -> int:
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


def signal_name(exc: BaseException) -> str:
    """SIGTERM / SIGHUP for `Interrupted`, SIGINT for Python's own KeyboardInterrupt (whose text is empty)."""
    return signal.Signals(exc.signum).name if isinstance(exc, Interrupted) else "SIGINT"


@contextlib.contextmanager
def interruptible():
    """SIGTERM/SIGHUP end the run through the normal unwinding path (finally blocks: the ledger takes back
    the interrupted starts, Ray's private cluster is shut down, the OUTDIR lock released) instead of the
    default abrupt death. A signal inherited as ignored (`nohup`) is left ignored. Only the main thread can install
    handlers; elsewhere this is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        for sig in old:  # a second SIGTERM (docker stop's retry) must not break the unwinding of the first
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    # a signal the process inherited as ignored stays ignored: `nohup` ignores SIGHUP so that closing the
    # terminal never stops the run (docs/cli.md), and replacing its SIG_IGN would undo what the user asked
    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)
           if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def kept_line(done: int, total: int, this_run: int, outdir) -> str:
    """What the user reads after the signal's name: what is committed and what a resume will redo."""
    left = max(total - done, 0)
    return (f"{done:,} of {total:,} traces are committed in {outdir} ({this_run:,} by this run); "
            f"{left:,} will be run on resume")


def flush_quietly(committer, when: str = "") -> None:
    """Commit the packs that finished; a failure is logged, never raised: the run's own error (or the
    interruption) is the one to report, and what is not committed is redone on resume."""
    try:
        committer.flush()
    except Exception as e:  # noqa: BLE001 - a second failure while unwinding
        log.warning("could not commit the finished packs%s (%s): they will be redone", when, e)


@contextlib.contextmanager
def keeping_finished(committer, facts, on_interrupt=None):
    """Around an engine's work: whatever stops it, the packs that finished are committed. A signal
    (SIGTERM/SIGHUP/SIGINT: no crash of what was running) first calls `on_interrupt` (the local engine's ledger
    takes its starts back), then is recorded for the user and `stats` (`record_interruption`)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        if on_interrupt is not None:
            on_interrupt()
        record_interruption(committer, exc, facts)
        raise
    except Exception:
        flush_quietly(committer)
        raise


def record_interruption(committer, exc: KeyboardInterrupt, facts=None) -> None:
    """Commit what finished, then say so: `exc.kept` (the user's line) and the invocation record for `stats`.
    `facts`: the engine's `run_summary.RunFacts`. Never raises: a failure here must not hide the interruption."""
    from masprism_batch.pipelines.resume import now_utc

    from masprism_batch.outdir.parts import write_json_atomic

    flush_quietly(committer, " while stopping")
    done, total = committer.progress_counts()
    exc.kept = kept_line(done, total, committer.traces_committed, committer.outdir)  # type: ignore[attr-defined]
    wall = committer.elapsed()
    record = {"status": "interrupted", "signal": signal_name(exc), "engine": committer.engine,
              "model": committer.cfg.model.name, "config_hash": committer.cfg.config_hash(),
              "counts": {"committed": done, "total": total, "left": max(total - done, 0)},
              "this_invocation": {"started_at": committer.started_at.isoformat(), "finished_at": now_utc().isoformat(),
                                  "wall_seconds": round(wall, 3), "traces": committer.traces_committed,
                                  "tokens": committer.tokens_committed,
                                  "traces_per_second": round(committer.traces_committed / wall, 4) if wall else 0.0,
                                  **(facts.as_json() if facts is not None else {})}}
    try:
        write_json_atomic(record, committer.store.manifest_dir / f"interrupted-{uuid.uuid4().hex[:12]}.json")
    except OSError as e:
        log.warning("could not record the interruption (%s)", e)
    log.warning("interrupted (%s): %s", record["signal"], exc.kept)  # type: ignore[attr-defined]
