"""Re-reading suffixes after a cached prefix, many in one forward (counterfactuals, method/counterfactual.py).

A job is (K/V cache of a prompt, prefix length P, suffix token ids): the suffix is read as if it followed the
first P tokens of the cached prompt, whose K/V are reused, never recomputed. All jobs of a call go through the
decoder as ONE packed batch: every projection, MLP and the LM head run once over the concatenated suffix
tokens (one GEMM per weight instead of one per job); only attention is per job, each suffix attending to its
own prefix and causally to itself.

Attention runs as a 4-D SDPA with a boolean mask [queries, P + queries] (prefix fully visible, suffix lower
triangular), which torch's CPU flash kernel takes blockwise. The earlier 3-D masked call fell to the math
path (an H x q x keys score tensor per block): 8.4x slower per layer at P = 1,500, n = 1,000 (SmolLM2 shapes,
this 2-core CPU, 2026-11-25; docs/benchmarks.md "Counterfactuals"). Queries are cut in blocks so the mask
stays under MASK_BUDGET elements.

Only the NLL of the positions a job asks for (`score`) goes through the LM head: the verdict reads the
symptoms' spans only, and the LM head (49k x 576 for SmolLM2) is a fifth of the forward.

`suffix_nll` reads one suffix at a time (`PrefillModel.suffix_nll`): the reference the batch is tested against.
A sliding-window layer (Gemma 3) masks keys more than W - 1 positions back too (attention.window_mask), the
cached prefix included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from masprism_batch import signals as sig
from masprism_batch.model.attention import window_mask
from masprism_batch.model.layers import attn_residual, embed, mlp_residual, qkv_proj, rms_norm

MASK_BUDGET = 1 << 24  # mask elements per query block (16 MiB of bool)
SUFFIX_SCORE_BUDGET = 1 << 22  # score elements per query block of suffix_nll (16 MiB in fp32)


@dataclass
class SuffixJob:
    cache: object  # forward.KVCache of the prompt
    prefix_len: int
    suffix: list[int]
    # [start, end) ranges of suffix positions whose NLL is wanted (entry t scores suffix[t]); None: every one
    score: list[tuple[int, int]] | None = None

    def __len__(self) -> int:
        return len(self.suffix)


def check_job(model, job: SuffixJob) -> None:
    if not 0 <= job.prefix_len <= job.cache.n_tokens:
        raise ValueError(f"prefix_len {job.prefix_len} outside the cached 0..{job.cache.n_tokens} tokens")
    if not job.suffix or job.prefix_len + len(job.suffix) > model.max_context:
        raise ValueError(f"suffix of {len(job.suffix)} tokens after {job.prefix_len}: "
                         f"need 1..{model.max_context} in all")


def _attend(q, k_new, v_new, cache_k, cache_v, P: int, scale: float, window: int | None = None) -> torch.Tensor:
    """q [n, Hq, D] of one suffix; keys = the cached prefix [:P] then the suffix's own. -> o [n, Hq, D].
    window: a sliding-window layer's W (None: full)."""
    n, Hq, _ = q.shape
    kk = torch.cat([cache_k[:P], k_new]).transpose(0, 1)[None]  # [1, Hk, P + n, D]
    vv = torch.cat([cache_v[:P], v_new]).transpose(0, 1)[None]
    groups = Hq // kk.shape[1]
    if groups > 1:  # native GQA (torch >= 2.5 on CPU); repeat where the kernel would not take it
        kk, vv = kk.repeat_interleave(groups, 1), vv.repeat_interleave(groups, 1)
    qt = q.transpose(0, 1)[None]
    o = q.new_empty(1, Hq, n, q.shape[2])
    qb = max(16, min(n, MASK_BUDGET // max(1, P + n)))
    for s0 in range(0, n, qb):
        s1 = min(n, s0 + qb)
        keys = P + s1  # query t (absolute P + t) sees every prefix key and suffix keys <= t
        k0 = 0 if window is None else max(0, P + s0 - window + 1)  # (and, windowed, none W or more back)
        mask = window_mask(P + s0, P + s1, k0, keys, window, q.device)
        o[:, :, s0:s1] = F.scaled_dot_product_attention(qt[:, :, s0:s1], kk[:, :, k0:keys], vv[:, :, k0:keys],
                                                         attn_mask=mask, scale=scale)
    return o[0].transpose(0, 1)


def suffix_nll_batch(model, jobs: list[SuffixJob]) -> list[np.ndarray]:
    """Per job float32 [len(suffix)]: entry t = -log p(suffix[t] | prefix, suffix[:t]); nan at t = 0 (the
    hidden state that predicts it is the prefix's last, not cached) and where `score` does not ask."""
    if not jobs:
        return []
    for j in jobs:
        check_job(model, j)
    a, w, dev = model.arch, model.weights, model.device
    lens = [len(j) for j in jobs]
    bounds = np.concatenate([[0], np.cumsum(lens)]).tolist()
    ids = torch.tensor([t for j in jobs for t in j.suffix], dtype=torch.int64, device=dev)
    pos = torch.cat([torch.arange(j.prefix_len, j.prefix_len + len(j)) for j in jobs]).to(dev)
    # position r of the packed hidden states predicts token r + 1 of the same suffix: keep the rows whose
    # target is asked for (job t >= 1 in a score range -> row t - 1)
    rows, want = [], []
    for b, j in enumerate(jobs):
        ranges = [(0, len(j))] if j.score is None else j.score
        ts = sorted({t for s, e in ranges for t in range(max(s, 1), min(e, len(j)))})
        rows += [bounds[b] + t - 1 for t in ts]
        want += [(b, t) for t in ts]
    with torch.inference_mode():
        rope = model.rope_tables(pos)
        h = embed(ids, w, a)
        for i, lw in enumerate(w.layers):
            x = rms_norm(h, lw.input_norm, a.rms_norm_eps)
            q, k, v = qkv_proj(x, lw, a, *rope[i])
            o = torch.empty_like(q)
            for b, j in enumerate(jobs):
                s, e = bounds[b], bounds[b + 1]
                o[s:e] = _attend(q[s:e], k[s:e], v[s:e], j.cache.k[i], j.cache.v[i], j.prefix_len, a.scale,
                                 a.window(i))
            attn_residual(h, o, lw, a)
            mlp_residual(h, lw, a)
        out = [np.full(n, np.nan, dtype=np.float32) for n in lens]
        if rows:
            r = torch.tensor(rows, dtype=torch.int64, device=dev)
            hidden = rms_norm(h.index_select(0, r), w.final_norm, a.rms_norm_eps)
            nll = sig.token_nll(hidden, w.lm_head, ids.index_select(0, r + 1), backend=model.signals_cfg.backend,
                                chunk=model.signals_cfg.nll_chunk).float().cpu().numpy()
            for (b, t), x in zip(want, nll, strict=True):
                out[b][t] = x
    return out


def suffix_nll(model, cache, prefix_len: int, suffix: list[int]) -> np.ndarray:
    """Token NLL of `suffix` read after the first `prefix_len` tokens of a cached sequence.

    The prefix is never recomputed: its K/V come from `cache` (a `PrefillModel.signals(..., keep_kv=True)` pass), so a
    counterfactual (a step replaced by a placeholder) costs only the tokens from that step on.
    Returns float32 [len(suffix)]: entry t = -log p(suffix[t] | prefix, suffix[:t]); entry 0 is nan (the
    hidden state that predicts it is the prefix's last, not cached: start the suffix one token early to
    score it).
    """
    check_job(model, SuffixJob(cache, prefix_len, suffix))
    a, w = model.arch, model.weights
    ids = torch.tensor(suffix, dtype=torch.int64, device=model.device)
    pos = torch.arange(prefix_len, prefix_len + len(suffix), device=model.device)
    with torch.inference_mode():
        rope = model.rope_tables(pos)
        h = embed(ids, w, a)
        n = len(suffix)
        groups = a.num_heads // a.num_kv_heads
        # queries in blocks: the masked SDPA forms [H, block, keys] scores, so memory stays linear in length
        qb = max(16, min(n, SUFFIX_SCORE_BUDGET // max(1, a.num_heads * (prefix_len + n))))
        for i, lw in enumerate(w.layers):
            x = rms_norm(h, lw.input_norm, a.rms_norm_eps)
            q, k, v = qkv_proj(x, lw, a, *rope[i])
            kk = torch.cat([cache.k[i][:prefix_len], k]).repeat_interleave(groups, 1).transpose(0, 1)
            vv = torch.cat([cache.v[i][:prefix_len], v]).repeat_interleave(groups, 1).transpose(0, 1)
            qt = q.transpose(0, 1)
            o = torch.empty_like(qt)
            for s0 in range(0, n, qb):
                s1 = min(n, s0 + qb)
                # query t (absolute prefix_len + t) sees every prefix key and suffix keys <= t
                keys = prefix_len + s1
                mask = window_mask(prefix_len + s0, prefix_len + s1, 0, keys, a.window(i), model.device)
                o[:, s0:s1] = F.scaled_dot_product_attention(qt[:, s0:s1], kk[:, :keys], vv[:, :keys],
                                                             attn_mask=mask, scale=a.scale)
            attn_residual(h, o.transpose(0, 1), lw, a)
            mlp_residual(h, lw, a)
        hidden = rms_norm(h, w.final_norm, a.rms_norm_eps)
        targets = torch.full_like(ids, -100)
        targets[:-1] = ids[1:]
        nll = sig.token_nll(hidden, model.weights.lm_head, targets, backend=model.signals_cfg.backend,
                            chunk=model.signals_cfg.nll_chunk).float().cpu().numpy()
    out = np.full(n, np.nan, dtype=np.float32)
    out[1:] = nll[:-1]
    return out
