"""The CUDA code path of one packed forward, run on CPU and recorded (the census of tests/signals/test_census.py).

`cuda_path(monkeypatch)` forces every CUDA-only branch on CPU tensors: the Triton signals backend (allowed on CPU
under TRITON_INTERPRET=1), the fused elementwise kernels, the Triton varlen forward of the plain layers; every
Triton launch is replaced by a recorder that runs nothing (the kernels' numerics are tested elsewhere: this
counts what the host does around them). The registered custom ops are called through their Python bodies, so
the recorder sees the ops inside them (block tables, plan, R buffer, NLL merge) as a CUDA run would issue them.

`Census` records, with the innermost project source line of each:
- host reads: the Tensor methods that copy device data to the host or wait for it (.cpu, .tolist, .item,
  bool/int/float/index of a tensor, .nonzero) and torch.cuda.synchronize; aten ops that sync on CUDA
  (_local_scalar_dense, nonzero, masked_select, repeat_interleave without output_size, indexing with a bool mask)
  unless one of those methods issued them;
- glue ops: aten ops that only move or fill data (copies, gathers, scatters, concatenations, fills), a `to` or
  `contiguous` only when it returned new memory.
Recording stops when the forward's results are on the host (`model.pack.fetch` returned): what runs after it
reads host memory only, and on CPU a host tensor and a "device" tensor cannot be told apart.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = str(Path(__file__).resolve().parents[2]) + "/"
HERE = str(Path(__file__).resolve())
READ_METHODS = ("cpu", "tolist", "item", "__bool__", "__int__", "__float__", "__index__", "nonzero")
SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "is_nonzero")
GLUE_OPS = ("copy_", "clone", "index", "index_put_", "index_put", "index_select", "index_copy_", "index_copy",
            "index_add_", "gather", "scatter", "scatter_", "repeat_interleave", "cat", "stack", "_to_copy",
            "zeros", "zero_", "fill_", "full", "full_like", "zeros_like", "new_zeros", "new_full", "masked_fill_",
            "masked_scatter_", "nonzero", "masked_select", "where")
COPY_IF_NEW = ("to", "contiguous", "reshape")  # glue only when the result is new memory


def site() -> str:
    """file:line of the innermost frame in the project (not this file)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith(ROOT) and name != HERE and "/tests/" not in name[len(ROOT) - 1:]:
            return f"{name[len(ROOT):]}:{f.f_lineno}"
        f = f.f_back
    return "?"


class Census(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.on = False
        self.in_read = 0
        self.reads: collections.Counter = collections.Counter()  # (what, site) -> n
        self.glue: collections.Counter = collections.Counter()
        self.launches: collections.Counter = collections.Counter()

    @property
    def n_reads(self) -> int:
        return sum(self.reads.values())

    @property
    def n_glue(self) -> int:
        return sum(self.glue.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not self.on:
            return out
        name = func.overloadpacket.__name__
        if name in SYNC_OPS and not self.in_read:
            self.reads[(f"aten.{name}", site())] += 1
        if name == "repeat_interleave" and isinstance(args[0], torch.Tensor) and len(args) > 1 \
                and isinstance(args[1], torch.Tensor) and kwargs.get("output_size") is None:
            self.reads[("aten.repeat_interleave without output_size", site())] += 1
        if name in ("index", "index_put_", "index_put") and len(args) > 1 and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ())):
            self.reads[(f"aten.{name} with a bool mask", site())] += 1
        if name in GLUE_OPS or (name in COPY_IF_NEW and isinstance(out, torch.Tensor) and isinstance(args[0], torch.Tensor)
                                and out.untyped_storage().data_ptr() != args[0].untyped_storage().data_ptr()):
            self.glue[(name, site())] += 1
        return out

    def report(self) -> str:
        lines = ["host reads:"] + [f"  {n} x {k} at {s}" for (k, s), n in sorted(self.reads.items(), key=str)]
        lines += ["glue ops:"] + [f"  {n} x {k} at {s}" for (k, s), n in sorted(self.glue.items(), key=str)]
        lines += ["Triton launches:"] + [f"  {n} x {k}" for k, n in sorted(self.launches.items())]
        return "\n".join(lines)


class _NoLaunch:
    """A @triton.jit kernel's stand-in: kernel[grid](...) records the launch and runs nothing."""

    def __init__(self, census: Census, name: str):
        self.census, self.name = census, name

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            if self.census.on:
                self.census.launches[self.name] += 1
        return launch


def cuda_path(monkeypatch, census: Census) -> None:
    """Force the CUDA code path on CPU (see the module docstring) and hook the census into it."""
    import masprism_batch.kernels.elementwise as ew
    import masprism_batch.kernels.step_attention as sa
    import masprism_batch.kernels.step_mass as sm
    import masprism_batch.kernels.step_plan as sp
    import masprism_batch.kernels.token_nll as tn

    import masprism_batch.signals.triton as st
    from masprism_batch.model import attention, layers, pack

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # resolve_backend takes 'triton' for CPU tensors
    for mod, names in ((sa, ["_attn_fwd"]), (sm, ["_step_mass_dot", "_step_mass"]), (sp, ["_sum_step_rows"]),
                       (tn, ["_nll_partial"]), (ew, ["_rms_norm", "_qk_norm_rope", "_silu_mul"])):
        for n in names:
            monkeypatch.setattr(mod, n, _NoLaunch(census, n))
    monkeypatch.setattr(layers, "_fused", lambda x, head_dim=None: ew if ew.supports(x, head_dim) else None)
    monkeypatch.setattr(attention, "_triton_varlen", lambda q: sa.attention_lse)
    # the custom ops' bodies, called directly: the dispatch mode sees the ops inside them, as on CUDA
    monkeypatch.setattr(st, "_step_attention_op", st._step_attention_op._init_fn)
    monkeypatch.setattr(st, "_token_nll_op", st._token_nll_op._init_fn)
    monkeypatch.setattr(torch.cuda, "synchronize", _counted(census, "torch.cuda.synchronize", torch.cuda.synchronize))
    for name in READ_METHODS:
        monkeypatch.setattr(torch.Tensor, name, _counted(census, f".{name}()", getattr(torch.Tensor, name)))
    fetch = pack.fetch

    def fetch_then_stop(*a, **k):
        try:
            return fetch(*a, **k)
        finally:
            census.on = False
    monkeypatch.setattr(pack, "fetch", fetch_then_stop)


def _counted(census: Census, what: str, fn):
    def read(*args, **kwargs):
        if census.on and not census.in_read:
            census.reads[(what, site())] += 1
        census.in_read += 1
        try:
            return fn(*args, **kwargs)
        finally:
            census.in_read -= 1
    return read
