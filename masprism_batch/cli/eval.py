"""Command `eval`: labelled traces attributed and scored by exact match, trivial baselines beside (method doc)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import typer

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import (
    check_inputs,
    check_out_file,
    check_outdir,
    check_ranker,
    console,
    fail,
    load_model_or_fail,
    no_traces_message,
    usage,
)
from masprism_batch.cli.options import (
    AllFeaturesOpt,
    ConfigOpt,
    ConfigOptions,
    ContextOpt,
    CoverageOpt,
    IntervalOpt,
    MethodOpt,
    ModelOpt,
    RankerOpt,
    TaxonomyOpt,
    ThreadsOpt,
    VerboseOpt,
    build_config,
)
from masprism_batch.cli.run import run_here
from masprism_batch.schema import terminal


@app.command("eval")
def eval_(
    path: list[str] = typer.Argument(..., help="labelled traces (raw files/dirs or a canonical dataset)"),
    dataset: str = typer.Option(..., "--dataset", "-d", help="who-and-when | trail"),
    model: str = ModelOpt, config: str = ConfigOpt, max_context: int = ContextOpt, ranker: str = RankerOpt,
    method: str = MethodOpt, taxonomy: Path = TaxonomyOpt,
    json_out: Path = typer.Option(None, "--json", help="write the scores as JSON here"),
    out: Path = typer.Option(None, "-o", "--out", help="keep the attribution outputs here (default: temporary)"),
    limit: int = typer.Option(None, min=1, help="score only the first N labelled traces (smoke runs)"),
    sample: int = typer.Option(None, "--sample", min=1, help="score a deterministic sample of N labelled traces, "
                               "every subset represented (see --seed)"),
    seed: int = typer.Option(0, "--seed", help="seed of --sample"),
    threads: int = ThreadsOpt,
    all_features: bool = AllFeaturesOpt,
    coverage: float = CoverageOpt,
    progress_interval: float = IntervalOpt,
    verbose: bool = VerboseOpt,
):
    """Attribute labelled traces and score them by exact match, trivial baselines beside (method doc)."""
    from masprism_batch.eval import score_trail, score_who_and_when, tables
    from masprism_batch.outdir.reads import read_dataset
    from masprism_batch.pipelines.selection import Selection
    from masprism_batch.trace import Trace

    setup_logging(verbose)
    if dataset not in ("who-and-when", "trail"):
        raise usage(f"--dataset must be who-and-when or trail, not {dataset!r}")
    if limit and sample:
        raise usage("--limit and --sample exclude each other")
    check_inputs(path)
    if out is not None:
        check_outdir(out)
    if json_out is not None:
        check_out_file(json_out)
    cfg = build_config(ConfigOptions(config, model, max_context, threads, ranker, method, taxonomy=taxonomy,
                                     all_features=all_features, coverage=coverage))
    if cfg.method.ranker is None and ranker is None:  # eval scores the benchmarks themselves: their packaged rankers
        from masprism_batch.verdict.rankfile import PACKAGED_NAME

        cfg = cfg.model_copy(update={"method": cfg.method.model_copy(update={"ranker": PACKAGED_NAME})})
    setting = check_ranker(cfg)  # the one read of the ranker file this run makes
    loaded = load_model_or_fail(cfg, setting)
    check_ranker(cfg, setting, loaded.model_id)
    outdir = out or Path(tempfile.mkdtemp(prefix="masprism-eval-"))
    select = Selection(limit=limit, sample=sample, seed=seed, dataset=dataset)
    try:
        summary = run_here(path, outdir, cfg, loaded, setting, progress_interval, select)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    if summary.attributed == 0:
        raise fail(f"no {dataset} traces with labels found in {', '.join(path)}: "
                   + no_traces_message(list(path)).split(": ", 1)[1])
    rows = read_dataset(outdir / "attributions").to_pylist()
    traces = [Trace.from_row(r) for r in read_dataset(outdir / "traces").to_pylist()]
    scorer = score_who_and_when if dataset == "who-and-when" else score_trail
    result = scorer(rows, traces)
    n = max(summary.attributed, 1)
    sec1, sec2 = sum(r["seconds_pass1"] for r in rows), sum(r["seconds_pass2"] for r in rows)
    result.update({
        "model": cfg.model.name, "model_id": rows[0]["model_id"] if rows else None, "method": cfg.method.name,
        "config_hash": cfg.config_hash(), "seconds": summary.wall_seconds, "seconds_per_trace": summary.wall_seconds / n,
        "tokens": sum(r["tokens_pass1"] + r["tokens_pass2"] for r in rows),
        "tokens_pass1": sum(r["tokens_pass1"] for r in rows), "tokens_pass2": sum(r["tokens_pass2"] for r in rows),
        "seconds_pass1": sec1, "seconds_pass2": sec2, "rejected": summary.rejected_by_reason,
        "hardware": _hardware(), "date": time.strftime("%Y-%m-%d"), "breakdown": summary.breakdown,
    })
    result["in_sample"] = _in_sample_note(cfg, [t.trace_id for t in traces if t.trace_id in {r["trace_id"] for r in rows}])
    for table in tables(result):
        console.print(table)
    console.print(f"[yellow]note:[/] {result['in_sample']}")
    console.print(f"{summary.attributed} traces in {summary.wall_seconds:.0f} s ({result['seconds_per_trace']:.1f} s/trace, "
                  f"{summary.tokens_per_second:,.0f} tokens/s) with {terminal(result['model_id'])}; outputs in {terminal(outdir)}")
    console.print(f"time: {summary.breakdown}")
    if json_out:
        json_out.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    raise typer.Exit(EXIT_OK)


def _in_sample_note(cfg, trace_ids: list[str]) -> str:
    """Whether these scores are in-sample for the packaged ranker weights (README: Accuracy)."""
    from masprism_batch.analytics.insample import InSample, note

    if cfg.method.name != "ranked":
        return note(len(trace_ids), 0, False)
    f = InSample()
    return note(len(trace_ids), sum(bool(f(t)) for t in trace_ids) if f.known else None, True)


def _hardware() -> str:
    import os
    import platform

    import torch

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU x{os.cpu_count()}"
    return f"{dev}, {platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads"
