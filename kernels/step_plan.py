"""Host-side plan of one pack for pass 2 of step_attention, and the per-query-step reduction kernel.

`Plan` (built once per forward, cached on tensor identity) holds the sequence bounds, the step counts, the widest
step span of a key tile (which pass-2 kernel runs, kernels/step_mass.py) and the pack's step-token lists: token
indices sorted by (sequence, query step) with segment offsets. The model's forward binds it from the host arrays
it packed (`bind`: no host sync, the lists go host->device without blocking); a direct caller of the kernels
gets it from the device tensors, one sync.

`_sum_step_rows` turns R[hb, t, j] (per token, per head block) into mass[b, (h,) i, j] in ONE launch: a program
per (sequence x query step, column block, output head) sums the R rows of its step's tokens (BLOCK_T tokens
per iteration, the head blocks unrolled) in a fixed order and writes its row of the mass, padding included.
It replaces a per-sequence one-hot matmul and copy per instrumented layer (host launches
and glue that scaled with the pack's sequence count) and the separate head-block sum. Deterministic: no
atomics, fixed summation order.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

MIN_NS = 16  # tl.dot needs N >= 16


@triton.jit
def _sum_step_rows(R, TOK, OFF, OUT, n_r, sr_h, so_b, so_h, div,
                   NHB: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr):
    seg = tl.program_id(0)  # b * n_r + i
    cb = tl.program_id(1)
    ho = tl.program_id(2)  # output head (per head), 0 for the head mean
    b = seg // n_r
    i = seg % n_r
    a = tl.load(OFF + seg)
    e = tl.load(OFF + seg + 1)
    cols = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < n_r
    acc = tl.zeros([BLOCK_C], tl.float32)
    for i0 in range(a, e, BLOCK_T):
        idx = i0 + tl.arange(0, BLOCK_T)
        t_ok = idx < e
        tok = tl.load(TOK + idx, mask=t_ok, other=0).to(tl.int64)
        ok = t_ok[:, None] & col_ok[None, :]
        ptr = R + ho * NHB * sr_h + tok[:, None] * n_r + cols[None, :]  # one pointer tile, a scalar step per head block
        for hb in tl.static_range(NHB):
            acc += tl.sum(tl.load(ptr + hb * sr_h, mask=ok, other=0.0), 0)
    tl.store(OUT + b * so_b + ho * so_h + i * n_r + cols, acc / div, mask=col_ok)


def _version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:  # inference tensors have no version counter
        return None


def _blocking_upload(a: np.ndarray, device) -> torch.Tensor:
    return torch.from_numpy(a).to(device)


class Plan:
    """Host-side view of one pack (see the module docstring); reused while the same tensors are passed (one
    forward). host: (bounds, step ids, step counts) as host arrays, the same data as the three tensors; without
    it they are read from the tensors (one sync). upload: host array -> device tensor (the caller's pinned,
    non-blocking copy)."""

    _last: Plan | None = None

    def __init__(self, cu, step_ids, n_steps, device, host=None, upload=_blocking_upload):
        self.keys = (cu, step_ids, n_steps)
        self.device = device
        self.versions = tuple(_version(t) for t in self.keys)
        if host is None:
            host = (cu.tolist(), step_ids.cpu().numpy(), n_steps.tolist())
        bounds, host_steps, n_list = host
        self.bounds = [int(b) for b in bounds]
        self.n_list = [int(n) for n in n_list]
        self.n_max = max(self.n_list, default=0)
        self.steps = step_ids.to(device=device, dtype=torch.int32).contiguous()
        self.upload = upload
        self._host_steps = np.asarray(host_steps).astype(np.int64)
        self._spans: dict[int, int] = {}
        # step-token lists: tokens of query step i of sequence b are tokens[off[b*n_max+i] : off[b*n_max+i+1]]
        seg = np.full(len(self._host_steps), -1, dtype=np.int64)
        for b, (s, e) in enumerate(zip(self.bounds[:-1], self.bounds[1:], strict=True)):
            sid = self._host_steps[s:e]
            seg[s:e] = np.where(sid >= 0, b * self.n_max + sid, -1)
        inside = np.flatnonzero(seg >= 0)
        order = inside[np.argsort(seg[inside], kind="stable")]
        counts = np.bincount(seg[inside], minlength=len(self.n_list) * self.n_max)
        off = np.concatenate([[0], np.cumsum(counts)])
        self.tokens = upload(order.astype(np.int32), device)
        self.offsets = upload(off.astype(np.int32), device)

    def block_table(self, block_m: int):
        """(blk_seq, blk_start, n_programs) of query blocks of block_m rows, exact, from the host bounds."""
        lens = np.diff(np.asarray(self.bounds, dtype=np.int64))
        nblk = -(-lens // block_m)
        seq = np.repeat(np.arange(len(lens), dtype=np.int32), nblk)
        start = (np.arange(len(seq), dtype=np.int64) - np.repeat(np.cumsum(nblk) - nblk, nblk)) * block_m
        return self.upload(seq, self.device), self.upload(start.astype(np.int32), self.device), len(seq)

    def max_span(self, block_n: int) -> int:
        """Widest (max - min + 1) step id range over the key tiles of width block_n (tiles start at each
        sequence's first token, as in the kernels); 0 when no tile holds a step token."""
        if block_n not in self._spans:
            worst = 0
            for s, e in zip(self.bounds[:-1], self.bounds[1:], strict=True):
                if e == s:
                    continue
                ids = np.full(-(-(e - s) // block_n) * block_n, -1, dtype=np.int64)
                ids[: e - s] = self._host_steps[s:e]
                tiles = ids.reshape(-1, block_n)
                has = (tiles >= 0).any(1)
                if has.any():
                    lo = np.where(tiles >= 0, tiles, np.iinfo(np.int64).max).min(1)
                    worst = max(worst, int((tiles.max(1) - lo + 1)[has].max()))
            self._spans[block_n] = worst
        return self._spans[block_n]

    def matches(self, cu, step_ids, n_steps, device) -> bool:
        new = (cu, step_ids, n_steps)
        return (self.device == device and all(a is b for a, b in zip(self.keys, new, strict=True))
                and all(v == _version(t) for v, t in zip(self.versions, new, strict=True)))

    @classmethod
    def get(cls, cu, step_ids, n_steps, device) -> Plan:
        last = cls._last
        if last is not None and last.matches(cu, step_ids, n_steps, device):
            return last
        cls._last = plan = cls(cu, step_ids, n_steps, device)
        return plan

    @classmethod
    def bind(cls, cu, step_ids, n_steps, device, host, upload) -> Plan:
        """The plan of the pack about to run, from the host arrays it was packed from: the forward's layers then
        find it (`get`) without reading a device tensor."""
        cls._last = plan = cls(cu, step_ids, n_steps, device, host=host, upload=upload)
        return plan


def window_steps(span: int, limit: int) -> int:
    """NS of the dot kernel for a pack whose widest key tile spans `span` step ids, or 0 (loop kernel)."""
    if span > limit:
        return 0
    return max(MIN_NS, triton.next_power_of_2(max(span, 1)))


def reduce_config(n_max: int) -> dict:
    """Column block (the whole row up to 128 columns), tokens per iteration, warps: `_sum_step_rows`. At most
    1,024 elements per loaded tile: the head blocks' loads are unrolled and all in flight, and 32 x 128 tiles
    x 8 head blocks spilled 48 B on sm_90 (AOT)."""
    block_c = min(128, max(16, triton.next_power_of_2(n_max)))
    return dict(BLOCK_C=block_c, BLOCK_T=min(32, max(8, 1024 // block_c)), num_warps=4)


def sum_step_rows(plan: Plan, r: torch.Tensor, mass: torch.Tensor, per_head: bool, n_heads: int) -> torch.Tensor:
    """mass[b, i, j] = sum over tokens t of step i of sequence b of sum_hb r[hb, t, j] / n_heads, or with
    per_head mass[b, h, i, j] = sum_t r[h, t, j]; every element of `mass` is written (padding with 0)."""
    B, n_max = len(plan.n_list), plan.n_max
    cfg = reduce_config(n_max)
    block_c = cfg.pop("BLOCK_C")
    n_out = r.shape[0] if per_head else 1
    nhb = 1 if per_head else r.shape[0]
    so_h = n_max * n_max if per_head else 0
    _sum_step_rows[(B * n_max, triton.cdiv(n_max, block_c), n_out)](
        r, plan.tokens, plan.offsets, mass, n_max, r.stride(0), mass.stride(0), so_h,
        1.0 if per_head else float(n_heads), NHB=nhb, BLOCK_C=block_c, **cfg)
    return mass
