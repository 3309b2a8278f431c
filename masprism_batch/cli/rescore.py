"""Command `rescore`: a new ranker, rule, coverage or system applied to a finished run, from the signals it cached
(no prefill, no model load): into a new OUTDIR, or in place with the old verdicts kept in OUT/history/.

The work is pipelines/rescore.py; this module checks the options, holds the OUTDIR locks and says what moved.
"""

from __future__ import annotations

from pathlib import Path

import typer

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_ranker, check_run_dir, console, fail, usage
from masprism_batch.cli.options import RANKER_HELP, OutdirArg, VerboseOpt, _coverage, verdict_sections
from masprism_batch.schema import terminal

# the shared options' words, with what a rescore does when one is not given: the run's own setting stays
_RankerOpt = typer.Option(None, "--ranker", metavar="rule|packaged|FILE",
                          help=RANKER_HELP.replace("`rule` (default: the zero-training rule)", "`rule` (the "
                                                   "zero-training rule)") + "; default: the run's")
_CoverageOpt = typer.Option(None, "--coverage", callback=_coverage, metavar="C",
                            help="the share of logs whose steps to read (`read_steps`) should hold the failure's "
                                 "source, held out; default: the run's")
_SystemOpt = typer.Option(None, "--system", help="the system these logs come from, as your ranker file names it; "
                          "default: the run's (--system it was given, else what each log records)")


@app.command()
def rescore(
    outdir: Path = OutdirArg,
    out: Path | None = typer.Option(None, "--out", "-o", help="write the rescored run here (a new OUTDIR)"),
    in_place: bool = typer.Option(False, "--in-place", help="replace OUTDIR's verdicts; the old ones are kept in "
                                  "OUTDIR/history/ (docs/schema.md)"),
    ranker: str | None = _RankerOpt,
    coverage: float | None = _CoverageOpt,
    system: str | None = _SystemOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Apply a new `--ranker` (a file from `fit`, `packaged`, `rule`), `--coverage` or `--system` to a finished
    run from the signals it cached: no prefill and no model load, seconds for thousands of logs. The verdicts are
    those a fresh `attribute` with the same settings gives on the same logs. Settings not given keep the run's.

    Example: masprism-batch rescore out/ --ranker ranker.json -o out-fitted/"""
    from masprism_batch.outdir.lock import OutdirLock, OutdirLocked
    from masprism_batch.outdir.manifest import DamagedOutput, OutdirUnsafe
    from masprism_batch.pipelines import rescore as rs

    setup_logging(verbose)
    if (out is None) == (not in_place):
        raise usage("give a new OUTDIR with -o, or --in-place")
    check_run_dir(outdir)
    if out is not None:
        if out.resolve() == outdir.resolve():
            raise usage("-o names OUTDIR itself: use --in-place to replace its verdicts")
        if out.resolve().is_relative_to(outdir.resolve()):  # its parts would mix with the run's (_staging: itself)
            raise usage(f"-o {out} is inside OUTDIR {outdir}: give a new OUTDIR beside it, or use --in-place")
        try:
            rs.refuse_target(out)
        except rs.RescoreError as exc:
            raise fail(str(exc)) from None
    updates = verdict_sections(ranker)
    if coverage is not None:
        updates["coverage"] = coverage
    if system is not None:
        updates["system"] = system
    try:
        old = rs.run_config(outdir)
        cfg = rs.with_settings(old, updates)
        # the run's own ranker, kept: still the file the run applied (read once, checked below as it was read)
        kept = rs.check_kept_ranker(outdir, cfg) if ranker is None else None
    except (rs.RescoreError, ValueError) as exc:
        raise fail(str(exc)) from None
    setting = check_ranker(cfg, kept if kept is not None and kept.problem is None else None)  # a problem: said there
    try:
        with OutdirLock(outdir, "rescore") as _src:
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                with OutdirLock(out, "rescore"):
                    summary = rs.rescore(outdir, out, cfg, setting)
            else:
                summary = rs.rescore(outdir, None, cfg, setting)
    except (rs.RescoreError, DamagedOutput, OutdirUnsafe, OutdirLocked) as exc:  # OutdirLocked: another run holds it
        raise fail(str(exc)) from None
    except OSError as exc:  # the output side: disk full, a file where a folder goes, permissions
        then = (f"{out} is incomplete: once that is fixed, remove it and rescore again" if out is not None else
                f"each shard of {outdir} holds its old or its new verdicts: once that is fixed, run the same rescore "
                f"again to finish")
        raise fail(f"rescore stopped: {exc}; {then}") from None
    _say(summary, in_place)
    raise typer.Exit(EXIT_OK)


def _say(s, in_place: bool) -> None:
    by = ", ".join(f"{k} x{n:,}" for k, n in s.by.most_common())
    console.print(f"rescored {s.traces:,} verdict(s) in {s.seconds:.1f} s, no prefill: {s.moved_step:,} blamed "
                  f"step(s) and {s.moved_agent:,} blamed agent(s) changed; decided by {terminal(by or '-')}")
    if in_place:
        console.print(f"the {s.archived:,} verdict(s) they replace are kept in {terminal(s.out)}/history/")
    if s.support_unknown:
        console.print(f"[yellow]note:[/] {s.support_unknown:,} log(s) come from a run made before step_scores "
                      "kept pass2_support: where a new verdict blames a candidate the old one did not list, its "
                      "symptoms are not known (re-run `attribute` for them)")
    console.print(f"next: masprism-batch show {terminal(s.out)}")
