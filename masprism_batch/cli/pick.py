"""Command `pick`: the N logs of a run whose labels would help the next `fit` most, written as a labels file to
fill in (blank `step` and `agent` columns that `fit --labels` reads as they are).

The selection is analytics/pick.py's (the one the benchmark measures); this module reads the run, excludes what is
labelled already and writes the file.
"""

from __future__ import annotations

import csv
import shlex
from pathlib import Path

import typer

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_out_file, check_run_dir, console, fail, outdir_failure
from masprism_batch.cli.options import OutdirArg, VerboseOpt
from masprism_batch.schema import terminal

_COLS = ["trace_id", "system", "n_steps", "pred_step", "pred_agent", "confidence", "read_steps", "set_share",
         "attributed_at"]
# the file's columns: what fit reads first (trace_id, step, agent: blank to fill in), then what helps to fill it
FILE_COLUMNS = ["trace_id", "step", "agent", "verdict_step", "verdict_agent", "confidence", "read_steps",
                "set_size", "n_steps", "system", "show"]


@app.command()
def pick(
    outdir: Path = OutdirArg,
    n: int = typer.Option(20, "-n", "--n", min=1, help="how many logs to pick"),
    out: Path = typer.Option(..., "--out", "-o", help="the labels file to write (CSV)"),
    labels: list[Path] = typer.Option([], "--labels", help="labels you already have (a labels file as `fit "
                                      "--labels` reads it: CSV or JSON lines); their logs are not picked again"),
    force: bool = typer.Option(False, "--force", help="replace FILE if it exists (default: refuse, exit 1)"),
    verbose: bool = VerboseOpt,
) -> None:
    """Pick the N logs to label for the next `fit`: per system, logs spread over its verdicts from the surest to the
    least sure (confidence and step set), systems in turn, no near-duplicates, none already labelled (in the
    traces or in --labels). Writes a CSV to fill in: per log the verdict, its steps to read and the command that
    shows it (a cell that would start a spreadsheet formula, =, +, -, @, has an apostrophe before it, which fit
    takes off again); write the labelled step (0-based) and agent in the blank `step` / `agent` columns, then
    `masprism-batch fit OUTDIR --labels FILE -o ranker.json` (rows left blank are skipped and counted).

    Example: masprism-batch pick out/ -n 20 -o to_label.csv"""
    from masprism_batch.analytics import load
    from masprism_batch.analytics.pick import Candidate, labelled_ids
    from masprism_batch.analytics.pick import pick as choose
    from masprism_batch.outdir.manifest import DamagedOutput, OutdirUnsafe
    from masprism_batch.outdir.parts import atomic_output
    from masprism_batch.trace import sheet_cell

    setup_logging(verbose)
    check_run_dir(outdir)
    check_out_file(out, force)
    done: set[str] = set()
    for f in labels:
        if not f.is_file():
            raise fail(f"--labels: {f} not found")
        done |= labelled_ids(f)
    try:
        att, _ = load.latest_per_trace(load.read(outdir, "attributions", _COLS))
        traces = load.read(outdir, "traces", ["trace_id", "question", "labels"]).to_pylist()
    except (DamagedOutput, OutdirUnsafe, load.AnalyticsInputError) as exc:
        raise outdir_failure(exc) from None
    question = {t["trace_id"]: t["question"] for t in traces}
    carried = {t["trace_id"] for t in traces if t["labels"] is not None}
    rows = {r["trace_id"]: r for r in att.to_pylist() if r["pred_step"] is not None}
    cands = [Candidate(r["trace_id"], r["system"], r["n_steps"] or 0, r["pred_step"], r["pred_agent"], r["confidence"],
                       r["set_share"], (question.get(r["trace_id"]), r["n_steps"]) if question.get(r["trace_id"])
                       else None) for r in rows.values()]
    excluded = (done | carried) & set(rows)
    chosen = choose(cands, n, excluded)
    with atomic_output(out) as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(FILE_COLUMNS)
        for c in chosen:
            r = rows[c.trace_id]
            read = r["read_steps"]
            # a log's own text (id, agent, system) never runs as a formula where the file is opened
            w.writerow([sheet_cell(c.trace_id), "", "", r["pred_step"], sheet_cell(r["pred_agent"] or ""),
                        "" if r["confidence"] is None else f"{r['confidence']:.3f}",
                        " ".join(map(str, read)) if read else "", len(read) if read else "", r["n_steps"],
                        sheet_cell(r["system"] or ""), f"masprism-batch show {shlex.quote(str(outdir))} {shlex.quote(c.trace_id)}"])
    if not chosen:
        why = (f"every one of the {len(rows):,} attributed log(s) is labelled already" if rows
               else f"no attributed log in {terminal(outdir)}")
        console.print(f"nothing to pick: {why}; {terminal(out)} holds the header only")
        raise typer.Exit(EXIT_OK)
    console.print(f"picked {len(chosen):,} of {len(rows):,} attributed log(s) to label ({len(excluded):,} already "
                  f"labelled, left out) into {terminal(out)}: fill in `step` (0-based) and `agent`, then "
                  f"masprism-batch fit {terminal(outdir)} --labels {terminal(out)} -o ranker.json")
    raise typer.Exit(EXIT_OK)
