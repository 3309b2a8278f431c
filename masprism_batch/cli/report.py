"""Command `report`: one offline HTML file of a run's verdicts."""

from __future__ import annotations

from pathlib import Path

import typer

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_out_file, check_run_dir, console, outdir_failure
from masprism_batch.cli.options import ForceOpt, OutdirArg, VerboseOpt
from masprism_batch.outdir.manifest import DamagedOutput
from masprism_batch.schema import terminal


@app.command()
def report(outdir: Path = OutdirArg,
           out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file to write"),
           max_traces: int = typer.Option(1000, "--max-traces", min=0, help="traces in the drill-down sample"),
           trace: list[str] = typer.Option(None, "--trace", help="trace id to include in the drill-down (repeat)"),
           force: bool = ForceOpt, verbose: bool = VerboseOpt) -> None:
    """One self-contained offline HTML report: overview of all traces + a sampled per-trace drill-down."""
    from masprism_batch.analytics import AnalyticsInputError, build_report
    from masprism_batch.analytics.report_data import DrillLimits

    setup_logging(verbose)
    check_run_dir(outdir)
    check_out_file(out, force)
    try:
        s = build_report(outdir, out, DrillLimits(max_traces=max_traces), include=trace or [], strict_include=True)
    except (AnalyticsInputError, DamagedOutput, OSError) as exc:
        raise outdir_failure(exc) from None
    console.print(f"{s['traces']:,} traces, {s['drilldown']:,} in the drill-down, {s['bytes'] / 1e6:.1f} MB -> "
                  f"{terminal(str(out))}")
    raise typer.Exit(EXIT_OK)
