"""The pack: the unit of work of the model stage, a few traces whose pass-1 tokens fit the run's token budget.

`make_packs` (CPU stage) renders pass 1 of a shard's traces once, through `masprism_batch.render.pass1`, and
groups them into packs; `process_pack` (model stage) runs the attribution (`model_stage.attribute_traces`: prefill ->
method -> pass 2 -> rows) on one pack's shipped renders, isolating failures down to single traces, and
`reconcile` makes its output account for every input trace exactly once. Both engines run exactly this code;
only where it runs differs: one process (local) or Ray tasks and actors (ray).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import dataclass, field

from masprism_batch.pipelines.crash_guard import CrashGuard
from masprism_batch.pipelines.model_stage import attribute_traces, halves

from masprism_batch.config import PipelineConfig
from masprism_batch.schema import error_row
from masprism_batch.stage.attribute import TIMINGS, StageOutput
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)


@dataclass
class PackOutput(StageOutput):
    """`process_pack`'s rows (each input trace once in attributions + errors) and the model stage's timings,
    summed over the stage calls a pack took (one, or one per trace after a failure)."""

    seconds: float = 0.0  # wall seconds of the whole pack


def make_packs(traces: list[Trace], tokenizer, rcfg, cfg: PipelineConfig, guard: CrashGuard | None = None,
               input_path: str | None = None, rejected: list[dict] | None = None,
               render=None) -> list[tuple[list[Trace], list, int]]:
    """Render pass 1 (the model stage's render config `rcfg`), then packs of (traces, renders, tokens) of at most
    `pack_budget` pass-1 tokens (a pack's pass 1 is one prefill group, its work bounded). The renders travel with the pack: the model stage does not render pass 1 again. `render`: what
    renders the traces without a guard (default `pass1.render_traces`; the local engine's `RenderPool` on a GPU
    host gives the same renders from several processes).

    A trace the render rejects stays in its pack with its error row as its render (0 tokens): the model stage
    writes that row, so every trace is accounted for in one place. With a `guard` (the shard's CPU stage
    crashed its worker before), each trace is rendered under it and a trace that already crashed a worker is
    left out, with an error row appended to `rejected`.
    """
    from masprism_batch.render import buckets, pass1

    kept, renders = [], []
    if guard is None:
        kept, renders = list(traces), list((render or pass1.render_traces)(traces, tokenizer, rcfg)) if traces else []
    for t in traces if guard is not None else []:
        if guard.begin(t.trace_id) is not None:
            if rejected is not None:
                rejected.append(error_row(input_path=input_path, record_id=t.trace_id, stage="render",
                                          reason="worker_crashed",
                                          message="the worker process died while rendering this trace"))
            continue
        kept.append(t)
        renders += pass1.render_traces([t], tokenizer, rcfg)
        guard.done(t.trace_id)
    if len(renders) != len(kept):
        raise RuntimeError(f"{len(renders)} pass-1 renders for {len(kept)} traces")
    lengths = [pass1.n_tokens(r) for r in renders]
    groups = buckets.pack(lengths, pack_budget(cfg)) if kept else []
    if sorted(i for g in groups for i in g) != list(range(len(kept))):
        raise RuntimeError(f"pack() returned groups that do not cover each trace once: {groups}")
    return [([kept[i] for i in g], [renders[i] for i in g], sum(lengths[i] for i in g)) for g in groups]


# Pass-1 tokens of one pack on a CPU: the pack is the unit that finishes (both passes, verdicts) and commits, so
# it bounds what an interruption loses. The whole stage read ~240 tokens/s of pass 1 + pass 2 on the 2-core CPU
# (SmolLM2-135M, docs/benchmarks.md) and pass 2 + counterfactuals read 1-2x pass 1: 2,048 is ~20-30 s of work
# there, where the 8,192-token prefill group held all 11 logs of a run for 200 s (issue 51).
CPU_PACK_TOKENS = 2048
# Traces rendered before packs are cut from them, window after window: the first pack is ready after 8
# renders (the device starts early), later windows are larger so the packs stay full. Deterministic in the
# shard's trace order, so a resume cuts the same packs (the crash ledger's keys).
PACK_WINDOWS = (8, 16, 32, 64)


def pack_budget(cfg: PipelineConfig) -> int:
    """Pass-1 tokens one pack may hold: the forward budget, or less where `engine.pack_tokens` bounds the work."""
    from masprism_batch.render import buckets

    bound = cfg.engine.pack_tokens
    return min(buckets.forward_budget(cfg), bound) if bound else buckets.forward_budget(cfg)


def with_pack_bound(cfg: PipelineConfig, on_gpu: bool) -> PipelineConfig:
    """`cfg` with `engine.pack_tokens` settled for the device: a user's value is kept; else on a GPU the forward
    budget (a pack takes about a second there), on a CPU `CPU_PACK_TOKENS`. (engine is outside the hash.)"""
    if cfg.engine.pack_tokens is not None or on_gpu:
        return cfg
    return cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"pack_tokens": CPU_PACK_TOKENS})})


def windows_of(items: list) -> list[list]:
    """`items` cut into consecutive windows of `PACK_WINDOWS` sizes (the last size repeated)."""
    out, i, k = [], 0, 0
    while i < len(items):
        n = PACK_WINDOWS[min(k, len(PACK_WINDOWS) - 1)]
        out.append(items[i:i + n])
        i, k = i + n, k + 1
    return out


def _describe(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__name__}: {e}{where}"[:2000]


class PackRunner:
    """`process_pack` in two halves, so an engine overlaps them across packs: `start` runs the device half of a
    pack (every prefill; under `lock`, which serialises all use of the model), `finish` its host tail (method,
    verdicts, rows) and may run on another thread while the next pack's `start` holds the device.

    Failures are isolated as in one call: a pack whose device half or tail raises is run again one trace at a
    time (each attempt's device half under `lock` too, wherever `finish` runs), and every input trace comes
    out exactly once (`reconcile`). `attribute`: the model stage, whole or in halves (`model_stage.halves`)."""

    def __init__(self, model, cfg: PipelineConfig, attribute=attribute_traces, lock=None):
        self.model, self.cfg = model, cfg
        self.device, self.tail = halves(attribute)
        self.lock = lock if lock is not None else threading.Lock()

    def start(self, traces: list[Trace], renders: list, input_path: str, guard=None) -> Started:
        """The device half of a pack; with a `guard` (a crash history) the whole pack, one trace at a time."""
        st = Started(traces, renders, input_path, guard, PackOutput())
        t0 = time.perf_counter()
        if guard is not None or not traces:
            st.todo = list(zip(traces, renders, strict=True))
            self._one_by_one(st)
        else:
            try:
                with self.lock:
                    st.handle = self.device(traces, self.model, self.cfg, renders)
            except Exception as exc:  # noqa: BLE001
                log.warning("pack of %d traces failed (%s); retrying them one by one", len(traces), _describe(exc))
                st.todo = list(zip(traces, renders, strict=True))
        st.seconds = time.perf_counter() - t0
        return st

    def finish(self, st: Started) -> PackOutput:
        """The host tail of a started pack (and the one-by-one reruns it needs): its rows, each trace once."""
        t0 = time.perf_counter()
        if st.handle is not None:
            try:
                st.collect(self.tail(st.handle))
            except Exception as exc:  # noqa: BLE001
                log.warning("pack of %d traces failed (%s); retrying them one by one", len(st.traces), _describe(exc))
                st.attributions, st.step_scores, st.errors = [], [], []
                st.todo = list(zip(st.traces, st.renders, strict=True))
            st.handle = None
        self._one_by_one(st)
        out = st.out
        out.attributions, out.step_scores, out.errors = reconcile([t.trace_id for t in st.traces], st.attributions,
                                                                  st.step_scores, st.errors, st.input_path)
        out.seconds = st.seconds + time.perf_counter() - t0
        return out

    def _whole(self, traces, renders):
        with self.lock:
            handle = self.device(traces, self.model, self.cfg, renders)
        return self.tail(handle)

    def _one_by_one(self, st: Started) -> None:
        guard, cfg = st.guard, self.cfg
        for t, r in st.todo:
            reason = guard.begin(t.trace_id) if guard is not None else None
            if reason is not None:
                st.errors.append(error_row(input_path=st.input_path, record_id=t.trace_id, stage="prefill",
                                           reason=reason, message="the worker process died while processing this "
                                                                  "trace, more than once"))
                continue
            last: BaseException | None = None
            for _ in range(cfg.engine.attempts_per_trace):
                try:
                    st.collect(self._whole([t], [r]))
                    last = None
                    break
                except Exception as exc:  # noqa: BLE001
                    last = exc
            if last is not None:
                st.errors.append(error_row(input_path=st.input_path, record_id=t.trace_id, stage="attribute",
                                           reason="attribute_failed", message=_describe(last)))
            if guard is not None:
                guard.done(t.trace_id)
        st.todo = []


@dataclass
class Started:
    """A pack between `PackRunner.start` and `finish`: its device half's handle, or the traces still to run
    one by one, and the rows and timings collected so far."""

    traces: list[Trace]
    renders: list
    input_path: str
    guard: object
    out: PackOutput
    handle: object = None
    todo: list = field(default_factory=list)
    attributions: list = field(default_factory=list)
    step_scores: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    seconds: float = 0.0

    def collect(self, out) -> None:
        for k in TIMINGS:  # a replacement stage (tests, benchmarks) may report none of them
            setattr(self.out, k, getattr(self.out, k) + getattr(out, k, 0))
        self.attributions += list(out.attributions)
        self.step_scores += list(out.step_scores)
        self.errors += list(out.errors)


def process_pack(traces: list[Trace], renders: list, model, cfg: PipelineConfig, input_path: str, guard=None,
                 attribute=attribute_traces) -> PackOutput:
    """Run both passes on one pack; isolate failures down to single traces (`PackRunner`, both halves at once).

    Returns attributions/step_scores/errors rows that account for every input trace exactly once. `guard`
    (`.begin(trace_id) -> reason | None`, `.done(trace_id)`) lets the engines drop traces that already
    crashed a worker process; with a guard, traces run one by one so a crash is pinned to one trace.
    `attribute(traces, model, cfg, renders)`: the model stage (default: `model_stage.attribute_traces`).
    """
    runner = PackRunner(model, cfg, attribute)
    return runner.finish(runner.start(traces, renders, input_path, guard))


def reconcile(ids: list[str], attributions, step_scores, errors, input_path):
    """Enforce 'each input trace exactly once in attributions + errors' on a stage's output."""
    wanted = set(ids)
    done: set[str] = set()
    a_out = []
    for r in attributions:
        tid = r["trace_id"]
        if tid in wanted and tid not in done:
            done.add(tid)
            a_out.append(r)
        else:
            log.warning("dropping unexpected or repeated attribution row for %r", tid)
    e_out = []
    for r in errors:
        tid = r.get("record_id")
        if tid in wanted:
            if tid in done:
                continue  # already attributed or already rejected: keep the first outcome only
            done.add(tid)
        e_out.append(r)
    for tid in ids:
        if tid not in done:
            done.add(tid)
            e_out.append(error_row(input_path=input_path, record_id=tid, stage="attribute", reason="no_output",
                                   message="the attribution stage returned no row for this trace"))
    attributed = {x["trace_id"] for x in a_out}
    s_out = [r for r in step_scores if r["trace_id"] in attributed]
    return a_out, s_out, e_out


def tokens_of(attributions: list[dict]) -> int:
    return int(sum((r.get("tokens_pass1") or 0) + (r.get("tokens_pass2") or 0) for r in attributions))
