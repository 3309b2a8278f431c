"""What happens to a trace between its two passes (symptoms, candidates, pass-2 prompt), overlapped with the
pass-1 prefills of the traces after it.

Building a pass-2 prompt is tokenizer work on the CPU. Done after the last pass-1 prefill, it leaves the
accelerator idle while the model stage tokenises. `Pass2Prep` takes a trace as soon as its pass-1
signals are back and, with `engine.pass2_render_threads` >= 1, prepares it on a small thread pool while the
caller launches the next prefill group: HF tokenizers release the GIL while encoding, torch while it waits on
the device. With 0 threads a trace is prepared inline when the caller asks for it, as before the pool existed.

Either way the caller gets each trace's outcome in the order it asks, and an exception raised while preparing
a trace is raised by `result()` for that trace, so the first one to surface is the one that surfaced inline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from masprism_batch.config import PipelineConfig
from masprism_batch.method import masprism as mp
from masprism_batch.render import prompt as render
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)


def symptom_ratio(trace: Trace, cfg: PipelineConfig) -> float:
    # Span-tree logs (TRAIL, OTel) label several error spans per trace: the paper keeps 50% there, 20% on chats.
    spans = any(s.span_id for s in trace.steps)
    return cfg.method.symptom_ratio_spans if spans else cfg.method.symptom_ratio


def failure_flags(trace: Trace, cfg: PipelineConfig) -> np.ndarray:
    rx = mp.failure_word_regex(cfg.method.failure_words)
    return np.array([bool(rx.search(s.content or "")) for s in trace.steps], dtype=bool)


@dataclass
class Prepared:
    flags: np.ndarray
    p1: mp.Pass1Result
    r2: render.Rendered | None  # None: no candidates, pass 2 off, or the prompt does not fit
    rendered: bool  # render_pass2 was called (counted even when the trace did not fit)
    cpu_seconds: float  # CPU time of render_pass2 in the thread that ran it


def prepare_pass2(i: int, s, *, traces: list[Trace], r1: dict, cfg: PipelineConfig, rcfg, tok) -> Prepared:
    """Trace i from its pass-1 signals `s`: failure flags, pass-1 method, pass-2 prompt."""
    t = traces[i]
    flags = failure_flags(t, cfg)
    p1 = mp.pass1(s.token_nll, r1[i].step_spans, s.step_attn, flags, symptom_ratio(t, cfg), cfg.method)
    if not (cfg.method.run_pass2 and p1.candidates):
        return Prepared(flags, p1, None, False, 0.0)
    r2 = None
    c0 = time.thread_time()  # not process time: that would also count the prefill running beside this thread
    try:
        r2 = render.render_pass2(t, tok, rcfg, p1.keep_full, p1.anomaly_step)
    except render.TraceTooLong as exc:
        log.info("trace %r: pass 2 does not fit (%s); using pass-1 ranking", t.trace_id, exc)
    return Prepared(flags, p1, r2, True, time.thread_time() - c0)


class Pass2Prep:
    """prepare(key, signals) -> anything; submit() as signals arrive, result() once they all have.

    wait_seconds: main-thread wall time spent in result(), i.e. the part of the preparation that did not
    overlap a prefill (inline: all of it)."""

    def __init__(self, prepare: Callable[[Hashable, Any], Any], threads: int):
        self._prepare = prepare
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="pass2-prep") if threads > 0 else None
        self._jobs: dict[Hashable, Any] = {}
        self.wait_seconds = 0.0

    def submit(self, key: Hashable, signals: Any) -> None:
        self._jobs[key] = self._pool.submit(self._prepare, key, signals) if self._pool else signals

    def result(self, key: Hashable) -> Any:
        t0 = time.perf_counter()
        try:
            job = self._jobs.pop(key)
            return job.result() if isinstance(job, Future) else self._prepare(key, job)
        finally:
            self.wait_seconds += time.perf_counter() - t0

    def close(self) -> None:
        if self._pool is not None:  # the caller is done or raising: jobs nobody will ask for need not start
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Pass2Prep:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
