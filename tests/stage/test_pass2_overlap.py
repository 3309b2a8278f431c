"""Pass-2 prompts are built while the next pass-1 prefills run (masprism_batch/stage/pass2.py), and that changes
nothing but when they are built: the same rows, errors and escaping exceptions as building them inline
(`engine.pass2_render_threads = 0`)."""

from __future__ import annotations

import json
import random
import threading

import pytest

from masprism_batch.config import PipelineConfig, load_config
from masprism_batch.model import load_model
from masprism_batch.render import pass1, windows
from masprism_batch.render import prompt as render
from masprism_batch.stage.attribute import attribute_traces
from masprism_batch.trace import Step, Trace

WORDS = "plan search the file error retry tool answer check result failed timeout agent".split()
LONG_WAIT = 20.0  # seconds a prefill waits for a pass-2 render that must come (never reached when it does)
SHORT_WAIT = 0.3  # inline, no render can come before the last pass-1 prefill: this only bounds the wait


def _trace(rng: random.Random, n_steps: int, max_words: int) -> Trace:
    steps = [Step(index=i, agent=rng.choice(["Planner", "Coder", "Terminal"]),
                  content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words))))
             for i in range(n_steps)]
    return Trace(trace_id=f"t{rng.randrange(10**9)}", source="jsonl", steps=steps, question="find the answer")


def _traces(rng: random.Random, n: int) -> list[Trace]:
    # >= 8 steps: at least two symptoms, so candidates, so every trace whose pass 1 succeeds gets a pass-2 render
    return [_trace(rng, rng.randint(8, 10), 5) for _ in range(n)]


@pytest.fixture(scope="module")
def model():
    cfg = load_config(None, model__name="tiny-random", render__max_context=512)
    return load_model(cfg.model, cfg.signals)


def _cfg(mode: str, threads: int, token_budget: int) -> PipelineConfig:
    return load_config(None, model__name="tiny-random", render__max_context=512, render__pass1=mode,
                       batch__token_budget=token_budget, engine__pass2_render_threads=threads)


def _seqs(r) -> list[list[int]]:
    """The token lists a pass-1 render is prefilled as (one per window)."""
    return [w.input_ids for w in r.windows] if isinstance(r, windows.Windowed) else [r.input_ids]


class _Spy:
    """The model, with `before(seqs)` called ahead of every signals() call."""

    def __init__(self, model, before):
        self._model, self._before = model, before

    def __getattr__(self, name):
        return getattr(self._model, name)

    def signals(self, seqs, *args, **kw):
        self._before(seqs)
        return self._model.signals(seqs, *args, **kw)


def _canon(out) -> str:
    drop = {"seconds_pass1", "seconds_pass2", "attributed_at", "time"}
    rows = [[{k: v for k, v in r.items() if k not in drop} for r in rs]
            for rs in (out.attributions, out.step_scores, out.errors)]
    return json.dumps(rows, sort_keys=True, default=repr)  # NaN-safe, exact float reprs


@pytest.mark.parametrize("mode", ["windows", "truncate"])
def test_threads_give_the_same_rows_as_inline(model, mode, rng):
    traces = _traces(rng, 6)
    # 24 one-word steps: two windows whose pass-2 prompt does not fit (windows), or a rejected render (truncate)
    traces.append(_trace(rng, 24, 1))
    traces.append(Trace(trace_id="empty", source="jsonl", steps=[]))
    rng.shuffle(traces)
    cfg0 = _cfg(mode, 0, token_budget=700)  # a few traces per pack, several packs
    renders = pass1.render_traces(traces, model.tokenizer, pass1.render_config(cfg0, model.max_context))
    ok = [r for r in renders if not isinstance(r, dict)]
    bad = {id(s) for s in _seqs(rng.choice(ok))}  # this trace's pass 1 fails (alone, after its pack is retried)

    def fail_one(seqs):
        if any(id(s) in bad for s in seqs):
            raise RuntimeError("injected prefill failure")

    spy = _Spy(model, fail_one)
    outs = {n: attribute_traces(traces, spy, _cfg(mode, n, 700), rendered=renders) for n in (0, 1, 2)}
    assert _canon(outs[1]) == _canon(outs[0]) == _canon(outs[2])
    assert any(e["reason"] == "prefill_failed" for e in outs[0].errors)
    assert len({out.n_render_pass2 for out in outs.values()}) == 1 and outs[0].n_render_pass2 == len(ok) - 1
    assert all(out.seconds_render_pass2 > 0 and out.seconds_render_pass2_wait >= 0 for out in outs.values())


@pytest.mark.parametrize("mode", ["windows", "truncate"])
@pytest.mark.parametrize("threads", [1, 0])
def test_pass2_renders_run_beside_the_last_pass1_prefill(model, mode, threads, monkeypatch, rng):
    """The last pass-1 prefill waits for a pass-2 render: it gets one only if renders overlap prefills."""
    traces = _traces(rng, 3)
    if mode == "windows":
        traces.append(_trace(rng, 24, 1))  # read in two windows
    cfg = _cfg(mode, threads, token_budget=1)  # one sequence per pack: one prefill per trace or window
    renders = pass1.render_traces(traces, model.tokenizer, pass1.render_config(cfg, model.max_context))
    assert not any(isinstance(r, dict) for r in renders)
    if mode == "windows":
        assert len(renders[-1].windows) > 1
    windows_of = {t.trace_id: {id(s) for s in _seqs(r)} for t, r in zip(traces, renders, strict=True)}
    unread = {id(s) for r in renders for s in _seqs(r)}  # pass-1 sequences not prefilled yet
    rendered = threading.Event()
    seen: dict[str, bool] = {}
    lock = threading.Lock()

    def before(seqs):
        ids = {id(s) for s in seqs}
        with lock:
            last = bool(unread) and unread <= ids
            unread.difference_update(ids)
        if last:
            seen["render_before_last_prefill"] = rendered.wait(LONG_WAIT if threads else SHORT_WAIT)

    original = render.render_pass2

    def render_pass2(trace, *args, **kw):
        with lock:  # a trace is prepared only once every window of it is back
            assert not windows_of[trace.trace_id] & unread, f"{trace.trace_id} rendered before all its windows"
        rendered.set()
        return original(trace, *args, **kw)

    monkeypatch.setattr(render, "render_pass2", render_pass2)
    out = attribute_traces(traces, _Spy(model, before), cfg, rendered=renders)
    assert len(out.attributions) == len(traces) and not out.errors
    assert seen == {"render_before_last_prefill": bool(threads)}
    assert out.n_render_pass2 == len(traces)


@pytest.mark.parametrize("mode", ["windows", "truncate"])
def test_a_render_that_raises_escapes_as_it_does_inline(model, mode, monkeypatch, rng):
    traces = _traces(rng, 5)
    boom = {t.trace_id for t in rng.sample(traces, 2)}
    original = render.render_pass2

    def render_pass2(trace, *args, **kw):
        if trace.trace_id in boom:
            raise RuntimeError(f"render bug in {trace.trace_id}")
        return original(trace, *args, **kw)

    monkeypatch.setattr(render, "render_pass2", render_pass2)
    raised = {}
    for threads in (0, 1):
        with pytest.raises(RuntimeError, match="render bug in") as exc:
            attribute_traces(traces, model, _cfg(mode, threads, token_budget=600))
        raised[threads] = str(exc.value)
    assert raised[1] == raised[0]  # the same trace's exception, not whichever worker failed first
    assert not [t for t in threading.enumerate() if t.name.startswith("pass2-prep")]  # the pool is shut down


def test_the_thread_count_does_not_change_the_hash():
    assert load_config(None, engine__pass2_render_threads=0).config_hash() == PipelineConfig().config_hash()
