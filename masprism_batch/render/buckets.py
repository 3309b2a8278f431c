"""Length bucketing: group sequences into packed batches under a token budget.

`pack` is first-fit-decreasing: items sorted by length descending (ties: lower index first), each placed in
the first open group with room; an item longer than the budget goes alone. Deterministic: same lengths, same
groups. Each group lists indices in placement order (longest first) and groups come in creation order, so the
first groups hold the longest sequences.

`bucket_stream` applies `pack` to a stream in windows of `window` items, so memory stays bounded by one window
while sequences of similar length still share batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import TypeVar

T = TypeVar("T")


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
    """Tokens one packed forward of a run may hold: `cfg.batch.token_budget`, which `with_token_budget` sized for
    the device once per run. The one place a run's budget is read: every grouping under it asks here."""
    return cfg.batch.token_budget


def forward_groups(lengths: Sequence[int], cfg) -> list[list[int]]:
    """`pack` under the run's budget (`forward_budget`): the packs of the CPU stage (pipelines/packs.make_packs)
    and the prefill groups of the model stage (stage/prefill.prefill_groups); the counterfactual suffixes are
    grouped under the same `forward_budget` (method/counterfactual.effects_batch)."""
    return pack(lengths, forward_budget(cfg))


def bucket_stream(
    items: Iterable[T], length: Callable[[T], int], token_budget: int, window: int = 256
) -> Iterator[list[T]]:
    """Yield batches of items: the stream is read `window` items at a time and each window is `pack`ed.

    Every item is yielded exactly once; order across windows follows the stream.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    it = iter(items)
    while chunk := list(islice(it, window)):
        for group in pack([length(x) for x in chunk], token_budget):
            yield [chunk[i] for i in group]


# ---- how many tokens one packed forward may hold on this device --------------------------------
# CPU: 8,192 is what the 2-core CPU runs best and what every CPU figure in docs/benchmarks.md used.
CPU_TOKEN_BUDGET = 8192
# CUDA: at least 32k whenever it fits, and not above 32k today: on an H200 (2026-11-26, 402f24b, Qwen3-0.6B
# shapes, 201 dev logs; ../shared/gpu/h200-2026-11-26.md) 8,192 / 32,768 / 65,536 ran 34.5k / 82.8k / 47.4k
# tokens/s end to end: a bigger pack is slower until the signals path stops growing faster than the pack.
CUDA_MIN_TOKEN_BUDGET = 32_768
CUDA_MAX_TOKEN_BUDGET = 32_768
BUDGET_STEP = 4096  # budgets below the cap are rounded down to this, so a resume sizes the same value
HEADROOM = 0.8  # share of free memory the activations may take (allocator fragmentation, cuDNN workspaces)


def activation_bytes_per_token(arch, dtype_bytes: int) -> int:
    """Device bytes one token of a packed signals forward holds at its peak, from the model config.

    One layer's working set is live at a time (residual, normed input, q/k/v and their contiguous copies on
    instrumented layers, attention output, MLP gate/up/product, RoPE cos/sin, and the padded q/k/v/o of the
    SDPA fallback when flash-attn is missing, counted at 2x for padding), plus what lives for the whole call:
    every layer's K/V when the counterfactuals keep the prefix cache, and the per-token ids, positions,
    targets, step ids and NLL."""
    q, kv = arch.num_heads * arch.head_dim, arch.num_kv_heads * arch.head_dim
    layer = (2 * arch.hidden_size + 2 * (q + 2 * kv) + q + 3 * arch.intermediate_size + 2 * arch.head_dim
             + 2 * (2 * q + 2 * kv))
    kv_cache = 2 * arch.num_layers * kv
    return dtype_bytes * (layer + kv_cache) + 3 * 8 + 2 * 4 + 1


def fixed_activation_bytes(arch, nll_chunk: int) -> int:
    """Bytes that do not grow with the pack: one LM-head chunk of fp32 logits and its softmax (torch backend;
    the Triton NLL forms none, so this only leaves more headroom there)."""
    return 2 * 4 * nll_chunk * arch.vocab_size


def device_token_budget(free_bytes: int, per_token: int, fixed: int = 0) -> int:
    """Tokens per packed forward on a CUDA device with `free_bytes` free after the weights were loaded.

    min(CUDA_MAX_TOKEN_BUDGET, what fits in HEADROOM of the free memory), rounded down to BUDGET_STEP below
    the cap; never more than fits (a card too small for 32k gets less), never below one step."""
    if per_token < 1:
        raise ValueError(f"per_token must be >= 1, got {per_token}")
    fits = max(int(free_bytes * HEADROOM) - fixed, 0) // per_token
    if fits >= CUDA_MAX_TOKEN_BUDGET:
        return CUDA_MAX_TOKEN_BUDGET
    return max(BUDGET_STEP, fits // BUDGET_STEP * BUDGET_STEP)


def auto_token_budget(model) -> tuple[int, str]:
    """(budget, why) for a loaded model: CPU_TOKEN_BUDGET on CPU, else sized from the device's free memory."""
    device = getattr(model, "device", None)
    if getattr(device, "type", "cpu") != "cuda":
        return CPU_TOKEN_BUDGET, "CPU default"
    import torch

    free, _total = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)  # torch's own cache
    per_token = activation_bytes_per_token(model.arch, torch.finfo(model.dtype).bits // 8)
    n = device_token_budget(free, per_token, fixed_activation_bytes(model.arch, model.signals_cfg.nll_chunk))
    why = f"sized for {free / 2**30:.1f} GiB free on {device} at {per_token:,} B/token (cap {CUDA_MAX_TOKEN_BUDGET:,})"
    if n < CUDA_MIN_TOKEN_BUDGET:
        why += f": below the {CUDA_MIN_TOKEN_BUDGET:,} wanted, the most that fits"
    return n, why


def with_token_budget(cfg, model, sized: tuple[int, str] | None = None):
    """(cfg, budget, why): `cfg` with the token budget this run uses. A budget the user set (option or config
    file: pydantic's fields_set) is kept; an unset one is sized for the model's device (`auto_token_budget`),
    or is `sized` (budget, why) where that was done elsewhere (a Ray run: on one of the cluster's GPUs).
    On CPU that is the config default, so the config, and its hash, stay as they were."""
    if "token_budget" in cfg.batch.model_fields_set:
        return cfg, cfg.batch.token_budget, "set by the user"
    n, why = sized if sized is not None else auto_token_budget(model)
    if n == cfg.batch.token_budget:
        return cfg, n, why
    return cfg.model_copy(update={"batch": cfg.batch.model_copy(update={"token_budget": n})}), n, why
