"""The two units of work of a run, shared by both engines.

`shard_packs` (CPU stage): read one shard, render pass 1 (the only pass-1 render of a run) window by window,
cut packs of bounded work (the longest traces alone) and hand each on as it is cut. `start_pack` /
`finish_pack` (model stage): the device half (prefills) and the host tail (method, verdicts, rows) of one pack,
on the renders shipped with it; the engines overlap one pack's tail with the next pack's device half. They exchange `contracts.PackTask` / `PackResult`: scalars
and Arrow IPC bytes, which is also what a Ray Data row holds, so the local engine runs the very same bytes
through the very same functions.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator

from masprism_batch.pipelines.contracts import PackResult, PackTask, from_ipc, to_ipc
from masprism_batch.pipelines.crash_guard import CrashGuard
from masprism_batch.pipelines.packs import PackRunner, Started, make_packs, tokens_of, windows_of
from masprism_batch.pipelines.plan import Shard, read_shard

from masprism_batch import schema
from masprism_batch.config import PipelineConfig
from masprism_batch.render import pass1
from masprism_batch.trace import Trace


def shard_packs(shard: Shard, tokenizer, model_context: int, cfg: PipelineConfig,
                guard: CrashGuard | None = None, render=None) -> Iterator[PackTask]:
    """One shard -> its packs, as they are cut, each with its traces' pass-1 renders (Arrow, `pass1.RENDERED`).

    The traces are rendered and packed window after window (`packs.windows_of`), so the first packs go to the
    model while the rest of the shard renders; a pack's `n_packs` is 0 (not known yet) except on the shard's
    last pack, which carries the count the committer waits for. Pack 0 also carries the shard's read
    rejections (and caps warnings); an empty shard is one empty pack, so every shard reaches the committer.
    `model_context`: the model's context, which bounds the render like the model stage's own. `guard`,
    `render`: see `make_packs`; with a guard (the shard's CPU stage crashed before) the shard is one window, so
    the traces it rejects are on pack 0 with the read rejections. A shard committed in part (`shard.done`,
    `shard.errors_done`: a resume after an interruption) packs only the traces its committed pieces do not hold."""
    t0 = time.perf_counter()
    traces, errors = read_shard(shard, cfg.ingest)
    if shard.done:
        done = set(shard.done)
        traces = [t for t in traces if t.trace_id not in done]
    if shard.errors_done:
        errors = []
    seconds_read = time.perf_counter() - t0
    rcfg = pass1.render_config(cfg, model_context)
    parts = [traces] if guard is not None or not traces else windows_of(traces)
    i, held = 0, None  # a pack is handed on once the next one exists: the last one must know it is last
    for w, part in enumerate(parts):
        t1 = time.perf_counter()
        packs = make_packs(part, tokenizer, rcfg, cfg, guard, shard.label, errors, render=render)
        seconds_render = time.perf_counter() - t1
        if not packs and w == len(parts) - 1 and i == 0 and held is None:
            packs = [([], [], 0)]
        for k, (pack, renders, n_tokens) in enumerate(packs):
            task = PackTask(
                shard_id=shard.shard_id, label=shard.label, pack_index=i, pack_key=pack_key(t.trace_id for t in pack),
                n_packs=0, n_traces=len(pack), n_records=len(pack) + (len(errors) if i == 0 else 0),
                tokens_pass1_est=int(n_tokens), traces=to_ipc([t.to_row() for t in pack], schema.TRACES),
                rendered=to_ipc([pass1.to_row(t.trace_id, r) for t, r in zip(pack, renders, strict=True)],
                                pass1.RENDERED),
                errors=to_ipc(errors if i == 0 else [], schema.ERRORS),
                seconds_read=seconds_read if i == 0 else 0.0, seconds_render=seconds_render if k == 0 else 0.0)
            if held is not None:
                yield held
            held, i = task, i + 1
    held.n_packs = i
    yield held


def pack_key(trace_ids) -> str:
    """A pack's name in the crash ledger, from the traces it holds (not its index): a resume that packs only
    the traces not yet committed finds the same pack under the same key, so its crash count carries over."""
    return hashlib.sha256("\0".join(sorted(trace_ids)).encode()).hexdigest()[:16]


def start_pack(task: PackTask, runner: PackRunner, guard=None) -> tuple[PackTask, Started]:
    """The device half of one pack (`PackRunner.start`); `finish_pack` makes its result."""
    traces = [Trace.from_row(r) for r in from_ipc(task.traces).to_pylist()]
    renders = [pass1.from_row(r) for r in from_ipc(task.rendered).to_pylist()]
    return task, runner.start(traces, renders, task.label, guard)


def finish_pack(started: tuple[PackTask, Started], runner: PackRunner) -> PackResult:
    """The host tail of a pack `runner` started: method, verdicts, rows, the result's Arrow IPC tables. Runs on
    any thread (a rerun it needs takes the runner's device lock)."""
    task, st = started
    res = runner.finish(st)
    shard_errors = from_ipc(task.errors).to_pylist()
    return PackResult(
        shard_id=task.shard_id,
        label=task.label,
        pack_index=task.pack_index,
        n_packs=task.n_packs,
        n_traces=task.n_traces,
        n_records=task.n_records,
        tokens=tokens_of(res.attributions),
        traces=task.traces,
        attributions=to_ipc(res.attributions, schema.ATTRIBUTIONS),
        step_scores=to_ipc(res.step_scores, schema.STEP_SCORES),
        errors=to_ipc(shard_errors + res.errors, schema.ERRORS),
        seconds_read=task.seconds_read,
        seconds_render=task.seconds_render,
        seconds_input_wait=task.seconds_input_wait,
        seconds_model=float(res.seconds),
        seconds_render_pass2=float(res.seconds_render_pass2),
        seconds_render_pass2_wait=float(res.seconds_render_pass2_wait),
        seconds_counterfactual=float(res.seconds_counterfactual),
        tokens_counterfactual=int(res.tokens_counterfactual),
    )
