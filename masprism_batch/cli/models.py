"""Command `models`: which models are usable here, or the details of one (loading it)."""

from __future__ import annotations

import json
import time

import typer
from rich.console import Console
from rich.table import Table

from masprism_batch.cli import EXIT_FATAL, app, setup_logging
from masprism_batch.cli.common import console
from masprism_batch.cli.options import VerboseOpt
from masprism_batch.schema import terminal


@app.command()
def models(
    name: str = typer.Argument(None, help="load this model (name, HF folder or .gguf) and show its details"),
    cache_dir: str = typer.Option(None, "--cache-dir", help="converted-weights cache (default ~/.cache/masprism-batch)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON on stdout"),
    verbose: bool = VerboseOpt,
) -> None:
    """List the named models (available here or how to get them); with NAME, load it and describe it."""
    from masprism_batch.model import ModelNotFoundError, list_models

    setup_logging(verbose)
    if name is None:
        specs = list_models()
        if as_json:
            typer.echo(json.dumps([{"name": s.name, "kind": s.kind, "available": s.available,
                                    "path": str(s.path) if s.path else None, "description": s.description,
                                    "how_to_get": s.how_to_get or None} for s in specs], indent=2))
            return
        t = Table(title="models (--model NAME, or --model PATH to an HF folder / .gguf file)")
        for col in ("name", "kind", "here", "what / how to get"):
            t.add_column(col)
        for s in specs:
            t.add_row(terminal(s.name), terminal(s.kind), "[green]yes[/]" if s.available else "[red]no[/]",
                      terminal(s.description if s.available else s.how_to_get))
        Console().print(t)
        return
    try:
        info = _describe(name, cache_dir)
    except (ModelNotFoundError, ValueError) as e:
        console.print(f"[red]{terminal(e)}[/]")
        raise typer.Exit(EXIT_FATAL) from None
    if as_json:
        typer.echo(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            Console().print(f"[bold]{terminal(k):>20}[/]  {terminal(v)}")


def _describe(name: str, cache_dir: str | None) -> dict:
    from masprism_batch.config import ModelConfig, SignalsConfig
    from masprism_batch.model import load_model

    t0 = time.perf_counter()
    m = load_model(ModelConfig(name=name, cache_dir=cache_dir), SignalsConfig())
    a = m.arch
    n_params = m.weights.embed.numel() + m.weights.final_norm.numel()
    n_params += sum(t.numel() for lw in m.weights.layers for f, t in vars(lw).items()
                    if t is not None and f != "qk_norm")
    n_params += 2 * a.head_dim * a.num_layers if a.qk_norm else 0  # qk_norm holds q_norm/k_norm repeated
    if m.weights.lm_head is not m.weights.embed:
        n_params += m.weights.lm_head.numel()
    return {"model_id": m.model_id, "family": a.family, "layers": a.num_layers,
            "instrument_layers": m.instrument_layers, "hidden": a.hidden_size,
            "heads (q/kv)": f"{a.num_heads}/{a.num_kv_heads}", "head_dim": a.head_dim, "vocab": a.vocab_size,
            "max_context": m.max_context, "tied_embeddings": a.tie_word_embeddings, "parameters": n_params,
            "device / dtype": f"{m.device} / {str(m.dtype).removeprefix('torch.')}",
            "fingerprint": m.fingerprint, "load_seconds": round(time.perf_counter() - t0, 2)}
