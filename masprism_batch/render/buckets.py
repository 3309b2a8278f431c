"""Length bucketing: group sequences into packed batches under a token budget.

`pack` is first-fit-decreasing: items sorted by length descending (ties: lower index first), each placed in
the first open group with room; an item longer than the budget goes alone. Deterministic: same lengths, same
groups. Each group lists indices in placement order (longest first) and groups come in creation order, so the
first groups hold the longest sequences.
"""

from __future__ import annotations

from collections.abc import Sequence


def pack(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Groups of indices into `lengths` whose sums are <= token_budget (an over-budget item alone)."""
    if token_budget < 1:
        raise ValueError(f"token_budget must be >= 1, got {token_budget}")
    for i, n in enumerate(lengths):
        if int(n) != n or n < 0:
            raise ValueError(f"lengths[{i}] = {n!r} is not a non-negative integer")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    room: list[int] = []  # remaining tokens per group; -1 closes an over-budget item's group (even to 0-length)
    for i in order:
        n = int(lengths[i])
        for g, free in enumerate(room):
            if n <= free:
                groups[g].append(i)
                room[g] -= n
                break
        else:
            groups.append([i])
            room.append(token_budget - n if n <= token_budget else -1)
    return groups


def forward_budget(cfg) -> int:
    """Tokens one packed forward of a run may hold: `cfg.batch.token_budget`, which `stage/budget.resolve_budget`
    settled once per run. The one place a run's budget is read: every grouping under it asks here."""
    return cfg.batch.token_budget


def forward_groups(lengths: Sequence[int], cfg) -> list[list[int]]:
    """`pack` under the run's budget (`forward_budget`): the packs of the CPU stage (pipelines/packs.make_packs)
    and the prefill groups of the model stage (stage/prefill.prefill_groups); the counterfactual suffixes are
    grouped under the same `forward_budget` (method/counterfactual.effects_batch)."""
    return pack(lengths, forward_budget(cfg))
