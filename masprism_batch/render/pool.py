"""Pass-1 renders of a shard on a pool of processes (the local engine on a CUDA host).

On a GPU the model stage is host-bound (kernel launches from Python), so a render thread beside it would take
the interpreter lock from the launches, and the first shard's render is on the critical path whatever runs
ahead (the first pack needs every length of its shard). `RenderPool` renders a shard's traces in contiguous
chunks on `workers` spawned processes, each holding its own copy of the tokenizer, and concatenates the
chunks in order: the renders, hence the packs and every output, are those of `pass1.render_traces` in one
process (the render is a pure function of trace, tokenizer and render config).

A dead worker (a tokenizer that segfaults) breaks the pool: that shard and every later one render in this
process, as without a pool, so the crash ledger pins the next crash as before.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import repeat

from masprism_batch.render import pass1

log = logging.getLogger(__name__)
CHUNKS_PER_WORKER = 4  # small chunks even out traces of very different lengths
_TOKENIZER = None  # the worker's copy


def _init(tokenizer) -> None:
    global _TOKENIZER
    _TOKENIZER = tokenizer


def _render(traces, rcfg):
    return pass1.render_traces(traces, _TOKENIZER, rcfg)


def _ready() -> None:
    return None


class RenderPool:
    """`pool(traces, tokenizer, rcfg)`: `pass1.render_traces` on `workers` processes, results in input order."""

    def __init__(self, tokenizer, workers: int):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.tokenizer, self.workers = tokenizer, workers
        # spawn: a fork of a process that initialised CUDA (or runs threads) is not safe
        self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init, initargs=(tokenizer,))

    def __call__(self, traces: list, tokenizer, rcfg) -> list:
        if self._pool is None or tokenizer is not self.tokenizer or len(traces) < 2:
            return pass1.render_traces(traces, tokenizer, rcfg)
        size = math.ceil(len(traces) / (self.workers * CHUNKS_PER_WORKER))
        chunks = [traces[i:i + size] for i in range(0, len(traces), size)]
        try:
            return [r for part in self._pool.map(_render, chunks, repeat(rcfg)) for r in part]
        except BrokenProcessPool as exc:
            log.warning("a render process died (%s): rendering in this process from now on", exc)
            self.close()
            return pass1.render_traces(traces, tokenizer, rcfg)

    def warm(self) -> RenderPool:
        """Start every worker now (a no-op task each), so their start-up overlaps the caller's next work."""
        if self._pool is not None:
            for _ in range(self.workers):
                self._pool.submit(_ready)
        return self

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> RenderPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
