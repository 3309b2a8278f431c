"""Label-free failure groups: planted groups are found, named by their own words, the same on a rerun, and a
verdict stream is read in batches (the data is never held whole)."""

import numpy as np

from masprism_batch.category import groups as grp

TOPICS = [["timeout", "connection", "retry", "socket"], ["format", "parse", "regex", "snippet"],
          ["search", "wikipedia", "page", "query"]]


def _items(rng, n, dim=24):
    centres = 3 * np.eye(3, dim)  # orthogonal: the planted groups are unambiguous whatever the seed
    out, truth = [], []
    for i in range(n):
        g = int(rng.integers(3))
        vec = centres[g] + 0.3 * rng.normal(size=dim)
        terms = list(rng.choice(TOPICS[g], 3, replace=False)) + [f"noise{int(rng.integers(50))}"]
        out.append(grp.Item(f"t{i}", vec.astype(np.float32), terms))
        truth.append(g)
    return out, truth


def _batches(items, size=37):
    def it():
        return grp.batched(items, size)
    return it


def test_planted_groups_are_found_and_named(np_rng):
    items, truth = _items(np_rng, 301)
    g = grp.fit_groups(_batches(items), 24, k=3, seed=7)
    got = [g.assign[it.key] for it in items]
    # each planted group maps to one found group (purity 1 on well-separated groups)
    pairs = {(t, a) for t, a in zip(truth, got, strict=True)}
    assert len(pairs) == 3 and len({a for _, a in pairs}) == 3
    for t, a in pairs:
        assert set(g.names[a].split(", ")) <= set(TOPICS[t]), g.names[a]
        assert all(truth[int(k[1:])] == t for k in g.exemplars[a]) and len(g.exemplars[a]) == 3
    assert sorted(g.sizes) == sorted(np.bincount(truth).tolist())


def test_same_input_same_seed_same_groups(np_rng):
    items, _ = _items(np_rng, 123)
    a = grp.fit_groups(_batches(items), 24, seed=3)
    b = grp.fit_groups(_batches(items, size=37), 24, seed=3)
    assert a.assign == b.assign and a.names == b.names and np.array_equal(a.centres, b.centres)


def test_verdicts_without_a_vector_still_group_by_words(np_rng):
    items, truth = _items(np_rng, 90)
    for it, t in zip(items, truth, strict=True):  # every topic word, one noise word: topics unambiguous
        it.vector, it.terms = None, TOPICS[t] + it.terms[-1:]
    g = grp.fit_groups(_batches(items), 24, k=3, seed=1)
    got = [g.assign[it.key] for it in items]
    assert len({(t, a) for t, a in zip(truth, got, strict=True)}) == 3


def test_terms_and_group_count():
    assert grp.terms_of("Error error ERROR: the regex pattern was not found; regex!") == ["error", "regex", "found",
                                                                                        "pattern"]
    assert grp.n_groups(1) == 1 and grp.n_groups(8) == 2 and grp.n_groups(10**6) == 12 and grp.n_groups(50, 4) == 4
    assert grp.fit_groups(lambda: iter([]), 8).names == []
