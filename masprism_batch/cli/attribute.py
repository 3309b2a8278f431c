"""Command `attribute`: the run of `run --engine local`, in this process, with the same options and outputs."""

from __future__ import annotations

from pathlib import Path

import typer

from masprism_batch.cli import app, setup_logging
from masprism_batch.cli.options import (
    AllFeaturesOpt,
    AllRunsOpt,
    ConfigOpt,
    ConfigOptions,
    ContextOpt,
    CoverageOpt,
    FormatOpt,
    IntervalOpt,
    LimitOpt,
    MethodOpt,
    ModelOpt,
    OutcomeNameOpt,
    OutcomesOpt,
    PassThresholdOpt,
    ProgressOpt,
    RankerOpt,
    RefreshOpt,
    SampleOpt,
    SeedOpt,
    ShardOpt,
    SystemOpt,
    TaxonomyOpt,
    ThreadsOpt,
    TokenBudgetOpt,
    VerboseOpt,
)
from masprism_batch.cli.run import Engine, Job, execute


@app.command(help="Attribute the failed runs in your logs, in this process: which step and which agent caused "
                  "each failure. Reads any supported format (files or folders), writes OUT/attributions, "
                  "OUT/step_scores, OUT/traces and OUT/errors (Parquet) and OUT/run.json. Re-run the same command "
                  "to resume after an interruption. Same options and outputs as `run --engine local`.")
def attribute(
    inputs: list[str] = typer.Argument(..., help="raw trace files/dirs (auto-ingested) or a canonical traces dataset"),
    out: Path = typer.Option(..., "-o", "--out", help="output directory"),
    model: str = ModelOpt, config: str = ConfigOpt, max_context: int = ContextOpt, ranker: str = RankerOpt,
    method: str = MethodOpt, system: str = SystemOpt, taxonomy: Path = TaxonomyOpt,
    token_budget: int = TokenBudgetOpt, traces_per_shard: int = ShardOpt, threads: int = ThreadsOpt,
    all_features: bool = AllFeaturesOpt, fmt: str = FormatOpt, all_runs: bool = AllRunsOpt,
    coverage: float = CoverageOpt,
    outcomes: Path = OutcomesOpt, outcome_name: str = OutcomeNameOpt, pass_threshold: float = PassThresholdOpt,
    limit: int = LimitOpt, sample: int = SampleOpt, seed: int = SeedOpt,
    progress: bool = ProgressOpt, progress_interval: float = IntervalOpt, refresh_changed: bool = RefreshOpt,
    verbose: bool = VerboseOpt,
):
    setup_logging(verbose)
    opts = ConfigOptions(config, model, max_context, threads, ranker, method, system, taxonomy, token_budget,
                         traces_per_shard, all_runs, all_features, coverage, outcomes=outcomes,
                         outcome_name=outcome_name, pass_threshold=pass_threshold)
    execute(inputs, out, opts, Job(Engine.local, fmt=fmt, limit=limit, sample=sample, seed=seed, progress=progress,
                                   progress_interval=progress_interval, refresh_changed=refresh_changed))
