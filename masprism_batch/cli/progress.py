"""Progress of `attribute` / `run` / `eval` / `demo` when stderr is not a terminal (a log file, CI, nohup).

On a terminal the driver's tqdm bar is shown as before. Without one, tqdm draws nothing, and finished packs
can be minutes apart, so lines are logged instead:

    progress: 120/2,000 traces (6.0%), 0.41 traces/s, 1,850 tokens/s, elapsed 4m53s, ETA 1h16m

- as prefill groups finish inside a pack (`progress_events`; local engine): tokens/s from the first pass-1 group
  on, and the traces of each pass-2 group counted as done (their verdict follows at once); at most one line
  every `interval / 6` seconds;
- every `interval` seconds while no line was logged (a long prefill);
- one at the end, never twice the same line.

`heartbeat(interval)` swaps the bar class the run driver (`masprism_batch.pipelines.driver`) creates for the
duration of one command; the driver itself is unchanged (it calls `tqdm(total=..., disable=...)`, `update(n)`,
`set_postfix_str("<n> tok/s")` and `close()`).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import time
from collections.abc import Iterator

from tqdm import tqdm

from masprism_batch import progress_events

log = logging.getLogger("masprism_batch.progress")
DEFAULT_INTERVAL = 30.0
_TOKS = re.compile(r"([\d,]+(?:\.\d+)?) tok/s")


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


class HeartbeatBar(tqdm):
    """tqdm that, when stderr is not a terminal, logs `progress_line` as traces finish and from a timer."""

    interval = DEFAULT_INTERVAL

    def __init__(self, *args, **kwargs):
        self._hb_done, self._hb_toks = 0, None
        # traces finished in the running pack (not yet counted by the driver's update) and tokens prefilled
        self._hb_inflight, self._hb_tokens = 0, 0
        self._hb_lock = threading.Lock()
        self._hb_last, self._hb_last_line = time.perf_counter(), None
        self._hb_total = kwargs.get("total")
        want = kwargs.get("disable")
        tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
        self._hb_on = want is None and not tty and self.interval > 0  # None: "auto" = a bar only on a terminal
        self._hb_t0 = time.perf_counter()
        self._hb_stop = threading.Event()
        super().__init__(*args, **kwargs)
        if self._hb_on:
            self._hb_log()
            progress_events.subscribe(self._hb_event)
            self._hb_thread = threading.Thread(target=self._beat, name="progress-heartbeat", daemon=True)
            self._hb_thread.start()

    def _hb_log(self, final: bool = False) -> None:
        with self._hb_lock:
            elapsed = time.perf_counter() - self._hb_t0
            done = self._hb_done if final else self._hb_done + self._hb_inflight
            if self._hb_total:
                done = min(done, self._hb_total)
            toks = self._hb_tokens / elapsed if self._hb_tokens and elapsed > 0 else self._hb_toks
            line = progress_line(done, self._hb_total, elapsed, toks)
            if line == self._hb_last_line:
                return  # never the same line twice
            self._hb_last, self._hb_last_line = time.perf_counter(), line
        log.info("%s", line)

    def _hb_event(self, stage: str, n_items: int, tokens: int) -> None:
        with self._hb_lock:
            self._hb_tokens += tokens
            if stage == "pass2":
                self._hb_inflight += n_items
            due = time.perf_counter() - self._hb_last >= self.interval / 6
        if due:  # a pass-1 group: tokens/s from the first one; a pass-2 group: its traces are about done
            self._hb_log()

    def _beat(self) -> None:
        while not self._hb_stop.wait(self.interval):
            if time.perf_counter() - self._hb_last >= self.interval * 0.99:  # quiet for a whole interval
                self._hb_log()

    def update(self, n=1):
        with self._hb_lock:
            self._hb_done += n or 0
            self._hb_inflight = 0  # the pack is committed: its traces are in _hb_done now
        return super().update(n)

    def set_postfix_str(self, s="", refresh=True):
        m = _TOKS.search(s or "")
        if m:
            self._hb_toks = float(m.group(1).replace(",", ""))
        return super().set_postfix_str(s, refresh)

    def close(self):
        if getattr(self, "_hb_on", False) and not self._hb_stop.is_set():
            self._hb_stop.set()
            progress_events.unsubscribe(self._hb_event)
            self._hb_log(final=True)
        return super().close()


@contextlib.contextmanager
def heartbeat(interval: float = DEFAULT_INTERVAL) -> Iterator[None]:
    """Within the block, run drivers report progress every `interval` s when stderr is not a terminal."""
    from masprism_batch.pipelines import driver

    bar = type("HeartbeatBar", (HeartbeatBar,), {"interval": float(interval)})
    old = driver.tqdm
    driver.tqdm = bar
    # the driver's own per-pack line (no total, no ETA) would repeat ours: dropped while the timer runs
    quiet = _DropDriverProgress() if interval > 0 else None
    if quiet is not None:
        driver.log.addFilter(quiet)
    try:
        yield
    finally:
        driver.tqdm = old
        if quiet is not None:
            driver.log.removeFilter(quiet)


class _DropDriverProgress(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("progress:")
