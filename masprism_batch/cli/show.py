"""Command `show`: a run's verdicts, one line per trace, in the terminal (and, with --errors, what was set aside).

The outputs are Parquet; a user without pandas or DuckDB could not look at them without writing code. `show`
reads them with pyarrow (always installed) and prints what each output names, never re-derived.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_run_dir, outdir_failure
from masprism_batch.cli.options import OutdirArg, VerboseOpt
from masprism_batch.outdir.manifest import DamagedOutput

_VERDICT_COLS = ["trace_id", "source", "system", "n_steps", "pred_step", "pred_step_agent", "pred_agent",
                 "confidence", "verdict_by"]
_ERROR_COLS = ["input_path", "record_id", "stage", "reason", "message"]


def _verdicts(outdir: Path, limit: int, by: str) -> tuple[Table, int]:
    from masprism_batch.analytics import load

    rows = load.read(outdir, "attributions", columns=_VERDICT_COLS).to_pylist()
    if by == "confidence":  # the most confident first: the verdicts to review first (README)
        rows.sort(key=lambda r: (-(r["confidence"] if r["confidence"] is not None else -1.0), r["trace_id"]))
    else:
        rows.sort(key=lambda r: r["trace_id"])
    table = Table(title=f"{len(rows):,} verdicts (by {by})", title_justify="left")
    for col in ("trace", "source", "steps", "blamed step", "its author", "blamed agent", "confidence", "decided by"):
        whole = col in ("steps", "blamed step", "confidence", "decided by")  # short: never broken mid-word
        table.add_column(col, overflow="fold", no_wrap=whole)
    for r in rows[:limit or None]:
        conf = "-" if r["confidence"] is None else f"{r['confidence']:.2f}"
        table.add_row(escape(r["trace_id"]), escape(r["source"] or "-"), str(r["n_steps"]), str(r["pred_step"]),
                      escape(str(r["pred_step_agent"] or "-")), escape(str(r["pred_agent"] or "-")), conf,
                      escape(r["verdict_by"] or "-"))
    return table, len(rows)


def _errors(outdir: Path, limit: int) -> tuple[Table, int]:
    from masprism_batch.analytics import load
    from masprism_batch.ingest.common import WARNING_REASONS

    rows = load.read(outdir, "errors", columns=_ERROR_COLS).to_pylist()  # absent: no row
    rows.sort(key=lambda r: (r["input_path"] or "", r["reason"], r["record_id"] or ""))
    table = Table(title=f"{len(rows):,} rows of errors/ (rejected, set aside as succeeded, warnings)",
                  title_justify="left")
    for col in ("file", "record", "kind", "reason", "message"):
        table.add_column(col, overflow="fold")
    for r in rows[:limit or None]:
        kind = ("set aside" if r["reason"] == "succeeded_run" else
                "warning" if r["reason"] in WARNING_REASONS else "rejected")
        table.add_row(escape(r["input_path"] or "-"), escape(r["record_id"] or "-"), kind, escape(r["reason"]),
                      escape(" ".join((r["message"] or "").split())[:160]))
    return table, len(rows)


@app.command()
def show(outdir: Path = OutdirArg,
         errors: bool = typer.Option(False, "--errors", help="list OUTDIR/errors/ instead: each rejected, set "
                                     "aside (succeeded_run) or warned record with the file it came from"),
         by: str = typer.Option("confidence", "--by", help="order of the verdicts: confidence (most confident "
                                "first) | trace"),
         limit: int = typer.Option(50, "--limit", min=0, help="rows to print (0: all)"),
         verbose: bool = VerboseOpt) -> None:
    """Print a run's verdicts, one line per trace: the blamed step, its author, the blamed agent, the
    confidence and what decided it (or, with --errors, what was rejected or set aside, file by file)."""
    from masprism_batch.analytics import AnalyticsInputError
    from masprism_batch.cli.common import usage

    setup_logging(verbose)
    if by not in ("confidence", "trace"):
        raise usage(f"--by must be confidence or trace, not {by!r}")
    check_run_dir(outdir)
    try:
        table, n = _errors(outdir, limit) if errors else _verdicts(outdir, limit, by)
    except (AnalyticsInputError, DamagedOutput, OSError) as exc:
        raise outdir_failure(exc) from None
    out = Console(width=max(Console().width, 120))  # stdout: the listing is the command's result
    out.print(table)
    if limit and n > limit:
        out.print(f"... {n - limit:,} more: --limit 0 lists all", soft_wrap=True)
    raise typer.Exit(EXIT_OK)
