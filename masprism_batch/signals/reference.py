"""Pure-torch reference of the two signal ops. Blockwise: never a T x T or T x V tensor.

Shapes (packed variable-length batch of B sequences, T tokens in all):
  q [T, Hq, D], k/v [T, Hk, D] (Hq % Hk == 0, GQA), cu_seqlens [B+1] int32 prefix sums.
  step_ids [T] int32: the step (0-based, local to its sequence) each token belongs to, -1 for none.
  n_steps [B] int32.
Outputs: o [T, Hq, D]; lse [Hq, T] fp32 (natural log); mass [B, Nmax, Nmax] fp32 where
  mass[b, i, j] = sum_{t in step i} sum_{u in step j} mean_h softmax_h(t, u)   (causal, u <= t).
"""

from __future__ import annotations

import torch


def _expand_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def attention_lse(q, k, v, cu_seqlens, scale: float, block: int = 256):
    """Causal attention per sequence with the row log-sum-exp, computed in query blocks."""
    T, Hq, D = q.shape
    groups = Hq // k.shape[1]
    o = torch.empty_like(q)
    lse = torch.empty(Hq, T, dtype=torch.float32, device=q.device)
    bounds = cu_seqlens.tolist()
    for b in range(len(bounds) - 1):
        s, e = bounds[b], bounds[b + 1]
        kb = _expand_kv(k[s:e], groups).transpose(0, 1).float()  # [H, L, D]
        vb = _expand_kv(v[s:e], groups).transpose(0, 1).float()
        for qs in range(s, e, block):
            qe = min(qs + block, e)
            qb = q[qs:qe].transpose(0, 1).float()  # [H, bq, D]
            kv_end = qe - s  # causal: keys up to the last query of the block
            scores = torch.matmul(qb, kb[:, :kv_end].transpose(1, 2)) * scale  # [H, bq, kv_end]
            qpos = torch.arange(qs - s, qe - s, device=q.device)[:, None]
            kpos = torch.arange(kv_end, device=q.device)[None, :]
            scores.masked_fill_(kpos > qpos, float("-inf"))
            row_lse = torch.logsumexp(scores, dim=-1)  # [H, bq]
            p = torch.exp(scores - row_lse[..., None])
            o[qs:qe] = torch.matmul(p, vb[:, :kv_end]).transpose(0, 1).to(q.dtype)
            lse[:, qs:qe] = row_lse
    return o, lse


def step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale: float, block: int = 256):
    """Second pass: recompute QK^T per block with the known LSE and sum probabilities per (step, step)."""
    T, Hq, D = q.shape
    groups = Hq // k.shape[1]
    B = len(cu_seqlens) - 1
    n_max = int(n_steps.max().item()) if B > 0 else 0
    mass = torch.zeros(B, n_max, n_max, dtype=torch.float32, device=q.device)
    bounds = cu_seqlens.tolist()
    for b in range(B):
        s, e = bounds[b], bounds[b + 1]
        n = int(n_steps[b])
        if n == 0 or e == s:
            continue
        kb = _expand_kv(k[s:e], groups).transpose(0, 1).float()
        sid = step_ids[s:e].long()
        # one-hot of key tokens to steps; tokens outside any step map to a dropped extra column
        key_onehot = torch.zeros(e - s, n + 1, dtype=torch.float32, device=q.device)
        key_onehot[torch.arange(e - s, device=q.device), torch.where(sid >= 0, sid, n)] = 1.0
        for qs in range(s, e, block):
            qe = min(qs + block, e)
            qsid = sid[qs - s : qe - s]
            if not bool((qsid >= 0).any()):
                continue
            kv_end = qe - s
            qb = q[qs:qe].transpose(0, 1).float()
            scores = torch.matmul(qb, kb[:, :kv_end].transpose(1, 2)) * scale
            qpos = torch.arange(qs - s, qe - s, device=q.device)[:, None]
            kpos = torch.arange(kv_end, device=q.device)[None, :]
            scores.masked_fill_(kpos > qpos, float("-inf"))
            p = torch.exp(scores - lse[:, qs:qe, None]).mean(dim=0)  # head average [bq, kv_end]
            per_key_step = p @ key_onehot[:kv_end]  # [bq, n+1]
            q_onehot = torch.zeros(n + 1, qe - qs, dtype=torch.float32, device=q.device)
            q_onehot[torch.where(qsid >= 0, qsid, n), torch.arange(qe - qs, device=q.device)] = 1.0
            mass[b, :n, :n] += (q_onehot @ per_key_step)[:n, :n]
    return mass


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale: float, block: int = 256):
    o, lse = attention_lse(q, k, v, cu_seqlens, scale, block)
    return o, lse, step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale, block)


def token_nll(hidden, weight, targets, chunk: int = 1024, ignore_index: int = -100):
    """Per-token NLL of `targets` under logits = hidden @ weight.T, in chunks of tokens (never T x V)."""
    T = hidden.shape[0]
    out = torch.full((T,), float("nan"), dtype=torch.float32, device=hidden.device)
    w = weight.float() if hidden.dtype == torch.float32 else weight
    for cs in range(0, T, chunk):
        ce = min(cs + chunk, T)
        tgt = targets[cs:ce]
        logits = (hidden[cs:ce].to(w.dtype) @ w.T).float()  # [chunk, V]
        lse = torch.logsumexp(logits, dim=-1)
        valid = tgt != ignore_index
        picked = logits.gather(1, tgt.clamp_min(0).long()[:, None])[:, 0]
        out[cs:ce] = torch.where(valid, lse - picked, torch.full_like(lse, float("nan")))
    return out
