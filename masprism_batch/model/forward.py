"""PrefillModel: one packed varlen prefill forward that yields the MASPrism signals.

Several sequences are concatenated into one token-major batch (cu_seqlens, positions restart at 0 per
sequence, no padding). Instrumented layers run their attention through masprism_batch.signals.step_attention,
whose output `o` IS the layer's attention output, so the signal costs no second forward. The final normed
hidden states go to signals.token_nll with the LM-head weight: logits are only ever formed in chunks.

Re-reading a suffix after a cached prefix (counterfactuals) is `model/suffix.py`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from masprism_batch import signals as sig
from masprism_batch.model.arch import ArchSpec, instrument_layers, rope_inv_freq
from masprism_batch.model.attention import causal_attention
from masprism_batch.model.layers import Weights, mlp, qkv_proj, rms_norm, rope_cos_sin

log = logging.getLogger(__name__)


@dataclass
class SeqSignals:
    token_nll: np.ndarray  # float32 [L]; entry t = -log p(x_t | x_<t), entry 0 = nan
    # float32 [N, N]; A[i -> j], heads and instrumented layers averaged, row i / |T_i|. From combine.combine_windows past
    # schema.DENSE_STEPS steps: a row-sparse sparse_attn.SparseAttn (also step_attn_learned)
    step_attn: np.ndarray
    n_tokens: int
    # float32 [L_instr, Hq, N, N] per (instrumented layer, head), row i / |T_i|; only with per_head=True
    step_attn_heads: np.ndarray | None = None
    kv: KVCache | None = None  # only with keep_kv=True: this sequence's K/V of every layer (counterfactuals)
    # float32 [N, N]: A per head weighted by learned head weights, set by combine.combine_windows (long logs keep no
    # whole per-head A); None: apply the weights to step_attn_heads
    step_attn_learned: np.ndarray | None = None


@dataclass
class KVCache:
    """K (roped) and V of every layer for one sequence: the shared prefix of counterfactual re-scoring."""
    k: list[torch.Tensor]  # per layer [L, Hk, D]
    v: list[torch.Tensor]
    n_tokens: int


@dataclass
class PrefillTiming:
    sequences: int
    tokens: int
    seconds: float
    with_signals: bool

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")


@dataclass
class _PackedBatch:
    ids: torch.Tensor  # [T] int64
    host_ids: np.ndarray  # [T] int64, the same ids on the host
    positions: torch.Tensor  # [T] int64, restart at 0 per sequence
    cu_seqlens: torch.Tensor  # [B+1] int32
    bounds: list[int]
    max_seqlen: int


class PrefillModel:
    """Prefill-only decoder for the Llama / Qwen2 / Qwen3 families (see arch.py)."""

    def __init__(self, *, model_id: str, arch: ArchSpec, weights: Weights, hf_config, tokenizer,
                 device: torch.device, dtype: torch.dtype, signals_cfg, fingerprint: str = ""):
        self.model_id, self.arch, self.weights, self.tokenizer = model_id, arch, weights, tokenizer
        self.device, self.dtype, self.signals_cfg, self.fingerprint = device, dtype, signals_cfg, fingerprint
        self.hf_config = hf_config
        inv_freq, self._rope_scale = rope_inv_freq(hf_config, arch)
        self._inv_freq = inv_freq.to(device)
        self.instrument_layers = instrument_layers(arch.num_layers, signals_cfg.layer_fraction)
        self._instrumented = set(self.instrument_layers)
        self.last_timing: PrefillTiming | None = None

    @property
    def num_layers(self) -> int:
        return self.arch.num_layers

    @property
    def max_context(self) -> int:
        return self.arch.max_position_embeddings

    # ---- public entry points -------------------------------------------------------------------------
    def signals(self, seqs: list[list[int]], step_ids: list[list[int]],
                n_steps: list[int] | None = None, *, per_head: bool = False,
                keep_kv: bool = False, nll_from: list[int] | None = None,
                nll_steps_only: bool = False) -> list[SeqSignals]:
        """ONE packed forward over all `seqs`; per sequence the token NLL and the step attention matrix A.

        step_ids[b][t] is the step of token t (0-based, -1 outside steps). n_steps[b] defaults to
        max(step_ids[b]) + 1; pass it when trailing steps may have no tokens.
        per_head: also A per (instrumented layer, head). keep_kv: keep every layer's K/V per sequence, the
        prefix cache of `suffix_nll` (memory: 2 x layers x tokens x kv heads x head dim).
        nll_from[b] / nll_steps_only: token NLL only from that position on / only of tokens inside a step (step
        id >= 0); the others are nan and cost no LM-head row (the model stage reads nothing else).
        """
        batch = self._packed_batch(seqs)
        if len(step_ids) != len(seqs):
            raise ValueError(f"{len(seqs)} sequences but {len(step_ids)} step_ids lists")
        for b, (s, sid) in enumerate(zip(seqs, step_ids, strict=True)):
            if len(sid) != len(s):
                raise ValueError(f"sequence {b}: {len(s)} tokens but {len(sid)} step ids")
        sid_t = torch.tensor([x for sid in step_ids for x in sid], dtype=torch.int32)
        if sid_t.numel() and int(sid_t.min()) < -1:
            raise ValueError("step ids must be >= -1")
        seen = [max(sid, default=-1) + 1 for sid in step_ids]
        n_steps = seen if n_steps is None else list(n_steps)
        if len(n_steps) != len(seqs):
            raise ValueError(f"{len(seqs)} sequences but {len(n_steps)} n_steps")
        if any(n < m for n, m in zip(n_steps, seen, strict=True)):
            raise ValueError(f"n_steps {n_steps} smaller than the step ids used {seen}")
        n_steps_t = torch.tensor(n_steps, dtype=torch.int32)
        unread = self._unread(batch, sid_t, nll_from, nll_steps_only)
        t0 = time.perf_counter()
        kv = ([], []) if keep_kv else None
        with torch.inference_mode():
            hidden, mass = self._run(batch, sid_t.to(self.device), n_steps_t.to(self.device), per_head, kv)
            nll = self._token_nll(hidden, batch, unread)
            out = self._split(batch, nll, mass, sid_t, n_steps, per_head)
        if kv is not None:
            for b, (s, e) in enumerate(zip(batch.bounds[:-1], batch.bounds[1:], strict=True)):
                out[b].kv = KVCache([k[s:e] for k in kv[0]], [v[s:e] for v in kv[1]], e - s)
        self._timed(t0, batch, with_signals=True)
        return out

    def suffix_nll(self, cache: KVCache, prefix_len: int, suffix: list[int]) -> np.ndarray:
        """Token NLL of `suffix` read after the first `prefix_len` tokens of a cached sequence (one job; the
        reference of the packed `suffix.suffix_nll_batch`): see `suffix.suffix_nll`."""
        from masprism_batch.model.suffix import suffix_nll  # lazy: suffix's jobs hold this module's KVCache

        return suffix_nll(self, cache, prefix_len, suffix)

    def prefill(self, seqs: list[list[int]]) -> torch.Tensor:
        """Plain packed forward, no signals (for benchmarks): the final normed hidden states [T, H]."""
        batch = self._packed_batch(seqs)
        t0 = time.perf_counter()
        with torch.inference_mode():
            hidden, _ = self._run(batch)
        self._timed(t0, batch, with_signals=False)
        return hidden

    def forward_logits(self, input_ids: list[int]) -> torch.Tensor:
        """Full fp32 logits [L, V] of one sequence. Forms L x V: for parity tests only."""
        hidden = self.prefill([list(input_ids)])
        return hidden.float() @ self.weights.lm_head.float().T

    # ---- internals -----------------------------------------------------------------------------------
    def _packed_batch(self, seqs: list[list[int]]) -> _PackedBatch:
        if not seqs:
            raise ValueError("no sequences to prefill")
        lengths = [len(s) for s in seqs]
        for b, n in enumerate(lengths):
            if n == 0 or n > self.max_context:
                raise ValueError(f"sequence {b} has {n} tokens; need 1..{self.max_context} (model context)")
        host_ids = np.fromiter((t for s in seqs for t in s), dtype=np.int64, count=sum(lengths))
        if int(host_ids.min()) < 0 or int(host_ids.max()) >= self.arch.vocab_size:
            raise ValueError(f"token id out of range [0, {self.arch.vocab_size})")
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        starts = np.repeat(np.asarray(bounds[:-1], dtype=np.int64), lengths)
        positions = torch.from_numpy(np.arange(bounds[-1], dtype=np.int64) - starts)
        return _PackedBatch(ids=torch.from_numpy(host_ids).to(self.device), host_ids=host_ids,
                     positions=positions.to(self.device),
                     cu_seqlens=torch.tensor(bounds, dtype=torch.int32, device=self.device),
                     bounds=bounds, max_seqlen=max(lengths))

    def _run(self, batch: _PackedBatch, step_ids=None, n_steps=None, per_head: bool = False, kv=None):
        """Decoder stack; returns final normed hidden [T, H] and the step mass (or None): summed over
        instrumented layers, or with per_head a list of per-layer [B, Hq, N, N]. kv: ([], []) to fill with
        every layer's K/V."""
        a, w = self.arch, self.weights
        cos, sin = rope_cos_sin(batch.positions, self._inv_freq, self._rope_scale, self.dtype)
        h = F.embedding(batch.ids, w.embed)
        mass_sum = None
        for i, lw in enumerate(w.layers):
            x = rms_norm(h, lw.input_norm, a.rms_norm_eps)
            q, k, v = qkv_proj(x, lw, a, cos, sin)
            if kv is not None:
                kv[0].append(k.contiguous())
                kv[1].append(v.contiguous())
            if step_ids is not None and i in self._instrumented:
                # q/k/v stay strided views of the qkv projection: every backend reads them as they are (the
                # Triton kernels take strides, the C++ op permutes q once, the reference views them), so no
                # per-layer copy
                o, _lse, mass = sig.step_attention(q, k, v, batch.cu_seqlens, step_ids, n_steps, a.scale,
                                                   backend=self.signals_cfg.backend,
                                                   block=self.signals_cfg.attn_block, per_head=per_head)
                if per_head:
                    mass_sum = (mass_sum or []) + [mass.float()]
                else:
                    mass_sum = mass.float() if mass_sum is None else mass_sum + mass.float()
            else:
                o = causal_attention(q, k, v, batch.cu_seqlens, batch.bounds, batch.max_seqlen, a.scale)
            h.add_(F.linear(o.reshape(o.shape[0], -1), lw.o_w, lw.o_b))  # h is ours: residual in place
            h.add_(mlp(rms_norm(h, lw.post_norm, a.rms_norm_eps), lw))
        return rms_norm(h, w.final_norm, a.rms_norm_eps), mass_sum

    @staticmethod
    def _unread(batch: _PackedBatch, sid_t: torch.Tensor, nll_from: list[int] | None, steps_only: bool):
        """[T] bool: tokens whose NLL nobody reads (see signals), or None when every token's is read."""
        if nll_from is None and not steps_only:
            return None
        unread = sid_t < 0 if steps_only else torch.zeros(len(sid_t), dtype=torch.bool)
        if nll_from is not None:
            if len(nll_from) != len(batch.bounds) - 1:
                raise ValueError(f"{len(batch.bounds) - 1} sequences but {len(nll_from)} nll_from")
            lengths = torch.tensor(np.diff(batch.bounds))
            unread |= batch.positions.cpu() < torch.repeat_interleave(torch.tensor(nll_from), lengths)
        return unread.to(batch.ids.device)

    def _token_nll(self, hidden: torch.Tensor, batch: _PackedBatch, unread: torch.Tensor | None = None) -> torch.Tensor:
        # position t predicts token t+1 of the same sequence; the last token of each sequence predicts nothing.
        # Built on the host from the batch's host ids (numpy: no device scatter ops, one transfer).
        targets = np.full(batch.bounds[-1], -100, dtype=np.int64)
        targets[:-1] = batch.host_ids[1:]
        targets[np.asarray(batch.bounds[1:], dtype=np.int64) - 1] = -100
        if unread is not None:
            targets[:-1][unread[1:].cpu().numpy()] = -100
        targets = torch.from_numpy(targets).to(batch.ids.device)
        return sig.token_nll(hidden, self.weights.lm_head, targets, backend=self.signals_cfg.backend,
                             chunk=self.signals_cfg.nll_chunk)

    def _split(self, batch, nll, mass, sid_t, n_steps, per_head: bool = False) -> list[SeqSignals]:
        nll = nll.float().cpu().numpy()
        heads = None
        if per_head and mass is not None:
            heads = torch.stack([m.cpu() for m in mass], dim=1)  # [B, L_instr, Hq, N, N]
            mass = heads.mean(dim=2).sum(dim=1)
        mass = mass.cpu() / len(self.instrument_layers) if mass is not None else None
        out = []
        sid_all = sid_t.numpy()
        mass_np = mass.numpy() if mass is not None else None
        heads_np = heads.numpy() if heads is not None else None
        for b, (s, e) in enumerate(zip(batch.bounds[:-1], batch.bounds[1:], strict=True)):
            tok = np.full(e - s, np.nan, dtype=np.float32)
            tok[1:] = nll[s : e - 1]
            n = n_steps[b]
            # host bookkeeping in numpy (no aten op per sequence); fp32 division as before
            sid = sid_all[s:e]
            rows = np.maximum(np.bincount(sid[sid >= 0], minlength=n).astype(np.float32), np.float32(1.0))[:, None]
            A = mass_np[b, :n, :n] / rows if n else np.zeros((0, 0), dtype=np.float32)
            Ah = heads_np[b, :, :, :n, :n] / rows if heads_np is not None else None
            out.append(SeqSignals(token_nll=tok, step_attn=A.astype(np.float32, copy=False), n_tokens=e - s,
                                  step_attn_heads=None if Ah is None else Ah.astype(np.float32, copy=False)))
        return out

    def _timed(self, t0: float, batch: _PackedBatch, with_signals: bool) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.last_timing = PrefillTiming(sequences=len(batch.bounds) - 1, tokens=batch.bounds[-1],
                                         seconds=time.perf_counter() - t0, with_signals=with_signals)
        log.debug("prefill %d seqs %d tokens in %.3fs (signals=%s)", self.last_timing.sequences,
                  self.last_timing.tokens, self.last_timing.seconds, with_signals)
