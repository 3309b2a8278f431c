"""The attribution stage shared by every engine: a list of traces in, Arrow-ready rows out.

(pass-1 renders, from planning or pass1.render_traces) -> prefill groups -> symptoms/candidates -> render
pass 2 -> prefill groups -> ranking. Symptoms, candidates and the pass-2 prompt of a trace are prepared as soon
as its pass-1 signals are back, beside the next pass-1 prefills (pass2.py); the prefill groups are
prefill.py's.
Engines (local, Ray) decide how many traces go into one call; a failure of one trace becomes an error row and
never sinks the others.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from masprism_batch.category import annotate as categories
from masprism_batch.config import PipelineConfig
from masprism_batch.method import counterfactual, heads, reads
from masprism_batch.method import masprism as mp
from masprism_batch.render import buckets, pass1, windows
from masprism_batch.render import prompt as render
from masprism_batch.schema import error_row
from masprism_batch.stage import rows as rows_mod
from masprism_batch.stage.pass2 import Pass2Prep, prepare_pass2, symptom_ratio
from masprism_batch.stage.prefill import pass1_signals, prefill_groups
from masprism_batch.trace import Trace
from masprism_batch.verdict.policy import VerdictPolicy

if TYPE_CHECKING:
    from masprism_batch.model.forward import SeqSignals

log = logging.getLogger(__name__)


@dataclass
class StageOutput:
    attributions: list[dict] = field(default_factory=list)
    step_scores: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    seconds_render_pass2: float = 0.0  # CPU seconds building pass-2 prompts (render.render_pass2), summed per call
    n_render_pass2: int = 0
    # wall seconds the caller waited, after the last pass-1 prefill, for pass-1 method + pass-2 prompts: the part
    # that did not overlap the prefills (all of it with engine.pass2_render_threads = 0)
    seconds_render_pass2_wait: float = 0.0
    # counterfactual suffix prefills: wall seconds and suffix tokens read, summed per call
    seconds_counterfactual: float = 0.0
    tokens_counterfactual: int = 0
    # failure categories' description suffixes (category/annotate.py): wall seconds and suffix tokens read
    seconds_category: float = 0.0
    tokens_category: int = 0


# the timings a caller sums over calls (run.json's per-stage breakdown)
TIMINGS = ("seconds_render_pass2", "seconds_render_pass2_wait", "seconds_counterfactual", "tokens_counterfactual",
           "seconds_category", "tokens_category")


@dataclass
class _TraceWork:
    """One trace on its way through the stage; each step fills its fields (None: not reached, or not for it)."""

    trace: Trace
    r1: render.Rendered  # its pass-1 render (of the whole trace when pass 1 read windows)
    win: windows.Windowed | None  # the windows pass 1 read instead of `r1`, for a trace longer than the context
    need: set  # what its verdict reads (method/reads.py)
    sig1: SeqSignals | None = None  # pass-1 signals (recombined from the windows)
    seconds1: float = 0.0  # its share of the pass-1 prefill seconds
    flags: np.ndarray | None = None  # failure-word flags per step
    p1: mp.Pass1Result | None = None  # the pass-1 method; set once pass 1 succeeded
    r2: render.Rendered | None = None  # pass-2 prompt (None: no candidates, pass 2 off, or it does not fit)
    sig2: SeqSignals | Exception | None = None  # pass-2 signals, or why the pass-2 prefill failed
    seconds2: float = 0.0  # its share of the pass-2 (and counterfactual) prefill seconds
    cf: np.ndarray | None = None  # counterfactual effects D (None: not wanted, or they failed)


def attribute_traces(traces: list[Trace], model, cfg: PipelineConfig, raw_sink=None,
                     rendered: list | None = None, policy: VerdictPolicy | None = None) -> StageOutput:
    """rendered: the pass-1 renders of `traces` (pass1.render_traces, one per trace, done by planning); None
    renders here through that same function. raw_sink: optional callable(trace, dict of raw signals) --
    benchmarks cache them to refit rankers. policy: the run's verdict policy (verdict/policy.py), loaded once by
    the engine; None loads it here. The two halves (`on_device`, `host_tail`) one after the other."""
    return host_tail(on_device(traces, model, cfg, raw_sink, rendered, policy))


@dataclass
class OnDevice:
    """What the device half of the stage hands its host tail: every trace's signals, read back to the host."""

    traces: list[Trace]
    work: dict[int, _TraceWork]
    out: StageOutput
    cfg: PipelineConfig
    model_id: str
    policy: VerdictPolicy
    hw: object
    raw_sink: object
    # the failure kinds (opt-in, `method.categories`) read suffixes on the pass-2 caches after the verdicts, so
    # the tail holds the model only when they are on: that read is device work on the tail's thread
    model: object = None


def on_device(traces: list[Trace], model, cfg: PipelineConfig, raw_sink=None, rendered: list | None = None,
              policy: VerdictPolicy | None = None) -> OnDevice:
    """Every prefill of `traces` (pass 1, pass 2, counterfactuals) and what must run between them (the pass-1
    method, pass-2 prompts): the part of the stage that holds the model. The engines run the host tail of one
    pack (`host_tail`) on a worker while the next pack is here."""
    out = StageOutput()
    rcfg = pass1.render_config(cfg, model.max_context)
    tok = model.tokenizer
    if rendered is None:
        rendered = pass1.render_traces(traces, tok, rcfg)
    if len(rendered) != len(traces):
        raise ValueError(f"{len(rendered)} pass-1 renders for {len(traces)} traces")
    # what each verdict reads, decided before any prefill (method/reads.py): costly features only where read;
    # raw_sink callers (fit-heads, benchmarks) take the raw signals, so they get every one the config enables
    policy = policy if policy is not None else VerdictPolicy.load(cfg.method, model.model_id)
    need = reads.needed(cfg, policy, traces, everything=raw_sink is not None)
    work: dict[int, _TraceWork] = {}  # by index into `traces`: the traces whose render succeeded
    for i, r in enumerate(rendered):
        if isinstance(r, dict):  # the render rejected this trace
            out.errors.append(r)
        elif isinstance(r, windows.Windowed):
            work[i] = _TraceWork(traces[i], r.full, r, need[i])
        else:
            work[i] = _TraceWork(traces[i], r, None, need[i])
    hw = heads.load_for(cfg, model) if heads.wanted(cfg, model) else None
    # per-head pass-1 attention: for the traces that read the learned-head inflow (nothing to apply without
    # head weights, unless the caller takes the raw per-head attention)
    per_head = {i for i, w in work.items()
                if reads.HEAD_ATTENTION in w.need and (hw is not None or raw_sink is not None)}
    r1 = {i: w.r1 for i, w in work.items()}
    prepare = partial(prepare_pass2, traces=traces, r1=r1, cfg=cfg, rcfg=rcfg, tok=tok)
    with Pass2Prep(prepare, cfg.engine.pass2_render_threads) as prep:
        sig1 = pass1_signals(model, r1, {i: w.win for i, w in work.items() if w.win is not None}, cfg, per_head,
                              prep.submit, hw)
        for i, (s, secs) in sig1.items():
            w = work[i]
            w.seconds1 = secs
            if isinstance(s, Exception):
                out.errors.append(error_row(record_id=w.trace.trace_id, stage="prefill", reason="prefill_failed",
                                            message=f"pass 1: {s}"))
                continue
            w.sig1 = s
            pp = prep.result(i)
            w.flags, w.p1, w.r2 = pp.flags, pp.p1, pp.r2
            out.seconds_render_pass2 += pp.cpu_seconds
            out.n_render_pass2 += pp.rendered
    out.seconds_render_pass2_wait = prep.wait_seconds
    if out.n_render_pass2:  # CPU time of the rendering thread: what pass-2 prompts cost beside the GPU work
        log.debug("pass-2 prompts: %d built, %.1f ms CPU each, %.3f s not overlapped", out.n_render_pass2,
                  1e3 * out.seconds_render_pass2 / out.n_render_pass2, out.seconds_render_pass2_wait)
    cf_k = cfg.method.counterfactual_k
    r2 = {i: w.r2 for i, w in work.items() if w.r2 is not None}
    want_cf = {i for i in r2 if cf_k and reads.COUNTERFACTUAL in work[i].need}
    # pass-2 per-head attention is read by no verdict, only by raw_sink callers (fit-heads' training pairs)
    # the categories read their suffixes on the same pass-2 caches, after the verdicts
    keep_kv = bool(want_cf) or cfg.method.categories
    sig2 = prefill_groups(model, r2, cfg, "pass2", per_head=per_head if raw_sink is not None else False,
                    keep_kv=keep_kv)
    for i, (s, secs) in sig2.items():
        work[i].sig2, work[i].seconds2 = s, secs
    _counterfactuals(model, [work[i] for i in sorted(want_cf)], cfg, full=raw_sink is not None, out=out)
    if not cfg.method.categories:
        _drop_kv(work)

    return OnDevice(traces, work, out, cfg, model.model_id, policy, hw, raw_sink,
                    model if cfg.method.categories else None)


def host_tail(d: OnDevice) -> StageOutput:
    """Pass-2 method, verdicts and rows from `on_device`'s signals: host work only (no model call)."""
    out, cfg, policy, hw, raw_sink, work = d.out, d.cfg, d.policy, d.hw, d.raw_sink, d.work
    chash = cfg.config_hash()
    now = datetime.now(timezone.utc)
    cat_items: list[tuple] = []  # (trace, pass-2 render, pass-2 signals, attribution row, step rows) per verdict
    for i in sorted(i for i, w in work.items() if w.p1 is not None):
        w = work[i]
        t, p1, s2 = w.trace, w.p1, w.sig2
        if isinstance(s2, Exception):
            out.errors.append(error_row(record_id=t.trace_id, stage="prefill", reason="prefill_failed",
                                        message=f"pass 2: {s2}"))
            continue
        if not p1.candidates:
            ranking = mp.fallback_ranking(p1)
        elif s2 is None:
            ranking = mp.rank_pass1_only(p1)
        else:
            ranking = mp.pass2(s2.token_nll, w.r2.step_spans, s2.step_attn, w.flags,
                               symptom_ratio(t, cfg), p1.candidates, cfg.method)
        extra = _extra_features(p1, w.sig1, s2, w.cf, hw)
        rows = rows_mod.step_rows(t, p1, ranking, w.flags, w.r1, w.sig1, extra)
        if raw_sink is not None:
            raw_sink(t, {"p1": p1, "sig1": w.sig1, "sig2": s2, "r2": w.r2, "cf": w.cf, "rows": rows,
                         "ranking": ranking, "flags": w.flags})
        ranking, verdict = rows_mod.decide(t, rows, ranking, cfg, policy)  # rescore calls the same
        r1_or_windows = w.win if w.win is not None else w.r1
        out.attributions.append(rows_mod.attribution_row(t, ranking, d.model_id, chash, cfg, r1_or_windows, w.r2,
                                                         w.seconds1, w.seconds2, now, verdict))
        out.step_scores.extend(rows)
        if verdict.order:
            cat_items.append((t, w.r2, s2, out.attributions[-1], rows))
    got = categories.annotate(d.model, cfg, cat_items, buckets.forward_budget(cfg), policy)
    out.seconds_category, out.tokens_category = got["seconds"], got["tokens"]
    _drop_kv(work)
    return out


def _drop_kv(work: dict) -> None:
    """The pass-2 K/V caches are large: dropped once the counterfactuals (and categories) have read them."""
    for w in work.values():
        if w.sig2 is not None and not isinstance(w.sig2, Exception):
            w.sig2.kv = None


def _counterfactuals(model, want: list[_TraceWork], cfg, full: bool, out: StageOutput) -> None:
    """Counterfactual D (`cf`) of the traces in `want` whose pass 2 ran, every candidate suffix of them in packed
    batches (method/counterfactual.effects_batch); their time is added to the traces' pass-2 seconds in
    proportion to their pass-2 prompt length. full: every row of D (raw_sink), else the symptoms' rows."""
    ran = [w for w in want if w.sig2 is not None and not isinstance(w.sig2, Exception)]
    cf_k = cfg.method.counterfactual_k
    reqs = [counterfactual.Request(w.r2, w.sig2, w.p1.candidates[:cf_k], max(w.p1.symptoms),
                                   None if full else list(w.p1.symptoms)) for w in ran]
    t0 = time.perf_counter()
    stats: dict = {}
    res = counterfactual.effects_batch(model, reqs, _placeholder_ids(model.tokenizer),
                                       buckets.forward_budget(cfg), stats)
    dt = time.perf_counter() - t0
    out.seconds_counterfactual += dt
    out.tokens_counterfactual += stats.get("tokens", 0)
    total = sum(len(w.r2.input_ids) for w in ran) or 1
    for w, D in zip(ran, res, strict=True):
        if isinstance(D, Exception):  # a failed counterfactual only loses a feature
            log.warning("trace %r: counterfactuals failed: %s", w.trace.trace_id, D)
        else:
            w.cf = D
        w.seconds2 = w.seconds2 + dt * len(w.r2.input_ids) / total


def _placeholder_ids(tok) -> list[int]:
    """The counterfactual placeholder in `tok`'s ids: one short encode per pack (the tokenizer's encoder is
    cached with the tokenizer, `encoding.encoder_for`), so nothing is kept here between packs."""
    from masprism_batch.render.encoding import encoder_for

    (ids,) = encoder_for(tok).encode([counterfactual.PLACEHOLDER])
    return ids


def _extra_features(p1, s1, s2, D, hw) -> dict[str, np.ndarray]:
    """Issue-13 features per step: counterfactual effect on the symptoms, learned-head attention inflow."""
    n = len(p1.nll)
    out = {"cf_effect": np.full(n, np.nan), "attn_in_learned": np.full(n, np.nan)}
    if D is not None:
        out["cf_effect"] = counterfactual.symptom_effect(D, p1.symptoms)
    if hw is not None and s1.step_attn_learned is not None:  # combine.combine_windows applied hw
        out["attn_in_learned"] = mp.inflow(s1.step_attn_learned, p1.symptoms)
    elif hw is not None and s1.step_attn_heads is not None:
        out["attn_in_learned"] = mp.inflow(hw.apply(s1.step_attn_heads), p1.symptoms)
    return out
