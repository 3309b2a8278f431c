"""Prefill runtime: model registry, loading (HF folder, GGUF with a converted cache, tiny-random) and one
packed varlen forward for the Llama / Qwen2 / Qwen3 / Gemma 3 families that yields the MASPrism signals.

Public API: load_model(model_cfg, signals_cfg) -> PrefillModel; load_tokenizer(model_cfg); resolve_model(name) -> ModelSpec;
list_models(); SeqSignals.
"""

from masprism_batch.model.forward import PrefillModel, PrefillTiming, SeqSignals
from masprism_batch.model.loader import load_model, load_tokenizer, model_context
from masprism_batch.model.registry import (
           ModelNotFoundError,
           ModelSpec,
           list_models,
           require_model,
           resolve_model,
)

__all__ = ["PrefillModel", "PrefillTiming", "SeqSignals", "load_model", "load_tokenizer", "model_context", "ModelNotFoundError", "ModelSpec",
           "list_models", "require_model", "resolve_model"]
