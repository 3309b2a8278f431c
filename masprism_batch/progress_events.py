"""Progress from inside a pack: the model stage reports each finished prefill group here, so a progress display
can move (and show tokens/s) long before the pack's traces are committed. A pack holds many traces on CPU
(a 90 s pack showed "0/10 traces, ETA -" until it ended, then jumped to 6/10).

Listeners run in the model stage's thread and must be quick; none are registered unless a command displays
progress: a run's display (`pipelines.progress.Progress`) subscribes its `on_group` (`cli/progress.py`). Local
engine only: Ray actors run in other processes and report per pack.
"""

from __future__ import annotations

from collections.abc import Callable

Listener = Callable[[str, int, int], None]  # (stage: "pass1" | "pass2", items finished, tokens read)
_listeners: list[Listener] = []


def subscribe(fn: Listener) -> None:
    _listeners.append(fn)


def unsubscribe(fn: Listener) -> None:
    if fn in _listeners:
        _listeners.remove(fn)


def prefill_done(stage: str, n_items: int, tokens: int) -> None:
    """One prefill group finished: `n_items` sequences (pass 2: traces, whose verdict follows at once)."""
    for fn in list(_listeners):
        fn(stage, n_items, tokens)
