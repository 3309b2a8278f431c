"""Command `run`: the resumable batch run, on the local engine (embedded) or on Ray."""

from __future__ import annotations

import logging
from enum import Enum
from pathlib import Path

import typer
from rich.markup import escape

from masprism_batch.cli import app, setup_logging
from masprism_batch.cli.common import (
    AllRunsOpt,
    FormatHelp,
    VerboseOpt,
    check_inputs,
    check_outdir,
    check_prompt_or_fail,
    check_ranker,
    check_some_data,
    console,
    fail,
    load_model_or_fail,
    no_traces_message,
    ranker_matches,
    taxonomy_overrides,
    usage,
)
from masprism_batch.cli.progress import DEFAULT_INTERVAL, heartbeat

log = logging.getLogger("masprism_batch.cli")


LimitOpt = typer.Option(None, "--limit", min=1, help="attribute the first N traces (input order; smoke runs)")
SampleOpt = typer.Option(None, "--sample", min=1, help="attribute a deterministic sample of N traces, every source "
                         "represented (see --seed); another sample into the same OUT is refused")
SeedOpt = typer.Option(0, "--seed", help="seed of --sample")


class Engine(str, Enum):
    local = "local"
    ray = "ray"


ALL_FEATURES_HELP = ("compute counterfactuals and per-head attention for every log, also where its verdict does "
                     "not read them (runs made to fit a ranker; default: only where read, method/reads.py)")


@app.command()
def run(
    inputs: list[str] = typer.Argument(..., help="raw trace files/dirs (ingested once) or canonical traces Parquet"),
    out: Path = typer.Option(..., "-o", "--out", help="output directory (re-run the same command to resume)"),
    engine: Engine = typer.Option(Engine.local, help="local: in this process; ray: Ray Data actors"),
    workers: int = typer.Option(None, min=1, help="model actors (ray; default: one per GPU, else 1)"),
    address: str = typer.Option(None, help="join this Ray cluster (ray://… or host:port; default: $RAY_ADDRESS "
                                "if set, else start a private one)"),
    num_cpus: int = typer.Option(None, help="CPUs of the local Ray cluster this command starts"),
    model: str = typer.Option(None, "--model", "-m", help="smollm2-135m (default) | tiny-random | PATH"),
    config: str = typer.Option(None, "--config", help="JSON or TOML file with PipelineConfig sections"),
    max_context: int = typer.Option(None, "--max-context", help="tokens per prompt (default from config)"),
    method: str = typer.Option(None, "--method", help="ranked (default) | masprism (the faithful paper method)"),
    ranker: Path = typer.Option(None, "--ranker", help="ranker file from `masprism-batch fit` (logs of the systems "
                                "it holds get their fitted verdict, others the zero-training rule), or `packaged`: "
                                "the rankers fitted on the benchmark systems"),
    system: str = typer.Option(None, "--system", help="the system these logs come from, as your ranker file names "
                               "it (default: what each log records; never guessed from its shape)"),
    taxonomy: Path = typer.Option(None, "--taxonomy", help="name a failure kind for each verdict "
                                  "(opt-in, experimental: docs/categories.md): `trail` for TRAIL's 20 kinds, or a TOML "
                                  "file of your own ([[kind]] name, family, description)"),
    token_budget: int = typer.Option(None, help="max tokens per packed prefill batch (default: sized for the device: 8,192 on CPU, from free memory on CUDA; run.json names it)"),
    traces_per_shard: int = typer.Option(None, help="traces per committed output shard"),
    threads: int = typer.Option(None, help="torch CPU threads per model (default: CPUs / workers)"),
    all_features: bool = typer.Option(False, "--all-features", help=ALL_FEATURES_HELP),
    fmt: str = typer.Option("auto", "--format", "-f", help=FormatHelp), all_runs: bool = AllRunsOpt,
    limit: int = LimitOpt, sample: int = SampleOpt, seed: int = SeedOpt,
    progress: bool = typer.Option(True, help="live progress bar (traces/s, tokens/s, ETA)"),
    progress_interval: float = typer.Option(DEFAULT_INTERVAL, "--progress-interval", min=0,
                                            help="seconds between progress lines when stderr is not a terminal"),
    verbose: bool = VerboseOpt,
):
    """The overnight job: attribute millions of logs on a Ray cluster (or embedded), resumable and exactly-once
    per shard. Same outputs as `attribute` (OUT/{traces,attributions,step_scores,errors}/, OUT/run.json) plus
    OUT/_manifest/; re-run the same command to resume."""
    from masprism_batch.config import load_config
    from masprism_batch.ingest import FORMATS
    from masprism_batch.model import ModelNotFoundError, require_model
    from masprism_batch.pipelines import run_local, run_ray
    from masprism_batch.pipelines.selection import Selection
    from masprism_batch.pipelines.staging import staging_conflict

    setup_logging(verbose)
    if engine is Engine.local and (workers not in (None, 1) or address):
        raise usage("--workers/--address apply to --engine ray; the local engine runs one model")
    if limit and sample:
        raise usage("--limit and --sample exclude each other")
    select = Selection(limit=limit, sample=sample, seed=seed)
    if fmt not in FORMATS:
        raise usage(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    check_inputs(inputs)
    check_some_data(inputs)
    from masprism_batch.cli.probe import check_format

    check_format(list(inputs), fmt)  # before OUT exists: a wrong --format leaves nothing behind
    check_outdir(out)
    try:
        cfg = load_config(config, model__name=model, render__max_context=max_context, model__threads=threads,
                          method__name=method, method__ranker_weights=str(ranker) if ranker else None,
                          batch__token_budget=token_budget, engine__traces_per_shard=traces_per_shard,
                          ingest__all_runs=True if all_runs else None,
                          method__features="all" if all_features else None, method__system=system,
                          **taxonomy_overrides(taxonomy))
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise fail(f"bad configuration: {exc}") from None
    conflict = staging_conflict(out, list(inputs), fmt, select)
    if conflict:  # answered before a model is loaded (stage_raw checks again under the OUTDIR lock)
        raise fail(conflict)
    # The model is checked before OUTDIR is touched, so a bad --model leaves nothing that refuses a retry.
    if engine is Engine.local:
        loaded = load_model_or_fail(cfg)
        check_ranker(cfg, loaded.model_id)
    else:
        check_ranker(cfg)
        try:
            require_model(cfg.model.name)  # the actors load it; here only that it exists
        except ModelNotFoundError as exc:
            raise fail(f"cannot load model {cfg.model.name!r}: {exc}") from None
        check_prompt_or_fail(cfg)  # its tokenizer only: the prompt texts leave room for a log
    try:
        with heartbeat(progress_interval if progress else 0, show=progress) as display:
            if engine is Engine.local:
                summary = run_local(inputs, out, cfg, fmt=fmt, progress=display, model=loaded, select=select)
            else:
                summary = run_ray(inputs, out, cfg, workers=workers, address=address, num_cpus=num_cpus, fmt=fmt,
                                  progress=display, select=select)
    except KeyboardInterrupt as exc:  # SIGTERM/SIGHUP/SIGINT: a clean stop, never blamed on a trace
        from masprism_batch.pipelines.interrupts import exit_status, signal_name

        kept = getattr(exc, "kept", None) or f"what was committed is kept in {out}"  # (set by the engine)
        raise fail(f"interrupted ({signal_name(exc)}): {kept}; re-run the same command to resume",
                   exit_status(exc)) from None
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc}") from None
    from masprism_batch.ingest.status import counts_line

    console.print(
        f"{escape(counts_line(summary.counts))}; {summary.shards_run} shards run, "
        f"{summary.shards_skipped} already committed"
        + (f" ({summary.traces_resumed:,} traces committed before this run)" if summary.traces_resumed else "")
        + f"; {summary.traces_per_second:.2f} traces/s, "
        f"{summary.tokens_per_second:,.0f} tokens/s ({summary.engine}, {summary.workers} worker(s)) -> {out}")
    from masprism_batch.pipelines.increment import summary_line

    if new := summary_line(summary.extra.get("inputs")):
        console.print(escape(new), highlight=False)
    if summary.breakdown:
        console.print(f"time: {summary.breakdown}")
    if matched := ranker_matches(cfg, out):
        console.print(escape(matched))
    succeeded = summary.counts["succeeded"]
    if succeeded:
        console.print(f"{succeeded} run(s) whose log records success were not attributed: set aside (listed in "
                      f"{out / 'errors'} as succeeded_run; --all-runs attributes them)")
    if summary.rejected or summary.counts["warnings"] or succeeded:
        console.print(f"each with its file: masprism-batch show {out} --errors")
    if summary.attributed == 0 and succeeded:
        raise typer.Exit(summary.exit_code)  # every run succeeded: nothing to blame, and nothing went wrong
    if summary.attributed == 0:
        raise fail(no_traces_message(list(inputs), summary.rejected_by_reason))
    raise typer.Exit(summary.exit_code)
