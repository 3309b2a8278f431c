"""The pack: the unit of work of the model stage, a few traces whose pass-1 tokens fit the run's token budget.

`make_packs` (CPU stage) renders pass 1 of a shard's traces once, through `masprism_batch.render.pass1`, and
groups them into packs; `process_pack` (model stage) runs the attribution (`seams.attribute_traces`: prefill ->
method -> pass 2 -> rows) on one pack's shipped renders, isolating failures down to single traces, and
`reconcile` makes its output account for every input trace exactly once. Both engines run exactly this code;
only where it runs differs: one process (local) or Ray tasks and actors (ray).
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass

from masprism_batch.pipelines.crash_guard import CrashGuard
from masprism_batch.pipelines.seams import attribute_traces

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
    """Render pass 1 (the model stage's render config `rcfg`), then packs of (traces, renders, tokens) under the
    run's token budget (`buckets.forward_groups`: a pack's pass 1 is one prefill group). The renders travel with the pack: the model stage does not render pass 1 again. `render`: what
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
    groups = buckets.forward_groups(lengths, cfg) if kept else []
    if sorted(i for g in groups for i in g) != list(range(len(kept))):
        raise RuntimeError(f"pack() returned groups that do not cover each trace once: {groups}")
    return [([kept[i] for i in g], [renders[i] for i in g], sum(lengths[i] for i in g)) for g in groups]


def _describe(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__name__}: {e}{where}"[:2000]


def _run(traces, renders, model, cfg, attribute, acc: PackOutput) -> tuple[list[dict], list[dict], list[dict]]:
    out = attribute(traces, model, cfg, renders)
    for k in TIMINGS:  # a replacement stage (tests, benchmarks) may report none of them
        setattr(acc, k, getattr(acc, k) + getattr(out, k, 0))
    return list(out.attributions), list(out.step_scores), list(out.errors)


def process_pack(traces: list[Trace], renders: list, model, cfg: PipelineConfig, input_path: str, guard=None,
                 attribute=attribute_traces) -> PackOutput:
    """Run both passes on one pack; isolate failures down to single traces.

    Returns attributions/step_scores/errors rows that account for every input trace exactly once. `guard`
    (`.begin(trace_id) -> reason | None`, `.done(trace_id)`) lets the Ray actor drop traces that already
    crashed a worker process; with a guard, traces run one by one so a crash is pinned to one trace.
    `attribute(traces, model, cfg, renders)`: the model stage (default: `seams.attribute_traces`).
    """
    t0 = time.perf_counter()
    out = PackOutput()
    attributions: list[dict] = []
    step_scores: list[dict] = []
    errors: list[dict] = []
    todo = list(zip(traces, renders, strict=True))
    if guard is None and todo:
        try:
            a, s, e = _run(traces, renders, model, cfg, attribute, out)
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
                a, s, e = _run([t], [r], model, cfg, attribute, out)
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
    out.attributions, out.step_scores, out.errors = reconcile([t.trace_id for t in traces], attributions,
                                                              step_scores, errors, input_path)
    out.seconds = time.perf_counter() - t0
    return out


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
