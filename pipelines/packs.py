"""The stage functions both engines call, and the per-shard work built from them.

Both engines run exactly this code on a shard: `read_shard` (Parquet range -> Trace), `make_packs` (pass-1
render, once, through `masprism_batch.render.pass1`, then token-budget packing), `process_pack` (the model stage on
the shipped renders: prefill -> method -> pass 2 -> rows, through `attribution.attribute_traces`, with failure
isolation). Only where it runs differs: one process (local) or Ray tasks and actors (ray).

The model stage is what tests and benchmarks replace, so the engines take its three functions as keyword
arguments (`load_model`, `load_tokenizer`, `attribute`) whose defaults are the functions below; under Ray
they travel to the workers with the tasks (a monkeypatch would not reach those processes).
"""

from __future__ import annotations

import io
import logging
import time
import traceback
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from masprism_batch.config import PipelineConfig
from masprism_batch.schema import error_row
from masprism_batch.trace import Trace

log = logging.getLogger(__name__)


def load_model(cfg: PipelineConfig):
    """The model stage's model (weights, tokenizer, context): the default of the engines' `load_model`."""
    from masprism_batch import model

    return model.load_model(cfg.model, cfg.signals)


def load_tokenizer(cfg: PipelineConfig):
    """(tokenizer, model context): all the CPU stage needs to render and pack; no weights, so a Ray render task
    stays small. The default of the Ray engine's `load_tokenizer` (the local engine uses its model's)."""
    from masprism_batch import model

    return model.load_tokenizer(cfg.model), model.model_context(cfg.model)


def attribute_traces(traces: list[Trace], model, cfg: PipelineConfig, rendered: list):
    """The model stage on one pack (`masprism_batch.stage.attribute.attribute_traces`): the engines' default `attribute`."""
    from masprism_batch.stage import attribute as attribution

    return attribution.attribute_traces(traces, model, cfg, rendered=rendered)


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


# Arrow IPC carries traces and results between stages: schema-checked, no pickle of input data.
def to_ipc(rows: list[dict], table_schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(rows, schema=table_schema)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def from_ipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


class CrashGuard:
    """Pins crashes of a worker *process* (segfault, OOM kill, SIGKILL) to single traces, for either stage.

    `begin_fn(key) -> crashes so far` / `done_fn(key)` are a ledger's (Ray: an actor; local: `FileLedger`, a
    file in OUTDIR that survives the process). A start without a finish is a crash. `begin(trace_id)` returns
    the error reason when this trace already crashed a worker TRACE_CRASHES_BEFORE_REJECT times on its own: the
    caller then rejects it. (An interruption by a signal is no crash: `FileLedger.interrupted` takes its starts
    back. A kill -9 or an OOM kill of the whole process cannot be told from a crash the trace caused, hence two
    crashes alone, not one: three such kills in a row still reject no trace.) A rejected trace keeps its count
    until its unit (pack or CPU stage) finishes, whose `done` drops the unit's trace keys with it: if another
    trace of the unit crashes the process before the unit is committed, the rerun rejects the first one again
    at once instead of running it from zero (k poison traces in one unit: 2 + 2k crashes, issue 37)."""

    def __init__(self, begin_fn, done_fn, prefix: str):
        self.begin_fn, self.done_fn, self.prefix = begin_fn, done_fn, prefix

    def begin(self, trace_id: str) -> str | None:
        if self.begin_fn(self.prefix + trace_id) < TRACE_CRASHES_BEFORE_REJECT:
            return None
        return "worker_crashed"  # its key stays until the unit is done (see the class docstring)

    def done(self, trace_id: str) -> None:
        self.done_fn(self.prefix + trace_id)


PACK_CRASHES_BEFORE_ONE_BY_ONE = 2  # one crash may be a killed worker; two point at a trace in the unit
TRACE_CRASHES_BEFORE_REJECT = 2  # a trace is rejected only after it crashed its process alone this often


class FileLedger:
    """Start/finish counts per key in one JSON file (OUTDIR/_ledger.json) that outlives the process: the crash
    memory of the local engine across resumes, and of the Ray engine's ledger actor across its restarts and the
    driver's. Keys are deterministic (shard id, pack content, trace id), so a resumed run finds them; a key
    whose starts and finishes match is dropped, and `done(unit)` drops the unit's trace keys (`unit/...`)."""

    def __init__(self, path):
        import json
        from pathlib import Path

        from masprism_batch.outdir.manifest import read_control

        self.path = Path(path)
        self._mine: set[str] = set()  # keys begun by this process and not finished yet
        text = read_control(self.path)  # never blocks: a FIFO in its place is refused (OutdirUnsafe)
        try:
            loaded = json.loads(text) if text else {}
        except ValueError:
            loaded = {}
        ok = isinstance(loaded, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in loaded.values())
        self.started: dict[str, int] = {str(k): int(v) for k, v in loaded.items()} if ok else {}

    def _save(self) -> None:
        from masprism_batch.outdir.parts import write_json_atomic

        write_json_atomic(self.started, self.path, durable=False)  # a process crash keeps the page cache

    def begin(self, key: str) -> int:
        crashes = self.started.get(key, 0)
        self.started[key] = crashes + 1
        self._mine.add(key)
        self._save()
        return crashes

    def done(self, key: str) -> None:
        self._mine.discard(key)
        inner = [k for k in self.started if k.startswith(key + "/")]
        for k in inner:
            self.started.pop(k)
            self._mine.discard(k)
        if self.started.pop(key, None) is not None or inner:
            self._save()

    def interrupted(self) -> None:
        """The process is being stopped by a signal: its open starts are no crash of theirs, so they are taken
        back (the pack runs whole again on resume, and no trace is blamed for the interruption)."""
        for key in self._mine:
            left = self.started.get(key, 0) - 1
            if left > 0:
                self.started[key] = left
            else:
                self.started.pop(key, None)
        self._mine.clear()
        self._save()


def make_packs(traces: list[Trace], tokenizer, rcfg, cfg: PipelineConfig, guard: CrashGuard | None = None,
               input_path: str | None = None, rejected: list[dict] | None = None,
               render=None) -> list[tuple[list[Trace], list, int]]:
    """Render pass 1 (the model stage's render config `rcfg`), then token-budget packs of (traces, renders,
    tokens). The renders travel with the pack: the model stage does not render pass 1 again. `render`: what
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
    groups = buckets.pack(lengths, cfg.batch.token_budget) if kept else []
    if sorted(i for g in groups for i in g) != list(range(len(kept))):
        raise RuntimeError(f"pack() returned groups that do not cover each trace once: {groups}")
    return [([kept[i] for i in g], [renders[i] for i in g], sum(lengths[i] for i in g)) for g in groups]


def _describe(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__name__}: {e}{where}"[:2000]


def _run(traces, renders, model, cfg, attribute, cpu: list[float]) -> tuple[list[dict], list[dict], list[dict]]:
    out = attribute(traces, model, cfg, renders)
    cpu[0] += getattr(out, "seconds_render_pass2", 0.0)
    cpu[1] += getattr(out, "seconds_render_pass2_wait", 0.0)
    cpu[2] += getattr(out, "seconds_counterfactual", 0.0)  # issue 24: run.json's per-stage breakdown
    cpu[3] += getattr(out, "tokens_counterfactual", 0)
    return list(out.attributions), list(out.step_scores), list(out.errors)


def process_pack(traces: list[Trace], renders: list, model, cfg: PipelineConfig, input_path: str, guard=None,
                 attribute=attribute_traces) -> dict[str, Any]:
    """Run both passes on one pack; isolate failures down to single traces.

    Returns attributions/step_scores/errors rows that account for every input trace exactly once. `guard`
    (`.begin(trace_id) -> reason | None`, `.done(trace_id)`) lets the Ray actor drop traces that already
    crashed a worker process; with a guard, traces run one by one so a crash is pinned to one trace.
    `attribute(traces, model, cfg, renders)`: the model stage (default: `attribute_traces`).
    """
    t0 = time.perf_counter()
    attributions: list[dict] = []
    step_scores: list[dict] = []
    errors: list[dict] = []
    todo = list(zip(traces, renders, strict=True))
    # pass-2 prompt building (render_pass2): [CPU seconds, seconds the model stage waited for it after its last
    # pass-1 prefill], reported in run.json's stage timings
    cpu = [0.0, 0.0, 0.0, 0]
    if guard is None and todo:
        try:
            a, s, e = _run(traces, renders, model, cfg, attribute, cpu)
            attributions, step_scores, errors, todo = a, s, e, []
        except Exception as exc:  # noqa: BLE001
            log.warning("pack of %d traces failed (%s); retrying them one by one", len(todo), _describe(exc))
    for t, r in todo:
        reason = guard.begin(t.trace_id) if guard is not None else None
        if reason is not None:
            errors.append(error_row(input_path=input_path, record_id=t.trace_id, stage="prefill", reason=reason,
                                    message="the worker process died while processing this trace, more than once"))
            continue
        last: BaseException | None = None
        for _ in range(cfg.engine.attempts_per_trace):
            try:
                a, s, e = _run([t], [r], model, cfg, attribute, cpu)
                attributions += a
                step_scores += s
                errors += e
                last = None
                break
            except Exception as exc:  # noqa: BLE001
                last = exc
        if last is not None:
            errors.append(error_row(input_path=input_path, record_id=t.trace_id, stage="attribute",
                                    reason="attribute_failed", message=_describe(last)))
        if guard is not None:
            guard.done(t.trace_id)
    a, s, e = reconcile([t.trace_id for t in traces], attributions, step_scores, errors, input_path)
    return {"attributions": a, "step_scores": s, "errors": e, "seconds": time.perf_counter() - t0,
            "seconds_render_pass2": cpu[0], "seconds_render_pass2_wait": cpu[1],
            "seconds_counterfactual": cpu[2], "tokens_counterfactual": int(cpu[3])}


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
