"""The token budget of a run, one owner: how many tokens one packed forward may hold (config `batch.token_budget`,
option `--token-budget`), settled once when a run starts and then read by every grouping (`render/buckets.py`).

`resolve_budget(cfg, model, header, sized)` gives the run's config with its budget and a `Budget(n, source)`,
the first that applies of:
- set by the user (option or config file: `user_set`, the one place that asks pydantic's fields_set): kept;
- the budget the OUTDIR's run began with (`header`, a resume): kept, so that a device with less free memory,
  which would size less, does not turn the resume into another configuration (the budget is in the config hash);
- sized elsewhere (`sized`: on one of a Ray cluster's GPUs, pipelines/ray_budget.py);
- sized for the loaded model's device (`device_budget`): CPU_TOKEN_BUDGET on CPU (the config default, so the
  config and its hash stay as they were), else from the device's free memory after the weights
  (`activation_bytes_per_token` of the model's shapes). docs/gpu.md has the measurements behind the caps.
"""

from __future__ import annotations

from dataclasses import dataclass

RESUMED = "OUTDIR's run began with it (resumed)"
USER = "set by the user"


@dataclass(frozen=True)
class Budget:
    """A run's token budget and where it came from (run.json `token_budget`, `token_budget_source`)."""

    n: int
    source: str


def user_set(cfg) -> bool:
    """Whether the user set the budget (option or config file), rather than leaving it to the device."""
    return "token_budget" in cfg.batch.model_fields_set


def left_to_the_device(cfg) -> bool:
    """Whether the budget is to be sized for a device other than the CPU (a GPU the model is loaded on)."""
    return not user_set(cfg) and cfg.model.device != "cpu"


def resolve_budget(cfg, model=None, header: dict | None = None, sized: tuple[int, str] | None = None):
    """(cfg with the run's budget, Budget): see the module's order. `model`: the loaded model (None: not loaded,
    the CPU default unless `sized`); `header`: the OUTDIR's header, when it has one."""
    if user_set(cfg):
        return cfg, Budget(cfg.batch.token_budget, USER)
    if header and header.get("token_budget") is not None:
        n, source = int(header["token_budget"]), RESUMED
    else:
        n, source = sized if sized is not None else device_budget(model)
    if n != cfg.batch.token_budget:
        cfg = cfg.model_copy(update={"batch": cfg.batch.model_copy(update={"token_budget": n})})
    return cfg, Budget(n, source)


# CPU: 8,192 is what the 2-core CPU runs best and what every CPU figure in docs/benchmarks.md used.
CPU_TOKEN_BUDGET = 8192
# CUDA: at least 32k whenever it fits, and not above 32k: a bigger pack ran slower end to end on an H200 until the
# signals path stops growing faster than the pack (docs/gpu.md, "Token budget").
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


def device_budget(model) -> tuple[int, str]:
    """(budget, why) for a loaded model (None: none loaded): CPU_TOKEN_BUDGET on CPU, else sized from the
    device's free memory."""
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
