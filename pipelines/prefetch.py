"""A bounded prefetch: the CPU stage of the next shards runs in a thread while the model stage computes.

The local engine used to render and pack a shard, then run its packs, then render the next shard: the device
idled during every render (2.96 s of a 10.83 s run on an H200). `Prefetcher` runs `fn(item)` for
the items in order on one background thread, at most `depth` items ahead of the consumer, and hands the
results back in the input order; the consumer's time blocked on a result is `wait_seconds` of that item (the
model stage's wait for input: only the first item's should be more than ~0).

What it does not change: each `fn(item)` runs once, in order, on the same inputs, so its results (the renders
and packs) are the ones a serial loop makes, and the consumer commits in the same order. An exception raised
by `fn` (a BaseException too) is raised by `next()` at that item, after every earlier item was consumed, as
the serial loop would have raised it; nothing after it is started. `close()` stops the thread and waits for
the item it is in, so the caller unwinds (ledger, lock) only once no `fn` runs any more.

Threads, not processes: the renders share the tokenizer's encoder cache (encoding.py) and the crash ledger
of the process; HF fast tokenizers release the GIL while encoding, and torch releases it while it computes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Prefetcher(Generic[T, R]):
    """Iterate (item, fn(item), seconds the consumer waited for it); fn runs on a thread, `depth` items ahead."""

    def __init__(self, fn: Callable[[T], R], items: Iterable[T], depth: int = 1):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._fn, self._items = fn, list(items)
        self._slots = threading.Semaphore(depth + 1)  # the item being consumed + `depth` ahead of it
        self._ready = threading.Condition()
        self._results: dict[int, tuple[bool, object]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="cpu-stage-prefetch", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        for i, item in enumerate(self._items):
            self._slots.acquire()
            if self._stop.is_set():
                return
            try:
                got: tuple[bool, object] = (True, self._fn(item))
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there at this item
                got = (False, exc)
            with self._ready:
                self._results[i] = got
                self._ready.notify_all()
            if not got[0]:
                return

    def __iter__(self) -> Iterator[tuple[T, R, float]]:
        for i, item in enumerate(self._items):
            t0 = time.perf_counter()
            with self._ready:
                while i not in self._results:
                    self._ready.wait()
                ok, value = self._results.pop(i)
            waited = time.perf_counter() - t0
            if not ok:
                raise value  # type: ignore[misc]
            yield item, value, waited  # type: ignore[misc]
            self._slots.release()  # this item is consumed: the thread may start one more

    def close(self) -> None:
        self._stop.set()
        self._slots.release()  # wake a thread blocked on a slot, so it sees the stop
        self._thread.join()

    def __enter__(self) -> Prefetcher[T, R]:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
