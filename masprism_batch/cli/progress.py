"""Progress of `attribute` / `run` / `eval` / `demo` when stderr is not a terminal (a log file, CI, nohup).

On a terminal the driver's tqdm bar is redrawn every `TICK` second from the first pack on (a bar redrawn only
when a pack ends sat at `0/4 [00:00<?, ?trace/s]`, clock frozen, for a whole 29 s run): elapsed time always,
tokens/s from the first finished prefill group, traces/s and ETA once a pack is in. Without one, tqdm draws
nothing, and finished packs can be minutes apart, so lines are logged instead:

    progress: 120/2,000 traces (6.0%), 0.41 traces/s, 1,850 tokens/s, elapsed 4m53s, ETA 1h16m

- as prefill groups finish inside a pack (`progress_events`; local engine): tokens/s from the first pass-1 group
  on, and the traces of each pass-2 group counted as done (their verdict follows at once); at most one line
  every `interval / 6` seconds;
- every `interval` seconds while no line was logged (a long prefill);
- one at the end, never twice the same line, and the 100% line only there (a pass-2 group or the last pack
  reaching the total logged it a second before the end line, elapsed time apart: 100% printed twice).

On a terminal, log records (a Ctrl-C's "interrupted" warning, a note) are written above the bar, not onto its
line (`tqdm.contrib.logging.logging_redirect_tqdm`, with the handlers' own filters kept).

`heartbeat(interval)` gives the run the display to report to (`HeartbeatProgress`, a
`masprism_batch.pipelines.progress.Progress`): the committer's tqdm bar on a terminal, these lines without one.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator

from masprism_batch import progress_events
from masprism_batch.pipelines.progress import BarProgress

log = logging.getLogger("masprism_batch.progress")
DEFAULT_INTERVAL = 30.0
TICK = 1.0  # seconds between redraws of the terminal bar


def _dur(s: float) -> str:
    s = int(round(s))
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s" if m else f"{sec}s"


def progress_line(done: int, total: int | None, elapsed: float, tokens_per_s: float | None) -> str:
    rate = done / elapsed if elapsed > 0 else 0.0
    parts = [f"{done:,}/{total:,} traces ({100 * done / total:.1f}%)" if total else f"{done:,} traces",
             f"{rate:.2f} traces/s"]
    if tokens_per_s is not None:
        parts.append(f"{tokens_per_s:,.0f} tokens/s")
    parts.append(f"elapsed {_dur(elapsed)}")
    if total:
        parts.append(f"ETA {_dur((total - done) / rate)}" if rate > 0 and done < total else
                     "ETA -" if done < total else "done")
    return "progress: " + ", ".join(parts)


class HeartbeatProgress(BarProgress):
    """The committer's bar where stderr is a terminal; without one (and `interval` > 0), `progress_line`s as
    packs arrive, as prefill groups finish inside a pack, and from a timer. `show`: False, no display at all
    (the default display's sparse log lines only)."""

    def __init__(self, show: bool = True, interval: float = DEFAULT_INTERVAL):
        super().__init__(show)
        self.interval = float(interval)
        self._on = False
        self._done, self._toks = 0, None
        # traces finished in the running pack (not yet counted by on_pack) and tokens prefilled
        self._inflight, self._tokens = 0, 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last, self._last_line = time.perf_counter(), None
        self._total: int | None = None
        self._t0 = time.perf_counter()

    def begin(self, total: int, description: str) -> None:
        self._total = total
        self._last = self._t0 = time.perf_counter()
        tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self._on = self.show and not tty and self.interval > 0
        super().begin(total, description)
        if self.bar is not None and not self.bar.disable:  # a terminal: the bar moves every TICK
            self._above_bar()
            progress_events.subscribe(self.on_group)
            self._thread = threading.Thread(target=self._tick, name="progress-tick", daemon=True)
            self._thread.start()
        if self._on:
            self._log()
            progress_events.subscribe(self.on_group)
            self._thread = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
            self._thread.start()

    def plain_lines(self) -> bool:
        return not self._on  # ours replace them

    def _above_bar(self) -> None:
        """Log records go through tqdm.write while the bar is drawn, so a warning starts a line of its own."""
        from tqdm.contrib.logging import logging_redirect_tqdm

        root = logging.getLogger()
        filters = [f for h in root.handlers for f in h.filters]  # e.g. the CLI's printable-text filter
        self._redirect = logging_redirect_tqdm(loggers=[root])
        self._redirect.__enter__()
        for h in root.handlers:
            for f in filters:
                if f not in h.filters:
                    h.addFilter(f)

    def _log(self, final: bool = False) -> None:
        with self._lock:
            elapsed = time.perf_counter() - self._t0
            done = self._done if final else self._done + self._inflight
            if self._total:
                done = min(done, self._total)
                if done >= self._total and not final:
                    return  # the end line says it: once, with the run's whole elapsed time
            toks = self._tokens / elapsed if self._tokens and elapsed > 0 else self._toks
            line = progress_line(done, self._total, elapsed, toks)
            if line == self._last_line:
                return  # never the same line twice
            self._last, self._last_line = time.perf_counter(), line
        log.info("%s", line)

    def on_group(self, stage: str, items: int, tokens: int) -> None:
        with self._lock:
            self._tokens += tokens
            if stage == "pass2":
                self._inflight += items
            due = self._on and time.perf_counter() - self._last >= self.interval / 6
        if due:  # a pass-1 group: tokens/s from the first one; a pass-2 group: its traces are about done
            self._log()

    def _tick(self) -> None:
        """Redraw the bar every TICK: tqdm's clock and ETA move only when it draws, and the tokens/s of the
        prefill groups finished so far (packs can be minutes apart on a CPU)."""
        while not self._stop.wait(TICK):
            with self._lock:
                elapsed = time.perf_counter() - self._t0
                toks = self._tokens / elapsed if self._tokens and elapsed > 0 else None
            if toks is not None:
                self.bar.set_postfix_str(f"{toks:,.0f} tok/s", refresh=False)
            self.bar.refresh()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            if time.perf_counter() - self._last >= self.interval * 0.99:  # quiet for a whole interval
                self._log()

    def on_pack(self, records: int, traces: int, tokens: int, elapsed: float) -> None:
        with self._lock:
            self._done += records
            self._inflight = 0  # the pack is in: its traces are in _done now
            self._toks = tokens / elapsed
        super().on_pack(records, traces, tokens, elapsed)

    def close(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            progress_events.unsubscribe(self.on_group)
            if self._on:
                self._log(final=True)
        super().close()
        if getattr(self, "_redirect", None) is not None:
            self._redirect.__exit__(None, None, None)  # the handlers as they were
            self._redirect = None


@contextlib.contextmanager
def heartbeat(interval: float = DEFAULT_INTERVAL, show: bool = True) -> Iterator[HeartbeatProgress]:
    """The display for one run command: pass it as the engine's `progress`. `show`: the --progress option;
    `interval`: seconds between lines when stderr is not a terminal (0: none). Closed when the block ends, so
    a run that fails leaves no timer behind."""
    progress = HeartbeatProgress(show, interval)
    try:
        yield progress
    finally:
        progress.close()
