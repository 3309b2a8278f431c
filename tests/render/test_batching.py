"""buckets.pack: every index exactly once, budgets respected, over-budget items alone,
first-fit-decreasing placement, determinism."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from masprism_batch.render.buckets import pack


@settings(max_examples=200, deadline=None)
@given(lengths=st.lists(st.integers(0, 3000), max_size=60), budget=st.integers(1, 4000))
def test_pack_properties(lengths, budget):
    groups = pack(lengths, budget)
    flat = [i for g in groups for i in g]
    assert sorted(flat) == list(range(len(lengths)))  # each index once
    for g in groups:
        assert g
        total = sum(lengths[i] for i in g)
        if any(lengths[i] > budget for i in g):
            assert len(g) == 1  # an over-budget item goes alone
        else:
            assert total <= budget
        assert [lengths[i] for i in g] == sorted((lengths[i] for i in g), reverse=True)
    # first fit: an item was not placed in a later group if an earlier group (at its time) had room
    placed = {i: gi for gi, g in enumerate(groups) for i in g}
    state = [None] * len(groups)
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        gi = placed[i]
        for gj in range(gi):
            if state[gj] is not None and state[gj] >= lengths[i]:
                raise AssertionError(f"item {i} fit in earlier group {gj}")
        if state[gi] is None:
            state[gi] = budget - lengths[i] if lengths[i] <= budget else -1
        else:
            state[gi] -= lengths[i]
    assert pack(list(lengths), budget) == groups  # deterministic


def test_pack_hand_checked():
    # sorted desc: 7(i1) 5(i0) 4(i3) 3(i2) 3(i5) 12(i4 over budget, first)
    assert pack([5, 7, 3, 4, 12, 3], 10) == [[4], [1, 2], [0, 3], [5]]
    assert pack([], 10) == []
    assert pack([0, 11, 0], 10) == [[1], [0, 2]]  # a zero-length item never joins an over-budget one


def test_pack_bad_input():
    with pytest.raises(ValueError):
        pack([1, 2], 0)
    with pytest.raises(ValueError):
        pack([1, -2], 10)
    with pytest.raises(ValueError):
        pack([1, 2.5], 10)
