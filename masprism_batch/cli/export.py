"""Command `export`: a run's verdicts as Phoenix annotations, OTel evaluation events, Langfuse scores or JSON
lines."""

from __future__ import annotations

from pathlib import Path

import typer

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_out_file, check_run_dir, console, outdir_failure, usage
from masprism_batch.cli.options import ForceOpt, OutdirArg, VerboseOpt
from masprism_batch.schema import terminal


@app.command()
def export(outdir: Path = OutdirArg,
           to: str = typer.Option(..., "--to", help="phoenix | otel | langfuse | jsonl"),
           out: Path = typer.Option(..., "--out", "-o", help="the file to write (phoenix: FILE names its files, "
                                    "FILE.spans / FILE.traces / FILE.candidates; .parquet, else JSON lines)"),
           top_k: int = typer.Option(1, "--top-k", min=1, help="candidates per trace (phoenix, otel, langfuse)"),
           force: bool = ForceOpt, verbose: bool = VerboseOpt) -> None:
    """Export attributions: for Phoenix (one file per Phoenix client method, each loaded as written: span
    annotations on the blamed spans, trace annotations for chat logs without span ids, and with --top-k > 1
    the lower candidates' span annotations without a score), OpenTelemetry (gen_ai.evaluation.result log
    records), Langfuse (score create bodies, one per line, for POST /api/public/scores) or JSONL. Ids in the hex form backends expect (the source's form in metadata); score = the
    verdict's confidence in [0, 1]. Writes nothing and exits 1 when there is no record to export; FILE's
    folder must exist."""
    from masprism_batch.analytics import AnalyticsInputError
    from masprism_batch.analytics.export import FORMATS, NothingToExport, export_files, phoenix_paths

    setup_logging(verbose)
    if to not in FORMATS:
        raise usage(f"unknown --to {to!r}; choose one of {', '.join(FORMATS)}")
    check_run_dir(outdir)
    for path in phoenix_paths(out).values() if to == "phoenix" else [out]:
        check_out_file(path, force)
    try:
        written = export_files(outdir, to, out, top_k=top_k)
    except NothingToExport as exc:  # nothing written: an empty file would look like a successful export
        raise outdir_failure(exc) from None
    except (AnalyticsInputError, ValueError, OSError) as exc:  # DamagedOutput is a ValueError
        raise outdir_failure(exc) from None
    for path, n in written.items():
        what = (f"Phoenix {path.suffixes[-2].lstrip('.')[:-1]} annotations" if to == "phoenix" else
                "Langfuse scores" if to == "langfuse" else f"{to} records")
        console.print(f"{n:,} {terminal(what)} -> {terminal(str(path))}")
    raise typer.Exit(EXIT_OK)
