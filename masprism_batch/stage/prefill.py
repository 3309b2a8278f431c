"""Prefill groups: the model stage's packed forwards (`model.signals`), each at most the run's token budget
(`buckets.forward_groups`), and pass 1 of a long trace read in windows and recombined per trace (windows.py).
"""

from __future__ import annotations

import logging
import time

from masprism_batch import progress_events
from masprism_batch.config import PipelineConfig
from masprism_batch.render import buckets
from masprism_batch.stage.combine import combine_windows

log = logging.getLogger(__name__)


def prefill_groups(model, rendered: dict, cfg: PipelineConfig, stage: str, on_group=None, **kw) -> dict:
    """Run the prefills of `rendered` in prefill groups (packed forwards of at most the run's token budget, one
    `model.signals` call each): {key: (SeqSignals or the exception, seconds attributed to key)}.

    `rendered` values have `input_ids` and `step_ids()` (and `n_steps` for windows); kw go to model.signals.
    A group that fails (e.g. out of memory) is retried item by item, so one bad trace fails alone.
    on_group({key: result}) is called after each group, before the next one is launched.
    kw per_head: a bool, or the set of keys read per head: those are packed apart, so the others
    take the signal op's fused kernel (the C++ op has no per-head variant).
    """
    heads_for = kw.pop("per_head", False)
    keys = sorted(rendered)
    results: dict[int, tuple] = {}

    def run(idx: list[int], per_head: bool) -> bool:
        t0 = time.perf_counter()
        try:
            n_steps = [getattr(rendered[i], "n_steps", None) for i in idx]
            # NLL only where the method reads it: step tokens, and a window's own ones (not its context/digest)
            sigs = model.signals([rendered[i].input_ids for i in idx], [rendered[i].step_ids() for i in idx],
                                 None if None in n_steps else n_steps, per_head=per_head,
                                 nll_from=[getattr(rendered[i], "offset", 0) for i in idx], nll_steps_only=True,
                                 **kw)
        except Exception as exc:  # noqa: BLE001 - one bad group must not sink the others
            log.warning("%s prefill of %d trace(s) failed: %s", stage, len(idx), exc)
            if len(idx) == 1:
                results[idx[0]] = (exc, 0.0)
            return False
        dt = time.perf_counter() - t0
        total = sum(len(rendered[i].input_ids) for i in idx)
        for i, s in zip(idx, sigs, strict=True):
            results[i] = (s, dt * len(rendered[i].input_ids) / total)
        return True

    split = [(bool(heads_for), keys)] if isinstance(heads_for, bool) else \
        [(False, [k for k in keys if k not in heads_for]), (True, [k for k in keys if k in heads_for])]
    work = [([ks[g] for g in group], ph) for ph, ks in split if ks
            for group in buckets.forward_groups([len(rendered[k].input_ids) for k in ks], cfg)]
    for idx, ph in work:
        if not run(idx, ph) and len(idx) > 1:
            for i in idx:
                run([i], ph)
        if on_group is not None:
            on_group({i: results[i] for i in idx})
        progress_events.prefill_done(stage, len(idx), sum(len(rendered[i].input_ids) for i in idx))
    return results



def pass1_signals(model, r1: dict, wins: dict, cfg: PipelineConfig, per_head: bool | set, on_trace, hw=None) -> dict:
    """Pass 1 prefills: one per trace (truncate) or one per window, recombined per trace (windows.py).
    on_trace(i, signals) as soon as trace i's prefill (every window of it) is back and did not fail."""
    def ready(got: dict) -> None:
        for i, (s, _) in got.items():
            if not isinstance(s, Exception):
                on_trace(i, s)

    if not wins:
        return prefill_groups(model, r1, cfg, "pass1", on_group=ready, per_head=per_head)
    items = {(i, w): win for i, wd in wins.items() for w, win in enumerate(wd.windows)}
    left, parts, out, broken = {i: len(wd.windows) for i, wd in wins.items()}, {}, {}, {}

    def combine(i: int) -> None:
        wd = wins[i]
        got = [parts[(i, w)] for w in range(len(wd.windows))]
        bad = next((p[0] for p in got if isinstance(p[0], Exception)), None)
        secs = sum(p[1] for p in got)
        try:
            out[i] = (bad if bad is not None else combine_windows(wd, [p[0] for p in got], len(wd.full.step_spans),
                                                                  head_weights=hw), secs)
        except Exception as exc:  # noqa: BLE001 - raised after the prefills in trace order, as it always was
            broken[i] = exc

    def group_done(got: dict) -> None:
        parts.update(got)
        for i, _ in got:
            left[i] -= 1
        done = sorted({i for i, _ in got if not left[i]})
        for i in done:
            combine(i)
        ready({i: out[i] for i in done if i in out})

    prefill_groups(model, items, cfg, "pass1", on_group=group_done,
             per_head={k for k in items if k[0] in per_head} if isinstance(per_head, set) else per_head)
    for i in wins:
        if i not in out and i not in broken:  # a trace with no window: nothing to wait for
            combine(i)
        if i in broken:
            raise broken[i]
    return {i: out[i] for i in wins}
