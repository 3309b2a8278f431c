"""Commands `stats`, `report` and `export`: analytics over a finished (or running) run's OUTDIR."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from . import EXIT_FATAL, EXIT_OK, app, setup_logging

log = logging.getLogger("masprism_batch.cli")
console = Console(stderr=True)
OutdirArg = typer.Argument(..., help="OUTDIR of an `attribute`/`run` command", exists=True, file_okay=False)


def _fail(exc: Exception) -> typer.Exit:
    console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)  # paths must stay copyable: no wrapping
    return typer.Exit(EXIT_FATAL)


@app.command()
def stats(outdir: Path = OutdirArg, verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Write dashboard tables to OUTDIR/stats/*.parquet (blamed agents, positions, words, NLL, accuracy, throughput)."""
    from ..analytics import AnalyticsInputError, write_stats

    setup_logging(verbose)
    try:
        paths = write_stats(outdir)
    except (AnalyticsInputError, OSError) as exc:
        raise _fail(exc) from None
    for name, p in paths.items():
        console.print(f"{name:15s} -> {escape(str(p))}", soft_wrap=True)
    raise typer.Exit(EXIT_OK)


@app.command()
def report(outdir: Path = OutdirArg,
           out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file to write"),
           max_traces: int = typer.Option(1000, "--max-traces", min=0, help="traces in the drill-down sample"),
           trace: list[str] = typer.Option(None, "--trace", help="trace id to include in the drill-down (repeat)"),
           verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """One self-contained offline HTML report: overview of all traces + a sampled per-trace drill-down."""
    from ..analytics import AnalyticsInputError, build_report
    from ..analytics.report_data import DrillLimits

    setup_logging(verbose)
    try:
        s = build_report(outdir, out, DrillLimits(max_traces=max_traces), include=trace or [])
    except (AnalyticsInputError, OSError) as exc:
        raise _fail(exc) from None
    console.print(f"{s['traces']:,} traces, {s['drilldown']:,} in the drill-down, {s['bytes'] / 1e6:.1f} MB -> "
                  f"{escape(str(out))}", soft_wrap=True)
    raise typer.Exit(EXIT_OK)


@app.command()
def export(outdir: Path = OutdirArg,
           to: str = typer.Option(..., "--to", help="phoenix | otel | jsonl"),
           out: Path = typer.Option(..., "--out", "-o", help="file to write (phoenix: .parquet or JSON lines)"),
           top_k: int = typer.Option(1, "--top-k", min=1, help="candidates per trace (phoenix, otel)"),
           verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Export attributions for Phoenix (span annotations), OpenTelemetry (gen_ai.evaluation.result) or JSONL."""
    from ..analytics import AnalyticsInputError
    from ..analytics.export import export as do_export

    setup_logging(verbose)
    try:
        n = do_export(outdir, to, out, top_k=top_k)
    except (AnalyticsInputError, ValueError, OSError) as exc:
        raise _fail(exc) from None
    console.print(f"{n:,} {escape(to)} records -> {escape(str(out))}", soft_wrap=True)
    raise typer.Exit(EXIT_OK)
