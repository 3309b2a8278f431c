"""The model's category evidence: one tree read per step (tree_read.py) equals separate suffix re-reads
(model.suffix_nll, the reference), minus the no-log baseline; packing reads together changes nothing; the
pooled step vector is unit length."""

import numpy as np
import pytest

from masprism_batch.category import evidence
from masprism_batch.category.taxonomy import TRAIL
from masprism_batch.config import load_config
from masprism_batch.model import load_model


@pytest.fixture(scope="module")
def tiny():
    cfg = load_config(None, model__name="tiny-random", render__max_context=600)
    return load_model(cfg.model, cfg.signals)


def test_tree_reads_equal_separate_suffix_reads(tiny, np_rng):
    seqs = [np_rng.integers(3, 250, n).tolist() for n in (47, 123)]
    sigs = tiny.signals(seqs, [[0] * len(s) for s in seqs], keep_kv=True)
    reads = [evidence.Read(sigs[0].kv, 31), evidence.Read(sigs[1].kv, 123), evidence.Read(sigs[1].kv, 5)]
    stem, branches = evidence.suffixes(tiny.tokenizer, TRAIL)
    per = len(stem) + sum(map(len, branches))
    got = evidence.description_pmi(tiny, TRAIL, reads, token_budget=per + 1)  # one read per batch
    packed = evidence.description_pmi(tiny, TRAIL, reads, token_budget=10 * per)  # all three in one forward
    assert np.allclose(got, packed, atol=1e-4)  # fp32, other GEMM shapes
    assert got.shape == (3, 20) and np.isfinite(got).all()
    for r, rd in enumerate(reads):
        for c in (0, 7, 19):
            # reference: LEAD + this description alone as one suffix, starting one token early (the prefix's
            # last token) so the description's first token is scored too
            L = len(stem)
            sfx = [seqs[0 if r == 0 else 1][rd.prefix_len - 1]] + stem + branches[c]
            ref = tiny.suffix_nll(rd.cache, rd.prefix_len - 1, sfx)[1 + L:].mean()
            base = tiny.suffix_nll(rd.cache, 0, stem + branches[c])[L:].mean()
            # fp32, the same weights through a tree-masked SDPA and the one-suffix path: ~1e-6 apart
            assert got[r, c] == pytest.approx(ref - base, abs=2e-4)


def test_a_read_past_the_context_is_nan(tiny, np_rng):
    ids = np_rng.integers(3, 250, 59).tolist()
    s = tiny.signals([ids], [[0] * len(ids)], keep_kv=True)[0]
    # a step ending 2 tokens before the model's context: no description fits after it (the read is skipped
    # before the cache is touched, so a short cache stands in for a long prompt)
    late = evidence.Read(s.kv, tiny.max_context - 2)
    got = evidence.description_pmi(tiny, TRAIL, [late, evidence.Read(s.kv, 40)], 4096)
    assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()


def test_pooled_values(tiny, np_rng):
    ids = np_rng.integers(3, 250, 61).tolist()
    s = tiny.signals([ids], [[0] * len(ids)], keep_kv=True)[0]
    v = evidence.pooled_values(s.kv, 10, 23)
    assert v.dtype == np.float32 and v.ndim == 1 and np.linalg.norm(v) == pytest.approx(1, abs=1e-5)
    assert evidence.pooled_values(s.kv, 23, 23) is None and evidence.pooled_values(None, 0, 3) is None
