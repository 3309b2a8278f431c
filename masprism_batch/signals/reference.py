"""Pure-torch reference of the two signal ops. Blockwise: never a T x T or T x V tensor.

Shapes (packed variable-length batch of B sequences, T tokens in all):
  q [T, Hq, D], k/v [T, Hk, D] (Hq % Hk == 0, GQA), cu_seqlens [B+1] int32 prefix sums.
  step_ids [T] int32: the step (0-based, local to its sequence) each token belongs to, -1 for none.
  n_steps [B] int32.
Outputs: o [T, Hq, D] (dtype of q); lse [Hq, T] (natural log); mass [B, Nmax, Nmax] where
  mass[b, i, j] = sum_{t in step i} sum_{u in step j} mean_h softmax_h(t, u)   (causal, u <= t),
  or with per_head=True mass [B, Hq, Nmax, Nmax] with the same sum for each head h (no mean): the input of
  the learned head weights (method/heads.py); its mean over heads is the default mass.
lse and mass are fp32, or fp64 when q is fp64 (the compute dtype: fp64 stays fp64, everything else is
accumulated in fp32). token_nll returns fp32 per-token NLL.

This is also the CPU production path when the C++ extension is not built, so it is written for speed:
O and the row LSE come from one fused SDPA call on CPU (the flash kernel that also returns its LSE), and
the step mass costs one extra blockwise pass that recomputes QK^T once with the LSE already known.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Elements of one block of scores [Hq, bq, keys] in the mass pass: bounds the pass's extra memory
# (16 MiB in fp32) independently of T, so the signal path's peak memory stays linear in T. 2^22 was
# faster than 2^20 and 2^24 on this CPU (smaller: less efficient GEMMs; larger: more memory traffic).
SCORE_BUDGET = 1 << 22
VOCAB_TILE = 8192


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _flash_cpu(qb, kb, vb, scale: float):
    """qb [L, Hq, D], kb/vb [L, Hk, D] -> (o [L, Hq, D], lse [Hq, L]) via the CPU flash kernel, or None."""
    if qb.device.type != "cpu" or qb.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        return None
    groups = qb.shape[1] // kb.shape[1]
    kx, vx = (kb, vb) if groups == 1 else (kb.repeat_interleave(groups, 1), vb.repeat_interleave(groups, 1))
    try:
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            qb.transpose(0, 1)[None], kx.transpose(0, 1)[None], vx.transpose(0, 1)[None], 0.0, True, scale=scale
        )
    except (RuntimeError, AttributeError, NotImplementedError):  # private op: absent or changed in this torch
        return None
    return o[0].transpose(0, 1), lse[0]


def _attention_lse_blockwise(qb, kb, vb, scale: float, block: int):
    """Fallback for any device: exact softmax per query block (scores [Hq, bq, keys] only)."""
    L, Hq, D = qb.shape
    groups = Hq // kb.shape[1]
    cdt = compute_dtype(qb.dtype)
    kx = kb.repeat_interleave(groups, 1).transpose(0, 1).to(cdt)  # [Hq, L, D]
    vx = vb.repeat_interleave(groups, 1).transpose(0, 1).to(cdt)
    o = torch.empty_like(qb)
    lse = torch.empty(Hq, L, dtype=cdt, device=qb.device)
    for a in range(0, L, block):
        b = min(a + block, L)
        scores = torch.matmul(qb[a:b].transpose(0, 1).to(cdt), kx[:, :b].transpose(1, 2)) * scale
        scores[:, :, a:b].masked_fill_(_future_mask(b - a, qb.device), float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)
        o[a:b] = torch.matmul(torch.exp(scores - row_lse[..., None]), vx[:, :b]).transpose(0, 1).to(qb.dtype)
        lse[:, a:b] = row_lse
    return o, lse


def _future_mask(n: int, device) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool, device=device).triu_(1)


def attention_lse(q, k, v, cu_seqlens, scale: float, *, block: int = 256, out=None):
    """Causal attention per sequence with the row log-sum-exp: o [T, Hq, D], lse [Hq, T]."""
    T, Hq, D = q.shape
    o = torch.empty_like(q) if out is None else out[0]
    lse = torch.empty(Hq, T, dtype=compute_dtype(q.dtype), device=q.device) if out is None else out[1]
    bounds = cu_seqlens.tolist()
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        if e == s:
            continue
        res = _flash_cpu(q[s:e], k[s:e], v[s:e], scale)
        if res is None:
            res = _attention_lse_blockwise(q[s:e], k[s:e], v[s:e], scale, block)
        o[s:e] = res[0]
        lse[:, s:e] = res[1]
    return o, lse


def _onehot(ids: torch.Tensor, n: int, dtype) -> torch.Tensor:
    """[len, n+1] one-hot of step ids; id -1 (no step) goes to the extra column n, dropped later."""
    out = torch.zeros(ids.shape[0], n + 1, dtype=dtype, device=ids.device)
    out[torch.arange(ids.shape[0], device=ids.device), torch.where(ids >= 0, ids, n)] = 1.0
    return out


def step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale: float, *, block: int = 256, out=None,
              per_head: bool = False):
    """One pass: recompute QK^T per query block, p = exp(s - lse) (LSE known), sum per (step, step).

    GQA without copying K: the query heads of one KV group are stacked along rows, so each block is one
    batched GEMM [Hk, groups*bq, D] x [Hk, D, keys] whose output viewed as [Hq, bq, keys] is ordered
    like the query heads (h = hk * groups + g).
    """
    T, Hq, D = q.shape
    Hk = k.shape[1]
    groups = Hq // Hk
    cdt = compute_dtype(q.dtype)
    B = len(cu_seqlens) - 1
    n_max = int(n_steps.max().item()) if B > 0 else 0
    shape = (B, Hq, n_max, n_max) if per_head else (B, n_max, n_max)
    mass = torch.zeros(shape, dtype=cdt, device=q.device) if out is None else out.zero_()
    bounds = cu_seqlens.tolist()
    n_list = n_steps.tolist()
    for bi in range(B):
        s, e, n = bounds[bi], bounds[bi + 1], int(n_list[bi])
        if n == 0 or e == s:
            continue
        L = e - s
        sid = step_ids[s:e].long()
        kt = k[s:e].transpose(0, 1).to(cdt).transpose(1, 2)  # [Hk, D, L]
        key_onehot = _onehot(sid, n, cdt)  # [L, n+1]
        acc = torch.zeros((Hq, n + 1, n + 1) if per_head else (n + 1, n + 1), dtype=cdt, device=q.device)
        # rows per block: bounded by the scores budget at the sequence's full length
        bq = max(16, min(block, SCORE_BUDGET // max(1, Hq * L)))
        # one buffer for every block: a fresh multi-MB allocation per block is mmapped and page-faulted
        s_buf = torch.empty(Hq * min(bq, L) * L, dtype=cdt, device=q.device)
        for a in range(0, L, bq):
            b = min(a + bq, L)
            qsid = sid[a:b]
            if not bool((qsid >= 0).any()):
                continue
            qg = q[s + a : s + b].to(cdt).view(b - a, Hk, groups, D).permute(1, 2, 0, 3)
            qg = qg.reshape(Hk, groups * (b - a), D)
            neg_lse = -lse[:, s + a : s + b].to(cdt).reshape(Hk, groups * (b - a), 1)
            scores = s_buf[: Hq * (b - a) * b].view(Hk, groups * (b - a), b)
            torch.baddbmm(neg_lse, qg, kt[:, :, :b], alpha=scale, out=scores)
            scores = scores.view(Hq, b - a, b)
            scores[:, :, a:b].masked_fill_(_future_mask(b - a, q.device), float("-inf"))
            if per_head:  # [Hq, bq, keys] @ [keys, n+1] -> per head [Hq, n+1, n+1]
                acc += _onehot(qsid, n, cdt).T @ (scores.exp_() @ key_onehot[:b])
                continue
            p = scores.exp_().sum(dim=0)  # head sum [bq, keys]; divided by Hq once at the end
            per_key_step = p @ key_onehot[:b]  # [bq, n+1]
            acc += _onehot(qsid, n, cdt).T @ per_key_step
        if per_head:
            mass[bi, :, :n, :n] = acc[:, :n, :n]
        else:
            mass[bi, :n, :n] = acc[:n, :n] / Hq
    return mass


def step_attention(q, k, v, cu_seqlens, step_ids, n_steps, scale: float, *, block: int = 256, out=None,
                   per_head: bool = False):
    """out: optional preallocated (o, lse, mass), every element of which is overwritten."""
    o, lse = attention_lse(q, k, v, cu_seqlens, scale, block=block, out=None if out is None else out[:2])
    return o, lse, step_mass(q, k, lse, cu_seqlens, step_ids, n_steps, scale, block=block,
                             out=None if out is None else out[2], per_head=per_head)


def token_nll(hidden, weight, targets, *, chunk: int = 1024, ignore_index: int = -100, out=None):
    """Per-token NLL (fp32) of `targets` under logits = hidden @ weight.T.

    Tokens in chunks, vocabulary in tiles with an online log-sum-exp, so at most chunk x VOCAB_TILE
    logits exist at once (never T x V, nor chunk x V). Accumulation in fp32 (fp64 for fp64 inputs);
    the target logit is a direct dot product with the target's row of `weight`.
    """
    T = hidden.shape[0]
    V = weight.shape[0]
    cdt = compute_dtype(hidden.dtype)
    if out is None:
        out = torch.empty(T, dtype=torch.float32, device=hidden.device)
    w_full = weight.to(cdt) if weight.dtype == cdt else None  # cast per tile otherwise (no V x d copy)
    for cs in range(0, T, chunk):
        ce = min(cs + chunk, T)
        h = hidden[cs:ce].to(cdt)
        m = torch.full((ce - cs,), float("-inf"), dtype=cdt, device=hidden.device)
        ssum = torch.zeros(ce - cs, dtype=cdt, device=hidden.device)
        for vs in range(0, V, VOCAB_TILE):
            ve = min(vs + VOCAB_TILE, V)
            w = w_full[vs:ve] if w_full is not None else weight[vs:ve].to(cdt)
            logits = h @ w.T  # [chunk, tile]
            m_new = torch.maximum(m, logits.amax(dim=1))
            ssum = ssum * torch.exp(m - m_new) + logits.sub_(m_new[:, None]).exp_().sum(dim=1)
            m = m_new
        tgt = targets[cs:ce].long()
        valid = tgt != ignore_index
        # the target rows by embedding lookup (index_select; the same rows as weight[idx] without an
        # advanced-indexing op), the result written straight into `out` where dtypes match (no extra copy)
        picked = (h * F.embedding(tgt.clamp(0, V - 1), weight).to(cdt)).sum(dim=1)
        nll = m + torch.log(ssum) - picked
        nan = torch.full_like(nll, float("nan"))
        if nll.dtype == out.dtype:
            torch.where(valid, nll, nan, out=out[cs:ce])
        else:
            out[cs:ce] = torch.where(valid, nll, nan).float()
    return out
