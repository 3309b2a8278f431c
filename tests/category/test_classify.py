"""The category layer: zero-training picks the description the log makes likeliest; fitting learns a planted
rule; the verdict's family and kind agree; weights are refused for another taxonomy."""

import numpy as np
import pytest

from masprism_batch.category import classify
from masprism_batch.category.log_signals import NAMES
from masprism_batch.category.taxonomy import TRAIL, load_taxonomy


def test_zero_training_follows_the_model_evidence(np_rng):
    m = classify.CategoryModel.zero(TRAIL)
    pmi = np_rng.normal(size=(7, 20))
    p = m.probs(pmi, np_rng.random((7, len(NAMES))))
    assert np.allclose(p.sum(1), 1) and (p.argmax(1) == pmi.argmin(1)).all()
    unread = m.probs(np.full((1, 20), np.nan), np.zeros((1, len(NAMES))))
    assert np.allclose(unread, 1 / 20)  # no evidence at all: uniform


def test_decide_is_hierarchical():
    p = np.full(20, 0.01)
    p[0] = 0.2  # the single likeliest kind is a reasoning one ...
    p[8:16] = [0.1] * 8  # ... but the execution family holds more mass together
    p /= p.sum()
    cat, fam, conf = classify.decide(p, TRAIL)
    assert fam == "System Execution Errors" and TRAIL.family_of(cat) == fam and conf == pytest.approx(p[8])


def test_fit_learns_a_planted_rule(np_rng):
    n, k = 400, 20
    f = (np_rng.random((n, len(NAMES))) < 0.3).astype(float)
    y = np.where(f[:, 2] > 0, 10, np.where(f[:, 11] > 0, 17, 6))  # 429 -> Rate Limiting, repeat -> Resource Abuse
    z = np_rng.normal(size=(n, k))
    m = classify.fit(z[:300], f[:300], y[:300], k, TRAIL.digest(), l2=1.0)
    acc = (m.logits(z[300:], f[300:]).argmax(1) == y[300:]).mean()
    assert acc > 0.9
    again = classify.fit(z[:300], f[:300], y[:300], k, TRAIL.digest(), l2=1.0)
    assert np.array_equal(m.W, again.W)  # deterministic


def test_weights_round_trip_and_refuse_other_words(tmp_path, np_rng):
    m = classify.CategoryModel(TRAIL.digest(), 0.7, np_rng.normal(size=20), np_rng.normal(size=(20, len(NAMES))), "t")
    back = classify.CategoryModel.from_json(m.to_json(), TRAIL)
    assert back.a == 0.7 and np.array_equal(back.b, m.b) and np.array_equal(back.W, m.W)
    p = tmp_path / "t.toml"
    p.write_text("[[kind]]\nname = 'a'\nfamily = 'f'\ndescription = 'd'\n")
    with pytest.raises(ValueError, match="another taxonomy"):
        classify.CategoryModel.from_json(m.to_json(), load_taxonomy(p))
    # the packaged file is TRAIL's: a team's taxonomy without weights is zero-training, not an error
    assert classify.load_model(load_taxonomy(p), "smollm2-135m").fitted_on == "zero-training"
