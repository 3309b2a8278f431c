"""Counterfactuals by prefill: the cached-prefix re-read equals a full prefill of the edited prompt."""

from __future__ import annotations

import numpy as np
import pytest

from masprism_batch.config import load_config
from masprism_batch.method import counterfactual as cf
from masprism_batch.model import load_model
from masprism_batch.render import prompt as render
from masprism_batch.trace import Step, Trace

WORDS = ["search", "result", "error", "file", "answer", "plan", "code", "value"]


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, model__name="tiny-random", render__max_context=600)
    return cfg, load_model(cfg.model, cfg.signals)


def _trace(rng):
    n = rng.randint(5, 9)
    return Trace(trace_id="cf", source="jsonl", steps=[
        Step(index=i, agent=rng.choice(["A", "B"]), content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))))
        for i in range(n)])


def test_suffix_nll_equals_full_prefill(tiny, np_rng):
    cfg, model = tiny
    rng = np_rng
    ids = rng.integers(3, 250, 123).tolist()
    base = model.signals([ids], [[0] * len(ids)], keep_kv=True)[0]
    cut = int(rng.integers(1, 100))
    new = ids[:cut] + rng.integers(3, 250, 17).tolist() + ids[cut + 9:]
    full = model.signals([new], [[0] * len(new)])[0].token_nll
    got = model.suffix_nll(base.kv, cut, new[cut:])
    assert np.isnan(got[0])
    # fp32, same weights and math, different kernels (SDPA with a mask vs the signal op): ~1e-6 apart
    np.testing.assert_allclose(got[1:], full[cut + 1:], rtol=0, atol=2e-4)


def test_effects_match_brute_force(tiny, rng):
    cfg, model = tiny
    t = _trace(rng)
    n = len(t.steps)
    r = render.render_pass2(t, model.tokenizer, cfg.render, set(range(n)), None)
    base = model.signals([r.input_ids], [r.step_ids()], keep_kv=True)[0]
    (ph,) = __import__("masprism_batch.render.encoding", fromlist=["x"]).encoder_for(model.tokenizer).encode([cf.PLACEHOLDER])
    cands, last = [0, n // 2], n - 1
    D = cf.effects(model, r, base, cands, last, ph)
    for c in cands:
        cs, ce = r.content_spans[c]
        ids = r.input_ids[:cs] + ph + r.input_ids[ce:]
        nll = model.signals([ids], [[0] * len(ids)])[0].token_nll
        shift = len(ph) - (ce - cs)
        for k in range(n):
            if not c < k <= last:
                assert np.isnan(D[k, c])
                continue
            ks, ke = r.content_spans[k]
            want = np.nanmean(nll[ks + shift:ke + shift]) - np.nanmean(base.token_nll[ks:ke])
            assert abs(D[k, c] - want) < 2e-4, (k, c, D[k, c], want)
    assert np.isnan(D[:, [j for j in range(n) if j not in cands]]).all()
    eff = cf.symptom_effect(D, [last])
    assert np.isfinite(eff[cands]).all() and np.isnan(eff[last])


def test_effects_need_the_cache(tiny, rng):
    cfg, model = tiny
    t = _trace(rng)
    r = render.render_pass2(t, model.tokenizer, cfg.render, {0}, None)
    base = model.signals([r.input_ids], [r.step_ids()])[0]
    with pytest.raises(ValueError, match="K/V cache"):
        cf.effects(model, r, base, [0], 1, [5])


def _requests(cfg, model, rng, n_traces=3):
    reqs, ph = [], None
    from masprism_batch.render.encoding import encoder_for

    (ph,) = encoder_for(model.tokenizer).encode([cf.PLACEHOLDER])
    for _ in range(n_traces):
        t = _trace(rng)
        n = len(t.steps)
        r = render.render_pass2(t, model.tokenizer, cfg.render, set(range(n)), None)
        base = model.signals([r.input_ids], [r.step_ids()], keep_kv=True)[0]
        cands = sorted(rng.sample(range(n - 1), 2))
        reqs.append(cf.Request(r, base, cands, n - 1))
    return reqs, ph


@pytest.mark.parametrize("budget", [1, 10_000])  # one suffix per batch, and every trace's suffixes in one
def test_batched_effects_equal_sequential(tiny, budget, rng):
    """The packed path (every candidate of several traces in one forward) gives the sequential D: fp32,
    same weights, different attention calls and GEMM shapes -> within 2e-4 nats."""
    cfg, model = tiny
    reqs, ph = _requests(cfg, model, rng)
    stats: dict = {}
    got = cf.effects_batch(model, reqs, ph, budget, stats)
    assert stats["suffixes"] == sum(len(q.candidates) for q in reqs) and stats["tokens"] > 0
    for q, D in zip(reqs, got, strict=True):
        want = cf.effects(model, q.rendered, q.base, q.candidates, q.last, ph)
        assert np.array_equal(np.isnan(D), np.isnan(want))
        assert np.isfinite(want).any()
        np.testing.assert_allclose(D[np.isfinite(D)], want[np.isfinite(want)], rtol=0, atol=2e-4)


def test_batched_effects_score_only_the_rows_asked(tiny, rng):
    cfg, model = tiny
    reqs, ph = _requests(cfg, model, rng, 2)
    for q in reqs:
        q.rows = [q.last]  # the symptom rows the verdict reads
    full = [cf.effects(model, q.rendered, q.base, q.candidates, q.last, ph) for q in reqs]
    got = cf.effects_batch(model, reqs, ph, 10_000)
    for q, D, F in zip(reqs, got, full, strict=True):
        assert np.isnan(np.delete(D, q.last, axis=0)).all()
        np.testing.assert_allclose(D[q.last], F[q.last], rtol=0, atol=2e-4, equal_nan=True)
        np.testing.assert_allclose(cf.symptom_effect(D, [q.last]), cf.symptom_effect(F, [q.last]), atol=2e-4,
                                   equal_nan=True)


def test_batched_effects_without_cache_fail_that_trace_only(tiny, rng):
    cfg, model = tiny
    reqs, ph = _requests(cfg, model, rng, 2)
    reqs[0].base = model.signals([reqs[0].rendered.input_ids], [reqs[0].rendered.step_ids()])[0]
    got = cf.effects_batch(model, reqs, ph, 10_000)
    assert isinstance(got[0], ValueError) and isinstance(got[1], np.ndarray) and np.isfinite(got[1]).any()
