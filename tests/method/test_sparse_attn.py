"""Memory linear in a log's steps (issue 37, item 5): above `schema.DENSE_STEPS` steps `stage/combine.combine_windows`
keeps A row-sparse, the method reads it with the results of the dense path, `attention_pass1` writes each row's
tail, every reader restores the whole row, and the peak memory of one trace's path grows ~linearly."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from masprism_batch.analytics.report_data import _quantise_attention
from masprism_batch.config import MethodConfig
from masprism_batch.config_checks import check_max_steps, machine_memory
from masprism_batch.method import confidence, ranker, sparse_attn
from masprism_batch.method import masprism as mp
from masprism_batch.method.heads import HeadWeights
from masprism_batch.model.forward import SeqSignals
from masprism_batch.render import windows
from masprism_batch.render.prompt import Rendered
from masprism_batch.stage import combine
from masprism_batch.stage import rows as rows_mod
from masprism_batch.trace import Step, Trace


def synthetic(rng: np.random.Generator, n: int, per_window: int = 24, keys: int = 20, heads: bool = False):
    """A log of n steps read in windows without a model: step i has 2-4 tokens; each window owns a run of
    tokens (it may cut a step, which is then owned by two windows and also a key-only copy in the second) and
    holds key-only copies of the `keys` steps before it; random local signals (some exact zeros)."""
    lens = rng.integers(2, 5, size=n)
    starts = np.concatenate([[0], np.cumsum(lens)])
    T = int(starts[-1])
    step_of = np.repeat(np.arange(n), lens)
    full = Rendered(list(range(T)), [(int(starts[i]), int(starts[i + 1])) for i in range(n)], [False] * n, "")
    wins, sigs, pos = [], [], 0
    while pos < T:
        end = min(T, pos + int(rng.integers(per_window, 3 * per_window)))
        first = int(step_of[pos])
        key = list(range(max(0, first - keys), first + (starts[first] < pos)))  # + the cut step's earlier part
        gs = np.concatenate([[-1], n + np.asarray(key, dtype=np.int64), step_of[pos:end]])
        w = windows._local(list(range(len(gs))), gs, pos, end, 1 + len(key))
        m = w.n_steps
        A = rng.random((m, m)).astype(np.float32) * (rng.random((m, m)) > 0.1)
        Ah = rng.random((2, 3, m, m)).astype(np.float32) if heads else None
        wins.append(w)
        sigs.append(SeqSignals(rng.random(len(gs)).astype(np.float32), A, len(gs), Ah))
        pos = end
    return windows.Windowed(full, wins, 1), sigs, full


def _trace(rng, n: int) -> Trace:
    return Trace(trace_id="t", source="jsonl", question="q",
                 steps=[Step(index=i, agent=str(rng.choice(["Planner", "Coder"])), content="x") for i in range(n)])


def _method(wd, sigs, full, n, rng, cfg=MethodConfig()):
    s1 = combine.combine_windows(wd, sigs, n)
    flags = rng.random(n) < 0.05
    p1 = mp.pass1(s1.token_nll, full.step_spans, s1.step_attn, flags, 0.2, cfg)
    ranking = mp.pass2(rng.random(len(full.input_ids)).astype(np.float32), full.step_spans, s1.step_attn, flags,
                       0.2, p1.candidates, cfg)
    return s1, p1, ranking, flags


def test_sparse_combine_and_method_equal_the_dense_path(monkeypatch, np_rng):
    rng = np_rng
    n = 300
    wd, sigs, full = synthetic(rng, n, heads=True)
    hw = HeadWeights("m", rng.normal(size=(2, 3)))
    seed = int(rng.integers(1 << 30))
    dense = combine.combine_windows(wd, sigs, n, head_weights=hw)
    d_p1, d_rank = _method(wd, sigs, full, n, np.random.default_rng(seed))[1:3]
    monkeypatch.setattr(combine, "DENSE_STEPS", 16)
    sparse = combine.combine_windows(wd, sigs, n, head_weights=hw)
    assert isinstance(sparse.step_attn, sparse_attn.SparseAttn)
    assert sparse.step_attn.nnz < n * n / 4, "a query's mass lies inside its windows"
    np.testing.assert_array_equal(sparse.step_attn.toarray(), dense.step_attn)  # exact, not close
    np.testing.assert_array_equal(sparse.step_attn_learned.toarray(), dense.step_attn_learned)
    np.testing.assert_array_equal(sparse.token_nll, dense.token_nll)
    s_sig, s_p1, s_rank, flags = _method(wd, sigs, full, n, np.random.default_rng(seed))
    assert s_p1.symptoms == d_p1.symptoms and s_p1.candidates == d_p1.candidates
    np.testing.assert_array_equal(s_p1.h_score, d_p1.h_score)
    assert s_rank.ranked == d_rank.ranked and s_rank.scores == d_rank.scores and s_rank.support == d_rank.support
    np.testing.assert_array_equal(mp.inflow(sparse.step_attn_learned, s_p1.symptoms),
                                  mp.inflow(dense.step_attn_learned, s_p1.symptoms))

    # the rows written, and everything that reads them back
    t = _trace(rng, n)
    r_dense = rows_mod.step_rows(t, s_p1, s_rank, flags, full, dense)
    r_sparse = rows_mod.step_rows(t, s_p1, s_rank, flags, full, sparse)
    widths = [len(r["attention_pass1"]) for r in r_sparse]
    assert max(widths[n // 2:]) < n // 4, "tails are bounded by the window, not by the step"
    for a, b in zip(r_dense, r_sparse, strict=True):
        i = a["step"]
        np.testing.assert_array_equal(sparse_attn.full_row(b["attention_pass1"], i),
                                      np.asarray(a["attention_pass1"], dtype=np.float64))
        assert {k: v for k, v in a.items() if k != "attention_pass1"} == \
            {k: v for k, v in b.items() if k != "attention_pass1"}
    order = s_rank.ranked
    assert confidence.evidence(n, r_sparse, order) == confidence.evidence(n, r_dense, order)
    np.testing.assert_array_equal(ranker.step_features(t, r_sparse), ranker.step_features(t, r_dense))
    assert _quantise_attention([r["attention_pass1"] for r in r_sparse], n) == \
        _quantise_attention([r["attention_pass1"] for r in r_dense], n)


def test_row_tail_and_full_row_round_trip(np_rng):
    rng = np_rng
    n = 40
    A = rng.random((n, n)).astype(np.float32)
    for i in range(n):  # rows with a zero head, no mass at all, and full rows
        A[i, : int(rng.integers(0, i + 1))] = 0
    A[7] = 0
    S = sparse_attn.SparseAttn.from_dense(A)
    np.testing.assert_array_equal(S.toarray(), A)
    for i in range(n):
        tail = sparse_attn.row_tail(S, i)
        assert 1 <= tail.size <= i + 1
        np.testing.assert_array_equal(sparse_attn.full_row(tail.tolist(), i), A[i, : i + 1])
        np.testing.assert_array_equal(sparse_attn.row_tail(A, i), A[i, : i + 1])  # dense: the whole row
    assert sparse_attn.full_row(None, 5).size == 0 and sparse_attn.full_row([], 5).size == 0


def _pass2_before(token_nll, spans, A, flags, ratio, candidates, cfg):
    """mp.pass2 as it was before the symptom-by-symptom loop (candidate by candidate, a Python sort per symptom)."""
    nll = mp.step_nll(token_nll, spans)
    symptoms = mp.select_symptoms(nll, flags, ratio)
    n = A.shape[0]
    top_targets = {}
    for m in symptoms:
        prev = sorted(range(m), key=lambda j: (-A[m, j], j))
        top_targets[m] = set(prev[: cfg.top_attention_targets])
    scores, support = {}, {}
    for k in candidates:
        fuse, sup, votes = 0.0, [], 0
        for m in symptoms:
            if m <= k or m >= n:
                continue
            mean_prev = float(A[m, :m].mean())
            if mean_prev <= 0 or not np.isfinite(nll[m]) or not np.isfinite(nll[k]):
                continue
            s = (A[m, k] / mean_prev) * (1.0 + max(0.0, nll[m] - nll[k]))
            fuse += s
            if s > 0:
                sup.append(m)
            votes += k in top_targets[m]
        scores[k] = fuse * (1.0 + cfg.vote_weight * votes)
        support[k] = sup
    return sorted(candidates, key=lambda i: (-scores[i], i)), scores, support, symptoms


@pytest.mark.parametrize("trial", range(5))
def test_pass2_equals_the_loop_it_replaced(trial, np_rng):
    """Dense logs (every labelled one) keep their verdicts: the reorganised pass 2 gives the old loop's ranking,
    scores (bit for bit), support and symptoms, ties in A included."""
    rng = np_rng
    n = int(rng.integers(2, 60))
    A = np.tril(np.round(rng.random((n, n)), 1)).astype(np.float32)  # rounded: many ties among targets
    A[rng.random((n, n)) < 0.1] = 0
    lens = rng.integers(1, 4, size=n)
    starts = np.concatenate([[0], np.cumsum(lens)])
    spans = [(int(starts[i]), int(starts[i + 1])) for i in range(n)]
    tok = rng.random(int(starts[-1])).astype(np.float32)
    tok[rng.random(tok.size) < 0.05] = np.nan
    flags = rng.random(n) < 0.2
    cands = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).tolist())
    cfg = MethodConfig()
    got = mp.pass2(tok, spans, A, flags, 0.3, cands, cfg)
    ranked, scores, support, symptoms = _pass2_before(tok, spans, A, flags, 0.3, cands, cfg)
    assert got.ranked == ranked and got.scores == scores and got.support == support and got.symptoms == symptoms
    assert [type(got.scores[k]) for k in cands] == [type(scores[k]) for k in cands]


def _peak(n: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    wd, sigs, full = synthetic(rng, n)
    t = _trace(rng, n)
    tracemalloc.start()
    tracemalloc.reset_peak()
    s1, p1, ranking, flags = _method(wd, sigs, full, n, rng)
    rows = rows_mod.step_rows(t, p1, ranking, flags, full, s1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert isinstance(s1.step_attn, sparse_attn.SparseAttn) and len(rows) == n
    return peak


def test_peak_memory_of_one_trace_grows_linearly_in_steps(np_rng):
    """combine + method + step rows at 2,100 and 8,400 steps (4x, both past DENSE_STEPS): a quadratic path would
    peak 16x higher, a dense A alone at 8,400 steps is 564 MB of float64."""
    seed = int(np_rng.integers(1 << 30))
    t0 = time.perf_counter()
    small, big = _peak(2100, seed), _peak(8400, seed)
    ratio = big / small
    assert ratio < 6, f"peak {small / 1e6:.1f} MB -> {big / 1e6:.1f} MB: x{ratio:.1f} for 4x the steps"
    assert big < 8400 * 40_000, f"{big / 1e6:.0f} MB at 8,400 steps: more than 40 kB a step"
    assert time.perf_counter() - t0 < 60


def test_check_max_steps_bound_is_linear(monkeypatch, np_rng):
    """Refused when one trace would not fit the machine, as before, but the need is now linear past the dense
    budget: 20,000 steps (14.4 GB as N^2 x 36 B, refused on a 8 GB machine before) fit in 8 GB."""
    from masprism_batch import config_checks

    monkeypatch.setattr(config_checks, "machine_memory", lambda: 8 * 10**9)
    assert check_max_steps(20_000) == 20_000
    n = int(np_rng.integers(4096, 100_000))
    assert config_checks.trace_memory(4 * n) - config_checks.trace_memory(n) == 3 * n * config_checks.BYTES_PER_STEP
    with pytest.raises(ValueError, match=r"ingest.max_steps = 200000: .* at most \d+ steps fit"):
        check_max_steps(200_000)
    assert machine_memory() > 0
