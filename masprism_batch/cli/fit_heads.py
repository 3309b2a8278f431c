"""Command `fit-heads`: refit the label-free head weights of a model on a folder of (unlabelled) logs."""

from __future__ import annotations

from pathlib import Path

import typer

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import (
    check_inputs,
    check_out_file,
    console,
    fail,
    load_model_or_fail,
)
from masprism_batch.cli.options import ConfigOptions, VerboseOpt, build_config
from masprism_batch.outdir.parts import atomic_output
from masprism_batch.schema import terminal


@app.command("fit-heads")
def fit_heads(
    inputs: list[str] = typer.Argument(..., help="log files or folders (any supported format; labels not needed)"),
    out: Path = typer.Option(..., "-o", "--out", help="head weights JSON to write (use with method.head_weights)"),
    model: str = typer.Option(None, "--model", help="model name or path (default: the config's)"),
    config: str = typer.Option(None, "--config", help="JSON/TOML config file"),
    max_traces: int = typer.Option(200, "--max-traces", min=1, help="use at most this many traces (in input order)"),
    verbose: bool = VerboseOpt,
) -> None:
    """Fit which attention heads carry blame, without labels: head weights that predict how much later steps'
    surprise rises when a step is removed (counterfactuals by prefill). Writes OUT; point
    `method.head_weights` at it (the packaged weights of the model are used otherwise)."""
    from tqdm import tqdm

    from masprism_batch.ingest import read_inputs
    from masprism_batch.stage.head_harvest import fit_model_heads

    setup_logging(verbose)
    check_inputs(inputs)
    check_out_file(out)
    cfg = build_config(ConfigOptions(config=config, model=model))
    traces = []
    for t in read_inputs(list(inputs)):
        if len(t.steps) >= 3:
            traces.append(t)
        if len(traces) >= max_traces:
            break
    if not traces:
        raise fail(f"no trace with 3 or more steps in {', '.join(inputs)}")
    m = load_model_or_fail(cfg)
    bar = tqdm(total=len(traces), desc="fit-heads", unit="trace")
    try:
        hw = fit_model_heads(traces, m, cfg, progress=lambda _t: bar.update(1))
    except ValueError as exc:
        raise fail(str(exc)) from None
    finally:
        bar.close()
    with atomic_output(out) as f:  # a write cut short (disk full, a kill) leaves OUT as it was, never half of it
        f.write(hw.to_json() + "\n")
    console.print(f"wrote {terminal(out)}: {hw.weights.shape[0]} layers x {hw.weights.shape[1]} heads from {hw.n_pairs} "
                  f"pairs of {hw.n_traces} traces")
    raise typer.Exit(EXIT_OK)
