"""Host tails beside the device: one worker thread runs each pack's host tail (method, verdicts, rows, commit)
while the caller's thread starts the next pack on the device.

`Tails(depth)`: `submit(fn)` queues a pack's tail, then waits until at most `depth` tails are outstanding, so
the device runs pack n while the tail of pack n-1 runs here, and memory holds at most depth + 1 packs' signals.
Tails run one at a time, in submission order (commits and ledger calls in pack order, as a serial loop makes
them). A tail's exception is raised by the `submit` that waits for it, or on a clean `close`. `depth` 0 runs
each tail inline (a run with a crash history: nothing runs beside anything else).

On an interruption (any exception leaving the block) the tails already queued still run (their device half is
done: only host work is left, so finishing them is what loses least), their errors are logged, not raised,
and the caller's unwinding (commit of what finished, the ledger taking its starts back) sees every finished
pack and no tail running any more.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger(__name__)


class Tails:
    def __init__(self, depth: int = 1):
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        self.depth = depth
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="host-tail") if depth else None
        self._pending: deque[Future] = deque()

    def submit(self, fn: Callable[[], None]) -> None:
        if self._pool is None:
            fn()
            return
        self._pending.append(self._pool.submit(fn))
        while len(self._pending) > self.depth:
            self._pending.popleft().result()

    def close(self, drain: bool = True) -> None:
        """Wait for every queued tail; `drain`: raise the first error (a clean end), else only log them."""
        if self._pool is None:
            return
        try:
            while drain and self._pending:
                self._pending.popleft().result()
        finally:
            self._pool.shutdown(wait=True)
            for f in self._pending:
                if f.exception() is not None:  # unwinding: the caller's error is the one to report
                    log.warning("a pack's host tail failed while the run stopped: %s", f.exception())
            self._pending.clear()

    def __enter__(self) -> Tails:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(drain=exc_type is None)
