"""Runs triton_cases.py in a subprocess: TRITON_INTERPRET=1 on CPU must be set before triton is
imported, and by the time this module runs torch/transformers have imported it in this process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from masprism_batch import signals


def test_triton_kernels_match_oracle():
    if (why := signals.triton_available()) is not None:
        pytest.skip(f"triton cannot run here: {why}")
    env = dict(os.environ)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    here = Path(__file__).parent
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(here / "triton_cases.py"), "-q", "-x", "-p", "no:cacheprovider",
         "-o", "addopts=", "--rootdir", str(here)],
        cwd=here, env=env, capture_output=True, text=True, timeout=600)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"triton cases failed (rc={proc.returncode}):\n{tail}"
    assert " passed" in tail and "skipped" not in tail, f"triton cases did not all run:\n{tail}"
