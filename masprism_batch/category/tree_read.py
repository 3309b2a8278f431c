"""Many short continuations of one cached prefix in one sequence: a shared stem, then K branches (a tree).

Reading every kind's description after a step as its own suffix (model/suffix.py) pays K attention calls per
step and layer, and reads the shared lead-in K times. Here a step's read is ONE packed sequence: the stem
(the lead-in) once, then every branch (a description) side by side, each branch at the positions it would have
right after the stem and attending to the cached prefix, the stem and itself only (a tree mask). The numbers
are those of K separate suffix reads (tests/category/test_tree_read.py checks it against model.suffix_nll).

All reads of a call go through the decoder together: projections, MLP and LM head once over every read's
tokens; attention per read, a 4-D SDPA with a boolean mask [queries, P + queries], as model/suffix.py does.
The LM head runs only on the rows that predict a branch token (its first token is predicted by the stem's last).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from masprism_batch import signals as sig
from masprism_batch.model.layers import attn_residual, embed, mlp_residual, qkv_proj, rms_norm


@dataclass
class TreeRead:
    cache: object  # forward.KVCache of the prompt
    prefix_len: int


def _layout(stem: list[int], branches: list[list[int]]):
    """Token ids, position offsets (from the prefix end), the tree mask over the read's own tokens, and per
    branch the (row predicting it, target index) pairs."""
    L = len(stem)
    ids = list(stem) + [t for b in branches for t in b]
    off = list(range(L)) + [L + j for b in branches for j in range(len(b))]
    n = len(ids)
    own = torch.zeros(n, n, dtype=torch.bool)
    own[:L, :L] = torch.ones(L, L, dtype=torch.bool).tril_()
    preds, s = [], L
    for b in branches:
        e = s + len(b)
        own[s:e, :L] = True
        own[s:e, s:e] = torch.ones(e - s, e - s, dtype=torch.bool).tril_()
        preds.append([(L - 1 if j == 0 else s + j - 1, s + j) for j in range(len(b))])
        s = e
    return ids, off, own, preds


def branch_nll(model, reads: list[TreeRead], stem: list[int], branches: list[list[int]]) -> np.ndarray:
    """[len(reads), len(branches)]: mean NLL of each branch's tokens read after prefix + stem (every branch token
    scored, its first by the stem's last). A read whose prefix + tokens exceed the model's context is nan."""
    if not stem or not branches or any(not b for b in branches):
        raise ValueError("a tree read needs a non-empty stem and non-empty branches")
    ids1, off1, own, preds = _layout(stem, branches)
    n = len(ids1)
    out = np.full((len(reads), len(branches)), np.nan)
    ok = [r for r, rd in enumerate(reads) if 0 <= rd.prefix_len <= rd.cache.n_tokens
          and rd.prefix_len + len(stem) + max(map(len, branches)) <= model.max_context]
    if not ok:
        return out
    a, w, dev = model.arch, model.weights, model.device
    ids = torch.tensor(ids1 * len(ok), dtype=torch.int64, device=dev)
    pos = torch.cat([torch.tensor(off1) + reads[r].prefix_len for r in ok]).to(dev)
    own = own.to(dev)
    rows = [q * n + p for q in range(len(ok)) for b in preds for p, _ in b]
    tgts = [q * n + t for q in range(len(ok)) for b in preds for _, t in b]
    with torch.inference_mode():
        rope = model.rope_tables(pos)
        h = embed(ids, w, a)
        for i, lw in enumerate(w.layers):
            x = rms_norm(h, lw.input_norm, a.rms_norm_eps)
            q, k, v = qkv_proj(x, lw, a, *rope[i])
            o = torch.empty_like(q)
            for j, r in enumerate(ok):
                s, e, P = j * n, (j + 1) * n, reads[r].prefix_len
                c = reads[r].cache
                kk = torch.cat([c.k[i][:P], k[s:e]]).transpose(0, 1)[None]
                vv = torch.cat([c.v[i][:P], v[s:e]]).transpose(0, 1)[None]
                groups = q.shape[1] // kk.shape[1]
                if groups > 1:
                    kk, vv = kk.repeat_interleave(groups, 1), vv.repeat_interleave(groups, 1)
                mask = torch.cat([torch.ones(n, P, dtype=torch.bool, device=dev), own], dim=1)
                if (win := a.window(i)) is not None:  # a sliding-window layer (Gemma 3): no key W or more back
                    qp = pos[s:e]
                    mask &= torch.cat([torch.arange(P, device=dev), qp])[None, :] > qp[:, None] - win
                o[s:e] = F.scaled_dot_product_attention(q[s:e].transpose(0, 1)[None], kk, vv, attn_mask=mask,
                                                        scale=a.scale)[0].transpose(0, 1)
            attn_residual(h, o, lw, a)
            mlp_residual(h, lw, a)
        r_t = torch.tensor(rows, dtype=torch.int64, device=dev)
        hidden = rms_norm(h.index_select(0, r_t), w.final_norm, a.rms_norm_eps)
        nll = sig.token_nll(hidden, w.lm_head, ids.index_select(0, torch.tensor(tgts, device=dev)),
                            backend=model.signals_cfg.backend, chunk=model.signals_cfg.nll_chunk).float().cpu().numpy()
    per_read = sum(len(b) for b in branches)
    for j, r in enumerate(ok):
        x, s = nll[j * per_read:(j + 1) * per_read], 0
        for c, b in enumerate(branches):
            out[r, c] = float(x[s:s + len(b)].mean())
            s += len(b)
    return out
