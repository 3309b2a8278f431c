"""Command `ingest`: raw trace files -> OUTDIR/traces and OUTDIR/errors (canonical Parquet datasets)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer
from rich.table import Table

from masprism_batch.cli import EXIT_OK, EXIT_REJECTED, app, setup_logging
from masprism_batch.cli.common import (
    check_inputs,
    check_outdir,
    console,
    fail,
    no_traces_message,
    usage,
)
from masprism_batch.cli.options import VerboseOpt
from masprism_batch.cli.probe import check_format
from masprism_batch.schema import terminal

log = logging.getLogger("masprism_batch.cli")


def _summary_table(s) -> Table:
    t = Table(title="ingest summary", show_lines=False)
    t.add_column("what")
    t.add_column("count", justify="right")
    for src, n in sorted(s.by_source.items()):
        t.add_row(f"traces  {terminal(src)}", str(n))  # a source name from the logs
    t.add_row("[bold]traces ingested[/]", f"[bold]{s.traces}[/]")
    for reason, n in sorted(s.rejected.items()):
        t.add_row(f"[red]rejected  {terminal(reason)}[/]", str(n))
    for reason, n in sorted(s.warnings.items()):
        t.add_row(f"[yellow]kept with warning  {terminal(reason)}[/]", str(n))
    t.caption = (f"{s.files} files, {s.bytes_raw / 1e6:.1f} MB raw JSON in {s.seconds:.2f} s: "
                 f"{s.mb_per_s:.1f} MB/s, {s.traces_per_s:.0f} traces/s, peak RSS {s.peak_rss_mb:.0f} MB")
    return t


FORMATS_HELP = ("auto (per file; per line in JSON lines) | who-and-when | trail | otel (alias tempo) | otel-sdk | jaeger "
                "| ag2 (alias autogen) | openai | langsmith (alias langgraph) | langfuse | swe-agent | openhands | tau-bench "
                "| inspect | smolagents | mini-swe-agent | claude-code | agentops | crewai | adk | letta | jsonl (canonical) "
                "| parquet "
                "(canonical); docs/formats.md")


@app.command(help="Check and convert your logs (any supported format, auto-detected) to the canonical schema "
                  "without a model: OUT/traces/ and OUT/errors/ (one row per rejected or repaired file or record). "
                  "`attribute` ingests by itself; use this to see what will be read.")
def ingest(
    inputs: list[str] = typer.Argument(..., help="files or directories (recursive); .gz is decompressed, .zip / "
                                                 ".eval read member by member"),
    out: Path = typer.Option(..., "--out", "-o", help="OUTDIR: writes OUTDIR/traces/ and OUTDIR/errors/"),
    fmt: str = typer.Option("auto", "--format", "-f", help=FORMATS_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace Parquet parts of an earlier ingest in OUTDIR"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="progress bar on stderr"),
    summary_json: bool = typer.Option(False, "--json", help="print the summary as JSON on stdout"),
    config: str = typer.Option(None, "--config", help="JSON or TOML config; its `ingest` section sets the size caps"),
    map_file: Path = typer.Option(None, "--map", help="a format ingest does not know: a TOML mapping saying where the "
                                  "traces and steps are, by JSON path (docs/formats.md, *A format we do not know*)"),
    verbose: bool = VerboseOpt,
) -> None:
    from masprism_batch.ingest import FORMATS
    from masprism_batch.ingest import ingest as run_ingest

    setup_logging(verbose)
    if fmt not in FORMATS:
        raise usage(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    check_inputs(inputs)
    mapping = None
    if map_file is not None:
        from masprism_batch.ingest.mapping import load_mapping

        if fmt != "auto":
            raise usage("--map and --format are exclusive: the mapping is the format")
        try:
            mapping = load_mapping(str(map_file))
        except (OSError, ValueError) as exc:
            msg = str(exc)  # each names the file once: "--map: 'm.toml' is not UTF-8 text", "--map m.toml: ..."
            raise fail(msg if msg.startswith("--map") else f"--map {msg}") from None
    check_format(list(inputs), fmt)  # before OUT exists: a wrong --format leaves nothing behind
    check_outdir(out)
    limits = None
    if config:
        from masprism_batch.config import load_config

        try:
            limits = load_config(config).ingest
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise fail(f"bad configuration: {exc}") from None
    try:
        s = run_ingest(inputs, out, fmt, overwrite=overwrite, progress=progress, limits=limits, mapping=mapping)
    except FileExistsError as e:
        raise fail(str(e)) from None
    except OSError as e:  # the output side: disk full, permissions changed under us
        raise fail(f"cannot write {out}: {e.strerror or e}") from None
    console.print(_summary_table(s))
    if summary_json:
        typer.echo(json.dumps(s.as_dict()))
    if s.error_rows:
        console.print(f"[yellow]{s.error_rows} error rows[/] -> {terminal(out / 'errors')} "
                      f"(each with its file: masprism-batch show {terminal(out)} --errors)")
    if s.traces == 0:
        raise fail(no_traces_message(inputs, dict(s.rejected)))
    raise typer.Exit(EXIT_REJECTED if s.rejected else EXIT_OK)  # warnings alone (repaired traces) exit 0
