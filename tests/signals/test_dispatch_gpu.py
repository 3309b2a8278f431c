"""Backend dispatch as a CUDA machine would see it, without one: `auto` must never pick a Triton kernel that
refuses the inputs (tiny-random has head_dim 16; every trace would become prefill_failed on a GPU)."""

from __future__ import annotations

import pytest
import torch

from masprism_batch import signals
from masprism_batch.signals import backends, dispatch

pytestmark = pytest.mark.kernel  # the kernels' tests (Triton interpreter, AOT compile, GPU runbook): -m 'not kernel' skips

CUDA = torch.device("cuda")  # a device object only: nothing is allocated on it


@pytest.fixture
def triton_ok(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setattr(backends, "triton_available", lambda: None)


@pytest.mark.parametrize("head_dim,dtype,want", [
    (16, torch.float32, "torch"),  # tiny-random
    (16, torch.bfloat16, "torch"),
    (96, torch.bfloat16, "torch"),  # not a kernel head dim
    (64, torch.bfloat16, "triton"),  # SmolLM2-135M
    (128, torch.bfloat16, "triton"),  # Qwen3-0.6B
    (128, torch.float16, "triton"),
    (128, torch.float32, "triton"),
    (128, torch.float64, "torch"),  # fp64 oracle inputs
])
def test_auto_on_cuda_picks_a_backend_that_takes_the_inputs(triton_ok, head_dim, dtype, want):
    assert signals.resolve_backend("auto", CUDA, head_dim=head_dim, dtype=dtype) == want


def test_auto_on_cuda_nll_any_hidden_size(triton_ok):
    assert signals.resolve_backend("auto", CUDA, dtype=torch.bfloat16) == "triton"
    assert signals.resolve_backend("auto", CUDA, dtype=torch.float64) == "torch"


def test_explicit_triton_with_unsupported_head_dim_raises(triton_ok):
    with pytest.raises(RuntimeError, match="head_dim"):
        signals.resolve_backend("triton", CUDA, head_dim=16, dtype=torch.bfloat16)


def test_dispatcher_passes_the_inputs_head_dim_and_dtype(monkeypatch):
    """step_attention / token_nll hand q's head dim and dtype to the resolver (CPU tensors, torch backend)."""
    seen = []
    real = signals.resolve_backend

    def spy(backend, device, head_dim=None, dtype=None):
        seen.append((head_dim, dtype))
        return real(backend, device, head_dim=head_dim, dtype=dtype)

    monkeypatch.setattr(dispatch, "resolve_backend", spy)
    T, d = 23, 16
    q, k = torch.randn(T, 4, d), torch.randn(T, 2, d)
    cu = torch.tensor([0, 17, 23], dtype=torch.int32)
    sid = torch.tensor([-1] + [0] * 8 + [1] * 8 + [0] * 3 + [1] * 3, dtype=torch.int32)
    signals.step_attention(q, k, k, cu, sid, torch.tensor([2, 2], dtype=torch.int32), d ** -0.5, backend="torch")
    signals.token_nll(torch.randn(T, 8), torch.randn(11, 8), torch.randint(0, 11, (T,)), backend="torch")
    assert seen == [(16, torch.float32), (None, torch.float32)]


def test_pack_data_checks_run_once_per_pack_and_again_after_a_change():
    """The data checks (host syncs on CUDA) are skipped for the layers after the first of a forward (same
    tensors), and run again when a tensor is new or was changed in place."""
    T, d = 23, 16
    q, k = torch.randn(T, 4, d), torch.randn(T, 2, d)
    cu = torch.tensor([0, 17, 23], dtype=torch.int32)
    sid = torch.tensor([-1] + [0] * 8 + [1] * 8 + [0] * 3 + [1] * 3, dtype=torch.int32)
    ns = torch.tensor([2, 2], dtype=torch.int32)
    signals.step_attention(q, k, k, cu, sid, ns, d ** -0.5, backend="torch")
    assert signals._already_checked((cu, sid, ns), tuple(t._version for t in (cu, sid, ns)), T)
    sid[3] = 5  # in place: >= n_steps
    with pytest.raises(ValueError, match="n_steps"):
        signals.step_attention(q, k, k, cu, sid, ns, d ** -0.5, backend="torch")
    with pytest.raises(ValueError, match="prefix sums"):
        signals.step_attention(q, k, k, torch.tensor([0, 17, 22], dtype=torch.int32), sid, ns, d ** -0.5,
                               backend="torch")


def test_backend_resolution_on_cpu(monkeypatch):
    assert signals.resolve_backend("auto", "cpu") == ("cpp" if signals.cpp_available() is None else "torch")
    assert signals.resolve_backend("torch", "cpu") == "torch"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="triton"):  # explicit backend never silently falls back
        signals.resolve_backend("triton", "cpu")
