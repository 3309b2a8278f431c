"""What a run's progress display hears: the `Progress` interface, and the default display.

The `Committer` calls `begin` once (the traces this invocation runs), `on_pack` as each pack's result arrives
and `close` at the end; the engine may rename the run (`describe`). Inside a pack the model stage reports each
finished prefill group to `masprism_batch.progress_events`; a display that wants those subscribes its
`on_group` there (local engine only: Ray actors run in other processes and report per pack).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from tqdm import tqdm

log = logging.getLogger(__name__)


class Progress(Protocol):
    def begin(self, total: int, description: str) -> None:
        """The run starts: `total` input records to settle in this invocation."""

    def describe(self, description: str) -> None:
        """A new name for the run (e.g. once the token budget is known)."""

    def on_pack(self, records: int, traces: int, tokens: int, elapsed: float) -> None:
        """A pack's result arrived: `records` more settled; `traces` and `tokens` attributed so far in this
        invocation, `elapsed` seconds since `begin`."""

    def on_group(self, stage: str, items: int, tokens: int) -> None:
        """A prefill group finished inside a running pack (`progress_events.prefill_done`)."""

    def close(self) -> None:
        """The run ended (called once; further calls do nothing)."""


class BarProgress:
    """The default display: a tqdm bar (`show`: True: where stderr is a terminal, False: never); where no bar
    is drawn, a log line every `log_every` seconds as packs arrive."""

    log_every = 30.0

    def __init__(self, show: bool = True):
        self.show = show
        self.bar: tqdm | None = None
        self._last_log = time.perf_counter()

    def begin(self, total: int, description: str) -> None:
        # a pty that reports no size (0x0: `script`, some CI and container terminals) made tqdm draw nothing at
        # all (it takes -1 rows from it): a fixed size there
        sized = _terminal_columns() > 0
        self.bar = tqdm(total=total, unit="trace", desc=description, dynamic_ncols=sized,
                        ncols=None if sized else 100, nrows=None if sized else 24,
                        disable=not self.show or None, smoothing=0)  # rate = done / elapsed: the ETA moves with the clock
        self._last_log = time.perf_counter()

    def describe(self, description: str) -> None:
        self.bar.set_description_str(description, refresh=False)

    def on_pack(self, records: int, traces: int, tokens: int, elapsed: float) -> None:
        self.bar.update(records)
        self.bar.set_postfix_str(f"{tokens / elapsed:,.0f} tok/s", refresh=False)
        if self.bar.disable and self.plain_lines() and time.perf_counter() - self._last_log > self.log_every:
            self._last_log = time.perf_counter()
            log.info("progress: %d traces, %.2f traces/s, %.0f tokens/s", traces, traces / elapsed,
                     tokens / elapsed)

    def plain_lines(self) -> bool:
        """Whether the `log_every` lines are wanted where no bar is drawn (a subclass may log its own)."""
        return True

    def on_group(self, stage: str, items: int, tokens: int) -> None:
        pass

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _terminal_columns() -> int:
    import os
    import sys

    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


def as_progress(progress: bool | Progress) -> Progress:
    """An engine's `progress` argument: a display of the caller's, or True/False for the default one."""
    return BarProgress(progress) if isinstance(progress, bool) else progress
