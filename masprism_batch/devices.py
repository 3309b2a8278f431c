"""What `device: auto` and `dtype: auto` mean on the machine a run starts on: probed at run time, never stored in
a config (the config hash names `auto`, and the resolved dtype joins the hash where it changes results:
config.PipelineConfig)."""

from __future__ import annotations


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX: the model's GEMMs run 2.1-2.4x faster in bf16 there (benchmarks/kernels/bench_dtype.py);
    elsewhere bf16 is emulated and slower than fp32."""
    import torch

    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # older torch without the probes: assume not
        return False


def auto_dtype(device_type: str, model_name: str) -> str:
    """What `dtype: auto` means for a model on a device type ("cpu" / "cuda").

    CPU bf16: the body's matmuls in bf16, the LM head's NLL still computed in fp32 (signals.token_nll): faster
    end to end with the same verdicts on the logs compared (the measurement: docs/benchmarks.md). tiny-random stays fp32 on CPU: its tests compare with fp32 references and
    must not depend on which CPU runs them."""
    if device_type == "cuda":
        return "bfloat16"
    if model_name != "tiny-random" and cpu_has_native_bf16():
        return "bfloat16"
    return "float32"


def _cpu_only_torch() -> bool:
    """The installed torch is a CPU-only build (its version.py names no CUDA or HIP), read without importing torch:
    `auto` is then CPU for sure, and a run that finds nothing to do never pays torch's import (seconds)."""
    import importlib.util
    import re
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("torch")
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text(encoding="utf-8")
    except (ImportError, AttributeError, StopIteration, TypeError, OSError, ValueError):
        return False
    return all(re.search(rf"^{k}(?:\s*:[^=]*)?\s*=\s*None\s*$", text, re.M) for k in ("cuda", "hip"))


def auto_device_type(device: str) -> str:
    """The device type `device` names: `auto` is CUDA when available, else CPU."""
    import sys

    if device == "auto" and "torch" not in sys.modules and _cpu_only_torch():
        return "cpu"
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device).type
