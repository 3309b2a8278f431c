"""Commands `stats`, `report` and `export`: analytics over a finished (or running) run's OUTDIR."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_out_file, console, fail, refuse_links, usage
from masprism_batch.cli.options import VerboseOpt
from masprism_batch.outdir.manifest import DamagedOutput

log = logging.getLogger("masprism_batch.cli")
OutdirArg = typer.Argument(..., help="OUTDIR of an `attribute`/`run` command")


def _fail(exc: Exception) -> typer.Exit:
    console.print(f"[red]error:[/] {escape(str(exc))}")
    return typer.Exit(EXIT_FATAL)


ForceOpt = typer.Option(False, "--force", help="replace FILE if it exists (default: refuse, exit 1)")


def _check_new_file(out: Path, force: bool) -> None:
    """Like `attribute` with its OUTDIR, an existing result is never replaced by accident."""
    check_out_file(out, force)


def _check_run_dir(outdir: Path) -> None:
    if not outdir.exists():
        raise fail(f"input not found: {outdir}")
    if not outdir.is_dir():
        raise fail(f"{outdir} is not a directory: give the OUTDIR of an `attribute`/`run` command")
    refuse_links(outdir)  # a link inside OUTDIR could show another run's results as this one's


@app.command()
def stats(outdir: Path = OutdirArg, verbose: bool = VerboseOpt) -> None:
    """Write dashboard tables to OUTDIR/stats/*.parquet (blamed agents, positions, words, NLL, accuracy, throughput)."""
    from masprism_batch.analytics import AnalyticsInputError, write_stats
    from masprism_batch.analytics.stats_terminal import stats_tables_for_terminal

    setup_logging(verbose)
    _check_run_dir(outdir)
    try:
        paths = write_stats(outdir)
    except (AnalyticsInputError, DamagedOutput, OSError) as exc:
        raise _fail(exc) from None
    out = Console(width=max(Console().width, 100))  # stdout: the tables are the command's result
    for table in stats_tables_for_terminal(outdir):
        out.print(table)
    if "run_status" in paths:
        import pyarrow.parquet as pq
        from rich.text import Text

        from masprism_batch.analytics.run_status import split_line
        from masprism_batch.schema import printable

        out.print(Text(printable(split_line(pq.read_table(paths["run_status"])))), soft_wrap=True)
    from masprism_batch.analytics.run_status import outdir_counts
    from masprism_batch.ingest.status import counts_line

    counts = outdir_counts(outdir)
    hint = (f" (each with its file: masprism-batch show {outdir} --errors)"
            if counts["rejected"] or counts["succeeded"] or counts["warnings"] else "")
    out.print(escape(counts_line(counts) + hint), soft_wrap=True)
    for name, p in paths.items():
        console.print(f"{name:15s} -> {escape(str(p))}")
    raise typer.Exit(EXIT_OK)


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
    _check_run_dir(outdir)
    _check_new_file(out, force)
    try:
        s = build_report(outdir, out, DrillLimits(max_traces=max_traces), include=trace or [], strict_include=True)
    except (AnalyticsInputError, DamagedOutput, OSError) as exc:
        raise _fail(exc) from None
    console.print(f"{s['traces']:,} traces, {s['drilldown']:,} in the drill-down, {s['bytes'] / 1e6:.1f} MB -> "
                  f"{escape(str(out))}")
    raise typer.Exit(EXIT_OK)


@app.command()
def export(outdir: Path = OutdirArg,
           to: str = typer.Option(..., "--to", help="phoenix | otel | jsonl"),
           out: Path = typer.Option(..., "--out", "-o", help="the file to write (phoenix: FILE names its files, "
                                    "FILE.spans / FILE.traces / FILE.candidates; .parquet, else JSON lines)"),
           top_k: int = typer.Option(1, "--top-k", min=1, help="candidates per trace (phoenix, otel)"),
           force: bool = ForceOpt, verbose: bool = VerboseOpt) -> None:
    """Export attributions: for Phoenix (one file per Phoenix client method, each loaded as written: span
    annotations on the blamed spans, trace annotations for chat logs without span ids, and with --top-k > 1
    the lower candidates' span annotations without a score), OpenTelemetry (gen_ai.evaluation.result log
    records) or JSONL. Ids in the hex form backends expect (the source's form in metadata); score = the
    verdict's confidence in [0, 1]. Writes nothing and exits 1 when there is no record to export; FILE's
    folder must exist."""
    from masprism_batch.analytics import AnalyticsInputError
    from masprism_batch.analytics.export import FORMATS, NothingToExport, export_files, phoenix_paths

    setup_logging(verbose)
    if to not in FORMATS:
        raise usage(f"unknown --to {to!r}; choose one of {', '.join(FORMATS)}")
    _check_run_dir(outdir)
    for path in phoenix_paths(out).values() if to == "phoenix" else [out]:
        _check_new_file(path, force)
    try:
        written = export_files(outdir, to, out, top_k=top_k)
    except NothingToExport as exc:  # nothing written: an empty file would look like a successful export
        raise _fail(exc) from None
    except (AnalyticsInputError, ValueError, OSError) as exc:  # DamagedOutput is a ValueError
        raise _fail(exc) from None
    for path, n in written.items():
        what = f"Phoenix {path.suffixes[-2].lstrip('.')[:-1]} annotations" if to == "phoenix" else f"{to} records"
        console.print(f"{n:,} {escape(what)} -> {escape(str(path))}")
    raise typer.Exit(EXIT_OK)
