"""Runs elementwise_cases.py in a subprocess with TRITON_INTERPRET=1 on CPU (it must be set before triton is
imported, and torch/transformers import triton early in this process); compiled on a CUDA machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.kernel  # the kernels' tests (Triton interpreter, AOT compile, GPU runbook): -m 'not kernel' skips


def test_fused_elementwise_kernels_match_torch_and_oracle():
    pytest.importorskip("triton")
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    here = Path(__file__).parent
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(here / "elementwise_cases.py"), "-q", "-x", "-p", "no:cacheprovider",
         "-o", "addopts=", "--rootdir", str(here)],
        cwd=here, env=env, capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"elementwise cases failed (rc={proc.returncode}):\n{tail}"
    assert " passed" in tail and "skipped" not in tail, f"elementwise cases did not all run:\n{tail}"
