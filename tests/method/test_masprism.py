"""MASPrism formulas checked by hand on small random-free cases, plus properties on random ones."""

import numpy as np
import pytest

from masprism_batch.config import MethodConfig
from masprism_batch.method import masprism as mp


def test_step_nll_skips_the_unpredicted_first_token():
    tok = np.array([np.nan, 1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32)
    assert mp.step_nll(tok, [(0, 2), (2, 4), (4, 6)]).tolist() == [1.0, 2.5, 4.5]


def test_symptoms_put_failure_words_first_then_nll():
    nll = np.array([1.0, 5.0, 2.0, 4.0])
    flags = np.array([False, False, True, False])
    assert mp.select_symptoms(nll, flags, 0.5) == [1, 2]
    assert mp.select_symptoms(nll, np.zeros(4, bool), 0.5) == [1, 3]
    assert mp.select_symptoms(nll, np.zeros(4, bool), 0.01) == [1]  # at least one


def test_failure_words_match_whole_words_case_insensitively():
    rx = mp.failure_word_regex(("error", "not found"))
    assert rx.search("Traceback: Error: x")
    assert rx.search("file Not Found")
    assert not rx.search("terrorism")


def test_inflow_and_candidates_by_hand():
    A = np.array([[1.0, 0, 0, 0], [0.6, 0.4, 0, 0], [0.2, 0.5, 0.3, 0], [0.1, 0.2, 0.3, 0.4]])
    H = mp.inflow(A, [2, 3])
    assert np.allclose(H, [0.2 + 0.1, 0.5 + 0.2, 0.3, 0.0])
    assert mp.select_candidates(H, [2, 3], 2) == [1, 0]
    assert mp.select_candidates(H, [2, 3], 5) == [1, 0, 2]  # only steps before the last symptom


def test_pass2_score_by_hand():
    cfg = MethodConfig(top_attention_targets=1, vote_weight=0.3)
    A = np.array([[1.0, 0, 0, 0], [0.6, 0.4, 0, 0], [0.2, 0.5, 0.3, 0], [0.1, 0.2, 0.3, 0.4]])
    tok = np.array([np.nan, 1.0, 1.0, 2.0, 2.0, 6.0, 6.0, 3.0], dtype=np.float32)
    spans = [(0, 2), (2, 4), (4, 6), (6, 8)]  # N' = [1, 1.5, 4, 4.5]
    flags = np.array([False, False, False, True])  # M' = {3} at ratio 0.25
    r = mp.pass2(tok, spans, A, flags, 0.25, [0, 1, 2], cfg)
    assert r.symptoms == [3]
    mean_prev = (0.1 + 0.2 + 0.3) / 3
    s0 = 0.1 / mean_prev * (1 + 4.5 - 1.0)
    s1 = 0.2 / mean_prev * (1 + 4.5 - 1.5)
    s2 = 0.3 / mean_prev * (1 + 4.5 - 4.0) * 1.3  # step 2 is symptom 3's top-1 attention target: one vote
    assert r.scores[0] == pytest.approx(s0) and r.scores[1] == pytest.approx(s1) and r.scores[2] == pytest.approx(s2)
    assert r.ranked == sorted([0, 1, 2], key=lambda k: -r.scores[k])


def test_random_cases_are_deterministic_and_well_formed(np_rng):
    rng = np_rng
    cfg = MethodConfig()
    for _ in range(20):
        n = int(rng.integers(1, 40))
        A = np.tril(rng.random((n, n)))
        A /= A.sum(1, keepdims=True)
        lens = rng.integers(1, 9, n)
        bounds = np.concatenate([[0], np.cumsum(lens)])
        tok = rng.random(bounds[-1]).astype(np.float32) * 5
        spans = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
        flags = rng.random(n) < 0.2
        p1 = mp.pass1(tok, spans, A, flags, 0.2, cfg)
        assert 1 <= len(p1.symptoms) <= n and len(p1.candidates) <= cfg.top_k_candidates
        assert all(c < max(p1.symptoms) for c in p1.candidates)
        r = mp.pass2(tok, spans, A, flags, 0.2, p1.candidates, cfg)
        r_again = mp.pass2(tok, spans, A, flags, 0.2, p1.candidates, cfg)
        assert r.ranked == r_again.ranked and sorted(r.ranked) == sorted(p1.candidates)
