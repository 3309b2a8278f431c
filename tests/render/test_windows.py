"""Pass 1 over the whole log (masprism_batch/render/windows.py): every token owned once, windows within the context,
the documented cross-window attention rule, and one-window logs read exactly as one prompt."""

from __future__ import annotations

import random

import numpy as np
import pytest

from masprism_batch.config import RenderConfig, load_config
from masprism_batch.model import load_model
from masprism_batch.model.forward import SeqSignals
from masprism_batch.render import windows
from masprism_batch.stage import combine
from masprism_batch.trace import Step, Trace

WORDS = ["search", "result", "error", "file", "answer", "plan", "code", "value", "agent", "step"]


def _trace(rng: random.Random, n_steps: int, max_words: int = 90) -> Trace:
    steps = [Step(index=i, agent=rng.choice(["Planner", "Coder", "Terminal"]),
                  content=" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words))))
             for i in range(n_steps)]
    return Trace(trace_id=f"t{rng.randrange(10**6)}", source="jsonl", steps=steps, question="find the answer")


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, model__name="tiny-random", render__max_context=384)
    return cfg, load_model(cfg.model, cfg.signals)


@pytest.mark.parametrize("cap", [None, 47])
def test_every_token_owned_once_and_windows_fit(tiny, cap, rng):
    cfg, model = tiny
    t = _trace(rng, rng.randint(20, 41))
    rcfg = cfg.render.model_copy(update={"window_step_cap": cap, "window_context": 64})
    wd = windows.render_windows(t, model.tokenizer, rcfg)
    T = len(wd.full.input_ids)
    assert len(wd.windows) > 1, "test trace must need several windows"
    owned = np.zeros(T, dtype=int)
    n = len(t.steps)
    for w in wd.windows:
        assert len(w.input_ids) <= rcfg.max_context and len(w.input_ids) == len(w.sids)
        owned[w.full_start:w.full_end] += 1
        k = w.full_end - w.full_start
        assert w.input_ids[w.offset:w.offset + k] == wd.full.input_ids[w.full_start:w.full_end]
        sid = np.asarray(w.sids)
        g = np.where(sid >= 0, np.asarray(w.steps + [-1])[sid], -1)  # local ids -> log-wide (owned i, key-only n + j)
        assert (g[:w.offset][g[:w.offset] >= 0] >= n).all(), "only owned tokens are queries"
        assert (g[w.offset:w.offset + k] < n).all() and w.n_steps == len(w.steps) == len(set(sid[sid >= 0]))
    assert (owned == 1).all(), "each token of the full render is owned by exactly one window"
    if cap is not None:  # every step kept up to the cap, never cut shorter
        for i, (s, e) in enumerate(wd.full.content_spans):
            assert e - s >= min(cap, wd.full.step_content_tokens[i])


def test_one_window_log_reads_as_one_prompt(tiny, rng):
    cfg, model = tiny
    t = _trace(rng, 3, max_words=3)  # byte-level tokens: ~250 tokens with the preamble
    wd = windows.render_windows(t, model.tokenizer, cfg.render.model_copy(update={"max_context": 512}))
    assert len(wd.windows) == 1
    sig = model.signals([wd.windows[0].input_ids], [wd.windows[0].sids], [wd.windows[0].n_steps])
    comb = combine.combine_windows(wd, sig, len(t.steps))
    plain = model.signals([wd.full.input_ids], [wd.full.step_ids()])[0]
    np.testing.assert_allclose(comb.token_nll, plain.token_nll, rtol=0, atol=1e-5)
    np.testing.assert_allclose(comb.step_attn, plain.step_attn, rtol=0, atol=1e-5)


def _rule_case(rng, n: int = 5):
    """Three windows with log-wide ids (owned i, key-only n + j), the second holding step 2 both as a key-only
    copy and as owned tokens (cut by its edge); random per-window signals over their local steps."""
    full = windows.Rendered(list(range(30)), [(2 + 5 * i, 7 + 5 * i) for i in range(n)], [False] * n, "")
    gsids = [[-1, -1] + [0] * 5 + [1] * 5 + [2] * 3, [-1, n + 1, n + 2, n + 2] + [2] * 2 + [3] * 5 + [4] * 3,
             [-1, n + 0, n + 3] + [4] * 2 + [-1] * 3]
    spans, offs = [(0, 15), (15, 25), (25, 30)], [0, 4, 3]
    wins = [windows._local(list(range(len(s))), np.asarray(s), a, b, o)
            for s, (a, b), o in zip(gsids, spans, offs, strict=True)]
    sigs = [SeqSignals(rng.random(len(w.sids)).astype(np.float32), rng.random((w.n_steps, w.n_steps)).astype(np.float32),
                       len(w.sids), rng.random((2, 3, w.n_steps, w.n_steps)).astype(np.float32)) for w in wins]
    return windows.Windowed(full, wins, 2), sigs


def _rule(wd, sigs, n: int):
    """The documented rule on log-wide ids: each window's local mass put back at (i or n + j) in 2n x 2n, rows
    scaled by owned query tokens, A[i->j] = sum of the full and key-only columns of j / owned tokens of i."""
    want, want_h, counts = np.zeros((n, n)), np.zeros((2, 3, n, n)), np.zeros(n)
    for w, sg in zip(wd.windows, sigs, strict=True):
        g = np.asarray(w.steps)
        A, Ah = np.zeros((2 * n, 2 * n)), np.zeros((2, 3, 2 * n, 2 * n))
        A[np.ix_(g, g)] = sg.step_attn
        Ah[:, :, g[:, None], g[None, :]] = sg.step_attn_heads
        s = np.asarray(w.sids)
        c = np.zeros(2 * n)
        c[g] = np.bincount(s[s >= 0], minlength=w.n_steps)
        c = c[:n]
        want += c[:, None] * (A[:n, :n] + A[:n, n:])
        want_h += c[None, None, :, None] * (Ah[:, :, :n, :n] + Ah[:, :, :n, n:])
        counts += c
    d = np.maximum(counts, 1)
    return want / d[:, None], want_h / d[None, None, :, None]


def test_windows_name_only_their_own_steps():
    """Local step ids: a window asks the model for its m x m steps, never the log's 2N x 2N."""
    wd, _ = _rule_case(np.random.default_rng(0))
    assert [w.steps for w in wd.windows] == [[0, 1, 2], [2, 3, 4, 6, 7], [4, 5, 8]]
    for w in wd.windows:
        assert w.n_steps == len(w.steps) and max(w.sids) == w.n_steps - 1


@pytest.mark.parametrize("dense", [True, False])
def test_combine_follows_the_documented_rule(monkeypatch, dense, np_rng):
    """A[i->j] = sum over windows of owned-query mass of i on j (full or key-only copy) / owned tokens of i;
    the same A whether kept dense or row-sparse (a log past schema.DENSE_STEPS)."""
    rng = np_rng
    n = 5
    wd, sigs = _rule_case(rng, n)
    want, want_h = _rule(wd, sigs, n)
    if not dense:
        monkeypatch.setattr(combine, "DENSE_STEPS", 0)
    got = combine.combine_windows(wd, sigs, n)
    A = got.step_attn if dense else got.step_attn.toarray()
    assert isinstance(got.step_attn, np.ndarray) == dense
    np.testing.assert_allclose(A, want, rtol=1e-5)
    assert got.step_attn_heads.shape == (2, 3, n, n)
    np.testing.assert_allclose(got.step_attn_heads, want_h, rtol=1e-5)
    assert got.step_attn_learned is None
    for w, s in zip(wd.windows, sigs, strict=True):  # NLL of owned tokens comes from their window
        k = w.full_end - w.full_start
        np.testing.assert_array_equal(got.token_nll[w.full_start:w.full_end], s.token_nll[w.offset:w.offset + k])


def test_learned_heads_applied_per_window_equal_applied_to_the_whole(monkeypatch, np_rng):
    """Head weights are linear: applied window by window (what long logs get) they give the learned A of the
    whole per-head A; past HEADS_BUDGET the per-head A is not kept, the learned A still is."""
    from masprism_batch.method.heads import HeadWeights

    rng = np_rng
    n = 5
    wd, sigs = _rule_case(rng, n)
    hw = HeadWeights("m", rng.normal(size=(2, 3)))
    got = combine.combine_windows(wd, sigs, n, head_weights=hw)
    np.testing.assert_allclose(got.step_attn_learned, hw.apply(got.step_attn_heads), rtol=1e-4, atol=1e-6)
    monkeypatch.setattr(combine, "HEADS_BUDGET", 2 * 3 * n * n - 1)
    small = combine.combine_windows(wd, sigs, n, head_weights=hw)
    assert small.step_attn_heads is None
    np.testing.assert_allclose(small.step_attn_learned, got.step_attn_learned, rtol=1e-6)


def _digest_by_dropping(p, older: list[int], n: int, room: int, per_step: int):
    """The digest as first written (drop the oldest step until the rest fit): the reference of the bisection."""
    from masprism_batch.render.prompt import fit_budget

    while older:
        fixed = sum(len(p.headers[j]) + len(p.sep) for j in older)
        b = fit_budget(p.lengths[older], len(p.marker), room - fixed, per_step)
        if b is not None:
            break
        older = older[1:]
    ids, sids = [], []
    for j in older:
        c = p.contents[j]
        piece = p.headers[j] + (c[:b] + p.marker if len(c) > b else c) + p.sep
        ids += piece
        sids += [n + j] * len(piece)
    return ids, sids


@pytest.mark.parametrize("seed", range(4))
def test_digest_bisection_keeps_what_dropping_one_by_one_kept(tiny, seed):
    from masprism_batch.render.prompt import _Pieces

    cfg, model = tiny
    rng = random.Random(seed)
    t = _trace(rng, rng.randint(5, 60), max_words=rng.choice([2, 10, 60]))
    p = _Pieces(t, model.tokenizer, cfg.render, cfg.render.pass1_preamble)
    n = len(t.steps)
    fixed_cum = np.concatenate([[0], np.cumsum([len(h) + len(p.sep) for h in p.headers])])
    for _ in range(20):
        k, room, per = rng.randint(0, n), rng.randint(0, 900), rng.choice([1, 4, 16, 64])
        assert windows._digest(p, k, n, room, per, fixed_cum) == _digest_by_dropping(p, list(range(k)), n, room, per)


def test_windowed_stage_scores_long_logs_linearly(tiny, rng):
    """The stage reads a log 4x longer than the context in windows: tokens read grow ~linearly."""
    from masprism_batch.stage.attribute import attribute_traces

    cfg, model = tiny
    cfg = cfg.model_copy(update={"method": cfg.method.model_copy(update={"counterfactual_k": 1})})
    short, long = _trace(rng, 12), _trace(rng, 48)
    out = attribute_traces([short, long], model, cfg)
    assert not out.errors
    by = {a["trace_id"]: a for a in out.attributions}
    assert by[long.trace_id]["tokens_pass1"] > cfg.render.max_context
    ratio = by[long.trace_id]["tokens_pass1"] / by[short.trace_id]["tokens_pass1"]
    assert 2.0 < ratio < 8.0, ratio  # 4x the steps: between 2x and 8x the tokens read, not quadratic
    rows = [r for r in out.step_scores if r["trace_id"] == long.trace_id]
    assert all(np.isfinite(r["nll_pass1"]) for r in rows), "every step has an NLL from its full content"


def test_render_config_rejects_nothing_new():
    assert RenderConfig().pass1 == "windows" and RenderConfig(pass1="truncate").pass1 == "truncate"
