"""Head weights fitted without labels (method/heads.py): recovery of planted weights, shapes, persistence."""

from __future__ import annotations

import numpy as np
import pytest

from masprism_batch.method import heads as hd


def _synthetic(rng, w_true, n_traces=40):
    L, H = w_true.shape
    samples = []
    for _ in range(n_traces):
        n = int(rng.integers(6, 15))
        Ah = rng.random((L, H, n, n)) ** 3  # skewed like attention mass
        D = np.full((n, n), np.nan)
        for c in rng.choice(n - 1, size=2, replace=False):
            for k in range(c + 1, n):
                D[k, c] = float(np.tensordot(w_true, Ah[:, :, k, c], axes=2)) + 0.01 * rng.standard_normal()
        samples.append(hd.pairs(Ah, D))
    return samples


def test_fit_recovers_planted_head_weights(np_rng):
    rng = np_rng
    w_true = np.zeros((3, 5))
    w_true[2, 1], w_true[1, 4], w_true[0, 0] = 1.0, 0.5, -0.3
    hw = hd.fit_weights(_synthetic(rng, w_true), w_true.shape, "m")
    assert hw.weights.shape == (3, 5)
    corr = np.corrcoef(hw.weights.ravel(), w_true.ravel())[0, 1]
    assert corr > 0.95, (corr, hw.weights)
    assert abs(np.abs(hw.weights).sum() - 1.0) < 1e-9


def test_apply_roundtrip_and_shape_check(tmp_path, np_rng):
    rng = np_rng
    hw = hd.HeadWeights("m", rng.standard_normal((2, 3)), 10, 2)
    Ah = rng.random((2, 3, 7, 7))
    np.testing.assert_allclose(hw.apply(Ah), np.einsum("lh,lhij->ij", hw.weights, Ah))
    p = tmp_path / "h.json"
    p.write_text(hw.to_json())
    back = hd.HeadWeights.load(p)
    np.testing.assert_allclose(back.apply(Ah), hw.apply(Ah), atol=1e-5)
    with pytest.raises(ValueError, match="do not match"):
        hw.apply(rng.random((3, 3, 7, 7)))


def test_too_few_pairs_is_a_clear_error():
    with pytest.raises(ValueError, match="too few"):
        hd.fit_weights([(np.zeros((3, 15)), np.zeros(3))], (3, 5), "m")


def test_pairs_standardise_within_trace(np_rng):
    rng = np_rng
    Ah = rng.random((2, 2, 5, 5))
    D = np.full((5, 5), np.nan)
    D[3, 1], D[4, 1], D[4, 2] = 1.0, 3.0, 5.0
    X, y = hd.pairs(Ah, D)
    assert X.shape == (3, 4) and abs(y.mean()) < 1e-12 and abs(y.std() - 1) < 1e-12
    np.testing.assert_allclose(X[0], Ah[:, :, 3, 1].ravel())
