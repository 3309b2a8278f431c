"""Commands `attribute`, `eval` and `demo`: in-process attribution and its strict evaluation."""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path

import typer
from rich.table import Table

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, app, setup_logging
from masprism_batch.cli.common import (
    AllRunsOpt,
    FormatHelp,
    VerboseOpt,
    check_inputs,
    check_outdir,
    console,
    fail,
    load_model_or_fail,
    no_traces_message,
    taxonomy_overrides,
    usage,
)
from masprism_batch.cli.progress import DEFAULT_INTERVAL, heartbeat
from masprism_batch.cli.run import ALL_FEATURES_HELP, Engine, LimitOpt, SampleOpt, SeedOpt, run

log = logging.getLogger("masprism_batch.cli")

ModelOpt = typer.Option(None, "--model", "-m", help="smollm2-135m (default) | tiny-random | PATH (HF folder or .gguf)")
ConfigOpt = typer.Option(None, "--config", help="JSON or TOML file with PipelineConfig sections")
ContextOpt = typer.Option(None, "--max-context", help="tokens per prompt (default from config)")
MethodOpt = typer.Option(None, "--method", help="ranked (default) | masprism (the faithful paper method)")
RankerOpt = typer.Option(None, "--ranker", help="ranker file from `masprism-batch fit` (logs of its systems get "
                         "their fitted verdict, others the zero-training rule), or `packaged`: the rankers fitted on "
                         "the benchmark systems (Who&When, TRAIL folders)")
SystemOpt = typer.Option(None, "--system", help="the system these logs come from, as your ranker file names it "
                         "(default: what each log records: service name, framework; never guessed from its shape)")
AllFeaturesOpt = typer.Option(False, "--all-features", help=ALL_FEATURES_HELP)
TaxonomyOpt = typer.Option(None, "--taxonomy", help="name a failure kind for each verdict (opt-in, "
                           "experimental: docs/categories.md): `trail` for TRAIL's 20 kinds, or a TOML file of your own "
                           "([[kind]] name, family, description)")
IntervalOpt = typer.Option(DEFAULT_INTERVAL, "--progress-interval", min=0,
                           help="seconds between progress lines when stderr is not a terminal (0: none)")


def _config(config, model, max_context, threads=None, method=None, ranker=None, all_features=False, system=None,
            taxonomy=None):
    from masprism_batch.config import load_config

    try:
        return load_config(config, model__name=model, render__max_context=max_context, model__threads=threads,
                           method__name=method, method__ranker_weights=str(ranker) if ranker else None,
                           method__features="all" if all_features else None, method__system=system,
                           **taxonomy_overrides(taxonomy))
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        console.print(f"[red]error:[/] bad configuration: {exc}")
        raise typer.Exit(EXIT_FATAL) from None


def _run(inputs: list[str], outdir: Path, cfg, model=None, interval: float = DEFAULT_INTERVAL, select=None):
    """ingest (+ selection) -> attribute -> write, on the local engine, every write under the OUTDIR lock
    (resumable: re-running skips committed shards)."""
    from masprism_batch.pipelines import run_local

    with heartbeat(interval) as display:
        return run_local(list(inputs), outdir, cfg, progress=display, model=model, select=select)


def _print_summary(summary, outdir: Path, inputs: list[str] | None = None) -> int:
    from rich.markup import escape

    from masprism_batch.ingest.status import counts_line

    console.print(f"{escape(counts_line(summary.counts))} in {summary.wall_seconds:.1f} s, "
                  f"{summary.tokens_per_second:,.0f} tokens/s -> {outdir}")
    if inputs is not None and summary.attributed == 0:
        raise fail(no_traces_message(inputs, summary.rejected_by_reason))
    return summary.exit_code


@app.command(help="Attribute the failed runs in your logs, in this process: which step and which agent caused "
                  "each failure. Reads any supported format (files or folders), writes OUT/attributions, "
                  "OUT/step_scores, OUT/traces and OUT/errors (Parquet) and OUT/run.json. Re-run the same command "
                  "to resume after an interruption. Same options and outputs as `run --engine local`.")
def attribute(
    inputs: list[str] = typer.Argument(..., help="raw trace files/dirs (auto-ingested) or a canonical traces dataset"),
    out: Path = typer.Option(..., "-o", "--out", help="output directory"),
    model: str = ModelOpt, config: str = ConfigOpt, max_context: int = ContextOpt, method: str = MethodOpt,
    ranker: Path = RankerOpt, system: str = SystemOpt, taxonomy: Path = TaxonomyOpt,
    token_budget: int = typer.Option(None, help="max tokens per packed prefill batch (default: sized for the device: 8,192 on CPU, from free memory on CUDA; run.json names it)"),
    traces_per_shard: int = typer.Option(None, help="traces per committed output shard"),
    threads: int = typer.Option(None, help="torch CPU threads"),
    all_features: bool = AllFeaturesOpt,
    fmt: str = typer.Option("auto", "--format", "-f", help=FormatHelp), all_runs: bool = AllRunsOpt,
    limit: int = LimitOpt, sample: int = SampleOpt, seed: int = SeedOpt,
    progress: bool = typer.Option(True, help="live progress bar (traces/s, tokens/s, ETA)"),
    progress_interval: float = IntervalOpt,
    verbose: bool = VerboseOpt,
):
    run(inputs, out, engine=Engine.local, workers=None, address=None, num_cpus=None, model=model, config=config,
        max_context=max_context, method=method, ranker=ranker, system=system, taxonomy=taxonomy,
        token_budget=token_budget,
        traces_per_shard=traces_per_shard,
        threads=threads, all_features=all_features, fmt=fmt, all_runs=all_runs, limit=limit, sample=sample, seed=seed, progress=progress,
        progress_interval=progress_interval, verbose=verbose)


def _sample_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("masprism_batch") / "data" / "sample"))


def verdict_line(a: dict, t=None) -> str:
    """The run's verdict as attributions hold it: the blamed step (with its author) and the blamed agent."""
    author = a.get("pred_step_agent")
    if author is None and t is not None and a["pred_step"] is not None:
        author = t.steps[a["pred_step"]].agent  # outputs written before attributions carried the author
    line = f"predicted: step {a['pred_step']} (written by {author}); blamed agent: {a['pred_agent']}"
    if a.get("agent_by") and a["pred_agent"] != author:  # why the blame left the step's author
        line += f" ({a['agent_by']})"
    elif a.get("pred_agent_rule") == "aggregate":
        line += " (step probabilities summed per agent)"
    by, conf = a.get("verdict_by"), a.get("confidence")
    if by:
        line += f"; decided by {by}" + ("" if conf is None else f", confidence {conf:.2f}")
        if by.startswith("no_symptom:"):  # said, not dressed as evidence (issue 51)
            line += " (no symptom points to this step: the rule's fallback by position, no evidence)"
    return line


def _print_attributions(outdir: Path, top: int = 3) -> None:
    from masprism_batch.outdir.reads import read_dataset
    from masprism_batch.trace import Trace

    attrs = read_dataset(outdir / "attributions").to_pylist()
    traces = {r["trace_id"]: Trace.from_row(r) for r in read_dataset(outdir / "traces").to_pylist()}
    for a in sorted(attrs, key=lambda r: r["trace_id"]):
        t = traces.get(a["trace_id"])
        table = Table(title=f"{a['trace_id']}  ({a['source']}, {a['n_steps']} steps)", title_justify="left")
        for col in ("rank", "step", "agent", "score", "symptoms it explains", "step text"):
            table.add_column(col, overflow="fold")
        for r, c in enumerate(a["candidates"][:top], 1):
            text = t.steps[c["step"]].content if t else ""
            snippet = " ".join(text.split())[:90]
            table.add_row(str(r), str(c["step"]), str(c["agent"]), f"{c['score']:.3g}",
                          ", ".join(map(str, c["symptoms"])) or "-", snippet)
        console.print(table)
        verdict = verdict_line(a, t)
        if t and t.labels and t.labels.mistake_step is not None:
            verdict += f"   (label: step {t.labels.mistake_step} by {t.labels.mistake_agent})"
        elif t and t.labels and t.labels.error_locations:
            hit = a["pred_span_id"] in set(t.labels.error_locations)
            verdict += f"   (span {a['pred_span_id']} is {'a' if hit else 'not a'} labelled error span)"
        console.print(verdict + "\n")


@app.command()
def demo(
    model: str = ModelOpt,
    out: Path = typer.Option(None, "-o", "--out", help="output directory (default: ~/.cache/masprism-batch/demo, "
                             "replaced by each demo run)"),
    progress_interval: float = IntervalOpt,
    verbose: bool = VerboseOpt,
):
    """Attribute the bundled sample (4 Who&When + 2 TRAIL real traces) with the offline default model."""
    setup_logging(verbose)
    if out is not None:
        check_outdir(out)
    cfg = _config(None, model, None)
    loaded = load_model_or_fail(cfg)
    outdir = out or _demo_dir(cfg)
    sample = _sample_dir()
    try:
        summary = _run([str(sample / "who_and_when"), str(sample / "trail")], outdir, cfg, loaded, progress_interval)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    _print_attributions(outdir)
    console.print(f"sample data: {sample} (licences: NOTICE.md there)")
    code = _print_summary(summary, outdir)
    console.print(f"outputs: {outdir}" + ("" if out else " (replaced by the next demo; -o DIR keeps them)"))
    console.print(f"next: masprism-batch report {outdir} -o report.html")
    raise typer.Exit(code)


def _demo_dir(cfg) -> Path:
    """One demo folder, emptied at each run (they piled up in /tmp, one per run): ours by its place in the
    model cache root, so clearing it removes nothing of the user's."""
    import shutil

    from masprism_batch.model.loader import cache_root

    d = cache_root(cfg.model.cache_dir) / "demo"
    if d.is_dir() and not d.is_symlink():
        shutil.rmtree(d)
    check_outdir(d)
    return d


@app.command("eval")
def eval_(
    path: list[str] = typer.Argument(..., help="labelled traces (raw files/dirs or a canonical dataset)"),
    dataset: str = typer.Option(..., "--dataset", "-d", help="who-and-when | trail"),
    model: str = ModelOpt, config: str = ConfigOpt, max_context: int = ContextOpt, method: str = MethodOpt,
    ranker: Path = RankerOpt, taxonomy: Path = TaxonomyOpt,
    json_out: Path = typer.Option(None, "--json", help="write the scores as JSON here"),
    out: Path = typer.Option(None, "-o", "--out", help="keep the attribution outputs here (default: temporary)"),
    limit: int = typer.Option(None, min=1, help="score only the first N labelled traces (smoke runs)"),
    sample: int = typer.Option(None, "--sample", min=1, help="score a deterministic sample of N labelled traces, "
                               "every subset represented (see --seed)"),
    seed: int = typer.Option(0, "--seed", help="seed of --sample"),
    threads: int = typer.Option(None, help="torch CPU threads"),
    all_features: bool = AllFeaturesOpt,
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
        from masprism_batch.cli.common import check_out_file
        check_out_file(json_out)
    cfg = _config(config, model, max_context, threads, method, ranker, all_features, taxonomy=taxonomy)
    if cfg.method.ranker_weights is None:  # eval scores the benchmarks themselves: their packaged rankers apply
        from masprism_batch.fit.rankfile import PACKAGED_NAME

        cfg = cfg.model_copy(update={"method": cfg.method.model_copy(update={"ranker_weights": PACKAGED_NAME})})
    loaded = load_model_or_fail(cfg)
    from masprism_batch.cli.common import check_ranker

    check_ranker(cfg, loaded.model_id)
    outdir = out or Path(tempfile.mkdtemp(prefix="masprism-eval-"))
    select = Selection(limit=limit, sample=sample, seed=seed, dataset=dataset)
    try:
        summary = _run(path, outdir, cfg, loaded, progress_interval, select)
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
                  f"{summary.tokens_per_second:,.0f} tokens/s) with {result['model_id']}; outputs in {outdir}")
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
