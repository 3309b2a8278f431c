"""Command `stats`: a run's dashboard tables written beside it, the main ones printed."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_run_dir, console, outdir_failure
from masprism_batch.cli.options import OutdirArg, VerboseOpt
from masprism_batch.outdir.manifest import DamagedOutput
from masprism_batch.schema import terminal


@app.command()
def stats(outdir: Path = OutdirArg, verbose: bool = VerboseOpt) -> None:
    """Write dashboard tables to OUTDIR/stats/*.parquet (blamed agents, positions, words, NLL, accuracy, throughput)."""
    from masprism_batch.analytics import AnalyticsInputError, write_stats
    from masprism_batch.analytics.stats_terminal import stats_tables_for_terminal

    setup_logging(verbose)
    check_run_dir(outdir)
    try:
        paths = write_stats(outdir)
    except (AnalyticsInputError, DamagedOutput, OSError) as exc:
        raise outdir_failure(exc) from None
    out = Console(width=max(Console().width, 100))  # stdout: the tables are the command's result
    for table in stats_tables_for_terminal(outdir):
        out.print(table)
    if "run_status" in paths:
        import pyarrow.parquet as pq

        from masprism_batch.analytics.run_status import split_line

        out.print(terminal(split_line(pq.read_table(paths["run_status"]))), soft_wrap=True)
    from masprism_batch.analytics.run_status import outdir_counts
    from masprism_batch.ingest.status import counts_line

    counts = outdir_counts(outdir)
    hint = (f" (each with its file: masprism-batch show {outdir} --errors)"
            if counts["rejected"] or counts["succeeded"] or counts["warnings"] else "")
    out.print(terminal(counts_line(counts) + hint), soft_wrap=True)
    for name, p in paths.items():
        console.print(f"{name:15s} -> {terminal(str(p))}")
    raise typer.Exit(EXIT_OK)
