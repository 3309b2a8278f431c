"""A bounded prefetch: the CPU stage of the next packs runs in a thread while the model stage computes.

The local engine used to render and pack a shard, then run its packs, then render the next shard: the device
idled during every render (2.96 s of a 10.83 s run on an H200). `Prefetcher` runs `fn(item)` for the items in
order on one background thread and hands the results back in the input order, at most `depth` results ahead
of the consumer; with `flat=True`, `fn(item)` returns an iterable (a shard's packs, as `pack_work.shard_packs`
cuts them) and each element is one result, so the consumer gets packs, not shards, and the thread cuts the
next pack while the model computes this one. The consumer's time blocked on a result is `wait_seconds` of
that result (the model stage's wait for input: only the first result's should be more than ~0).

What it does not change: each `fn(item)` runs once, in order, on the same inputs, so its results (the renders
and packs) are the ones a serial loop makes, and the consumer commits in the same order. An exception raised
by `fn` or its iterable (a BaseException too) is raised by `next()` at that position, after every earlier
result was consumed, as the serial loop would have raised it; nothing after it is started. `close()` stops the
thread and waits for the result it is in, so the caller unwinds (ledger, lock) only once no `fn` runs any more.

Threads, not processes: the renders share the tokenizer's encoder cache (encoding.py) and the crash ledger
of the process; HF fast tokenizers release the GIL while encoding, and torch releases it while it computes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
_END = object()


class Prefetcher(Generic[T, R]):
    """Iterate (item, result, seconds the consumer waited for it); fn runs on a thread, `depth` results ahead."""

    def __init__(self, fn: Callable[[T], Any], items: Iterable[T], depth: int = 1, flat: bool = False):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._fn, self._items, self._flat = fn, list(items), flat
        self._slots = threading.Semaphore(depth + 1)  # the result being consumed + `depth` ahead of it
        self._ready = threading.Condition()
        self._results: dict[int, tuple[bool, object, object]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="cpu-stage-prefetch", daemon=True)
        self._thread.start()

    def _put(self, n: int, got: tuple[bool, object, object]) -> None:
        with self._ready:
            self._results[n] = got
            self._ready.notify_all()

    def _produce(self) -> None:
        n = 0
        for item in self._items:
            values = None
            while True:
                self._slots.acquire()  # before the work of the next result (fn, or its iterable's next step)
                if self._stop.is_set():
                    return
                try:
                    if values is None:
                        values = iter(self._fn(item)) if self._flat else iter((self._fn(item),))
                    value = next(values)
                except StopIteration:
                    self._slots.release()  # nothing was made: the slot is free again
                    break
                except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there at this position
                    self._put(n, (False, item, exc))
                    return
                self._put(n, (True, item, value))
                n += 1
        self._put(n, (True, None, _END))

    def __iter__(self) -> Iterator[tuple[T, R, float]]:
        n = 0
        while True:
            t0 = time.perf_counter()
            with self._ready:
                while n not in self._results:
                    self._ready.wait()
                ok, item, value = self._results.pop(n)
            waited = time.perf_counter() - t0
            if not ok:
                raise value  # type: ignore[misc]
            if value is _END:
                return
            yield item, value, waited  # type: ignore[misc]
            n += 1
            self._slots.release()  # this result is consumed: the thread may make one more

    def close(self) -> None:
        self._stop.set()
        self._slots.release()  # wake a thread blocked on a slot, so it sees the stop
        self._thread.join()

    def __enter__(self) -> Prefetcher[T, R]:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
