"""The GPU runbook's dry run works on this CPU-only machine and names every step it would run on a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kernel  # the kernels' tests (Triton interpreter, AOT compile, GPU runbook): -m 'not kernel' skips

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_smoke_dry_run_names_the_plan(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_smoke.sh"), "--dry-run", "--quick", "--out", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps = dict(line.split("\t")[:2] for line in (tmp_path / "steps.tsv").read_text().splitlines())
    assert set(steps) == {"env", "aot", "triton", "kernels_bf16", "kernels_fp32", "prefill", "e2e"}
    assert all(v in ("dry-run", "skipped") for v in steps.values()), steps
    for needle in ("tests/kernels", "tests/signals/test_step_attention.py", "bench_step_attention.py --gpu --dtypes bf16",
                   "bench_token_nll.py --gpu --dtypes fp32", "nothing above was executed on a GPU"):
        assert needle in proc.stdout, needle
