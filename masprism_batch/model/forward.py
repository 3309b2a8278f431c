"""PrefillModel: one packed varlen prefill forward that yields the MASPrism signals.

Several sequences are concatenated into one token-major batch (cu_seqlens, positions restart at 0 per
sequence, no padding). Instrumented layers run their attention through masprism_batch.signals.step_attention,
whose output `o` IS the layer's attention output, so the signal costs no second forward. The final normed
hidden states go to signals.token_nll with the LM-head weight: logits are only ever formed in chunks.

Re-reading a suffix after a cached prefix (counterfactuals) is `model/suffix.py`.

Sliding-window layers (Gemma 3) are never instrumented (arch.instrument_layers): they run the plain windowed
attention, and the signal kernels see full-attention layers only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from masprism_batch import signals as sig
from masprism_batch.model import pack
from masprism_batch.model.arch import FULL, SLIDING, ArchSpec, instrument_layers, rope_inv_freq
from masprism_batch.model.attention import causal_attention
from masprism_batch.model.layers import (
    Weights,
    attn_residual,
    embed,
    mlp_residual,
    qkv_proj,
    rms_norm,
    rope_cos_sin,
)
from masprism_batch.model.pack import PrefillTiming  # noqa: F401  (re-exported: model.PrefillTiming)

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


class PrefillModel:
    """Prefill-only decoder for the Llama / Qwen2 / Qwen3 / Gemma 3 families (see arch.py)."""

    def __init__(self, *, model_id: str, arch: ArchSpec, weights: Weights, hf_config, tokenizer,
                 device: torch.device, dtype: torch.dtype, signals_cfg, fingerprint: str = ""):
        self.model_id, self.arch, self.weights, self.tokenizer = model_id, arch, weights, tokenizer
        self.device, self.dtype, self.signals_cfg, self.fingerprint = device, dtype, signals_cfg, fingerprint
        self.hf_config = hf_config
        # one RoPE table per kind of layer: Gemma 3's sliding layers have their own base (rope_local_base_freq)
        kinds = (FULL, SLIDING) if arch.windows else (None,)
        self._rope = {}
        for kind in kinds:
            inv_freq, scale = rope_inv_freq(hf_config, arch, kind)
            self._rope[kind] = (inv_freq.to(device), scale)
        self._layer_rope = [(SLIDING if arch.window(i) else FULL) if arch.windows else None
                            for i in range(arch.num_layers)]
        self.instrument_layers = instrument_layers(arch.num_layers, signals_cfg.layer_fraction, arch.windows)
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
        # Everything the host knows (bounds, step ids and counts, NLL rows and targets, the batch checks) is built
        # here from host arrays and goes host->device without blocking; the layer stack reads no device tensor and
        # the results come back in one transfer (docs/gpu.md "A sync-free packed forward").
        batch = pack.packed_batch(seqs, self.arch.vocab_size, self.max_context, self.device)
        sid_h, n_steps = pack.host_steps(seqs, step_ids, n_steps)
        ns_h = np.asarray(n_steps, dtype=np.int32)
        sid_d, ns_d = sig.to_device(sid_h, self.device), sig.to_device(ns_h, self.device)
        sig.bind_pack(batch.cu_seqlens, sid_d, ns_d, (np.asarray(batch.bounds, dtype=np.int32), sid_h, ns_h),
                      backend=self.signals_cfg.backend, head_dim=self.arch.head_dim, dtype=self.dtype)
        rows, targets = pack.nll_rows(batch, sid_h, nll_from, nll_steps_only)
        rows_d = None if rows is None else sig.to_device(rows, self.device)
        targets_d = sig.to_device(targets, self.device)
        clock = pack.Clock(self.device)
        kv = ([], []) if keep_kv else None
        with torch.inference_mode():
            hidden, mass = self._run(batch, sid_d, ns_d, per_head, kv)
            nll = sig.token_nll(hidden if rows_d is None else hidden.index_select(0, rows_d), self.weights.lm_head,
                                targets_d, backend=self.signals_cfg.backend, chunk=self.signals_cfg.nll_chunk,
                                host_targets=targets)
            clock.stop()
            nll_h, mass_h = pack.fetch(nll, mass)
        if rows is not None:
            full = np.full(batch.bounds[-1], np.nan, dtype=np.float32)
            full[rows] = nll_h
            nll_h = full
        out = self._split(batch, nll_h, mass_h, sid_h, n_steps, per_head)
        if kv is not None:
            for b, (s, e) in enumerate(zip(batch.bounds[:-1], batch.bounds[1:], strict=True)):
                out[b].kv = KVCache([k[s:e] for k in kv[0]], [v[s:e] for v in kv[1]], e - s)
        self._timed(clock, batch, with_signals=True)
        return out

    def suffix_nll(self, cache: KVCache, prefix_len: int, suffix: list[int]) -> np.ndarray:
        """Token NLL of `suffix` read after the first `prefix_len` tokens of a cached sequence (one job; the
        reference of the packed `suffix.suffix_nll_batch`): see `suffix.suffix_nll`."""
        from masprism_batch.model.suffix import suffix_nll  # lazy: suffix's jobs hold this module's KVCache

        return suffix_nll(self, cache, prefix_len, suffix)

    def prefill(self, seqs: list[list[int]]) -> torch.Tensor:
        """Plain packed forward, no signals (for benchmarks): the final normed hidden states [T, H]."""
        batch = pack.packed_batch(seqs, self.arch.vocab_size, self.max_context, self.device)
        clock = pack.Clock(self.device)
        with torch.inference_mode():
            hidden, _ = self._run(batch)
        self._timed(clock.stop(), batch, with_signals=False)
        return hidden

    def prefill_nll(self, seqs: list[list[int]]) -> list[np.ndarray]:
        """Plain packed forward plus every token's NLL, no step signals (for benchmarks): the least a method that
        reads per-token NLL must compute, the fair baseline of `signals`. Same host side as `signals` (one upload,
        one transfer back); per sequence float32 [L], entry 0 = nan."""
        batch = pack.packed_batch(seqs, self.arch.vocab_size, self.max_context, self.device)
        targets = pack.next_token_targets(batch)
        targets_d = sig.to_device(targets, self.device)
        clock = pack.Clock(self.device)
        with torch.inference_mode():
            hidden, _ = self._run(batch)
            nll = sig.token_nll(hidden, self.weights.lm_head, targets_d, backend=self.signals_cfg.backend,
                                chunk=self.signals_cfg.nll_chunk, host_targets=targets)
            clock.stop()
            nll_h, _ = pack.fetch(nll, None)
        self._timed(clock, batch, with_signals=False)
        return [np.concatenate([[np.nan], nll_h[s : e - 1]]).astype(np.float32)
                for s, e in zip(batch.bounds[:-1], batch.bounds[1:], strict=True)]

    def forward_logits(self, input_ids: list[int]) -> torch.Tensor:
        """Full fp32 logits [L, V] of one sequence. Forms L x V: for parity tests only."""
        hidden = self.prefill([list(input_ids)])
        return hidden.float() @ self.weights.lm_head.float().T

    # ---- internals -----------------------------------------------------------------------------------
    def rope_tables(self, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(cos, sin) of each layer for these positions, each table computed once (model/suffix.py too)."""
        tables = {kind: rope_cos_sin(positions, inv, scale, self.dtype) for kind, (inv, scale) in self._rope.items()}
        return [tables[kind] for kind in self._layer_rope]

    def _run(self, batch: pack.PackedBatch, step_ids=None, n_steps=None, per_head: bool = False, kv=None):
        """Decoder stack; returns final normed hidden [T, H] and the step mass (or None): summed over
        instrumented layers, or with per_head a list of per-layer [B, Hq, N, N]. kv: ([], []) to fill with
        every layer's K/V."""
        a, w = self.arch, self.weights
        rope = self.rope_tables(batch.positions)
        h = embed(batch.ids, w, a)
        mass_sum = None
        for i, lw in enumerate(w.layers):
            x = rms_norm(h, lw.input_norm, a.rms_norm_eps)
            q, k, v = qkv_proj(x, lw, a, *rope[i])
            if kv is not None:  # one copy of K and V, not one each (they are views of the projection)
                k_and_v = torch.stack((k, v), dim=1)
                kv[0].append(k_and_v[:, 0])
                kv[1].append(k_and_v[:, 1])
            if step_ids is not None and i in self._instrumented:
                # q/k/v stay strided views of the qkv projection: every backend reads them as they are (the
                # Triton kernels take strides, the C++ op permutes q once, the reference views them), so no
                # per-layer copy
                o, _lse, mass = sig.step_attention(q, k, v, batch.cu_seqlens, step_ids, n_steps, a.scale,
                                                   backend=self.signals_cfg.backend,
                                                   block=self.signals_cfg.attn_block, per_head=per_head)
                if per_head:
                    mass_sum = (mass_sum or []) + [mass]
                else:  # fp32 and fresh from the op: summed in place
                    mass_sum = mass if mass_sum is None else mass_sum.add_(mass)
            else:
                o = causal_attention(q, k, v, batch.cu_seqlens, batch.bounds, batch.max_seqlen, a.scale,
                                     window=a.window(i))
            attn_residual(h, o, lw, a)  # h is ours: residuals in place
            mlp_residual(h, lw, a)
        return rms_norm(h, w.final_norm, a.rms_norm_eps), mass_sum

    def _split(self, batch, nll: np.ndarray, mass, sid_all: np.ndarray, n_steps, per_head: bool = False) -> list[SeqSignals]:
        heads = None
        if per_head and mass is not None:
            heads = mass  # [B, L_instr, Hq, N, N]
            mass = heads.mean(dim=2).sum(dim=1)
        mass = mass / len(self.instrument_layers) if mass is not None else None
        out = []
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

    def _timed(self, clock: pack.Clock, batch: pack.PackedBatch, with_signals: bool) -> None:
        self.last_timing = PrefillTiming(len(batch.bounds) - 1, batch.bounds[-1], with_signals, clock)
        log.debug("prefill %d seqs %d tokens (signals=%s)", self.last_timing.sequences, self.last_timing.tokens,
                  with_signals)

