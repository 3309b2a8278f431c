"""masprism-batch: batch failure attribution for multi-agent LLM traces from prefill signals (MASPrism)."""

__version__ = "0.1.0"
