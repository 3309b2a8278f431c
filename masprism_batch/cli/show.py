"""Command `show`: a run's verdicts, one line per trace, in the terminal (with --errors, what was set aside; with a
TRACE_ID, that one verdict at a glance: its candidates, symptoms, agent rule and evidence, confidence, step set
and the step texts cut to a screen).

The outputs are Parquet; a user without pandas or DuckDB could not look at them without writing code. `show`
reads them with pyarrow (always installed) and prints what each output names, never re-derived.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_run_dir, outdir_failure
from masprism_batch.cli.options import OutdirArg, VerboseOpt
from masprism_batch.outdir.manifest import DamagedOutput
from masprism_batch.schema import terminal

_VERDICT_COLS = ["trace_id", "source", "system", "n_steps", "pred_step", "pred_step_agent", "pred_agent",
                 "confidence", "verdict_by", "pred_agent_rule", "read_steps", "set_size", "localised"]
STEP_CHARS = 90  # a step's text in the candidates table: one line of a wide terminal
BLAMED_CHARS = 600  # the blamed step's own text below it: a few lines, never a screenful
MESSAGE_CHARS = 600  # an errors/ message, wrapped in its column: whole but for a pathological one (it was cut at
# 160 characters, mid-word: "... only when they are a CrewAI outp")
SET_COLS = ("read_steps", "set_size", "set_share", "set_coverage", "set_by", "localised")


def _txt(text: object) -> str:
    """A data value for the terminal (`schema.terminal`)."""
    return terminal(text)


def _cut(text: str | None, n: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= n else flat[:n - 1] + f"… (+{len(flat) - n + 1:,} chars)"


def decided_by(r: dict) -> str:
    """What chose the step and, where it is not the step's author, the agent rule that chose the agent."""
    rule = r.get("pred_agent_rule") or "author"
    return (r.get("verdict_by") or "-") + ("" if rule == "author" else f"; agent_by {rule}")
_ERROR_COLS = ["input_path", "record_id", "stage", "reason", "message"]
SET_SHOWN = 2  # steps of the set named after the blamed step in the listing; the rest counted


def set_cell(r: dict) -> str:
    """The blamed step and, below it, the verdict's next steps to read: `3` / `then 5,1 +4` (best first, 4 more);
    `~` before a set that spans more than a localisation (`localised` false). The blamed step alone in outputs
    written before the step set."""
    read, step = r.get("read_steps"), str(r["pred_step"])
    if not read or len(read) < 2:
        return step if not read or r.get("localised") is not False else "~" + step
    rest = read[1:]
    head = ",".join(map(str, rest[:SET_SHOWN])) + (f" +{len(rest) - SET_SHOWN}" if len(rest) > SET_SHOWN else "")
    return f"{'~' if r.get('localised') is False else ''}{step}\nthen {head}"


def _verdicts(outdir: Path, limit: int, by: str) -> tuple[Table, int]:
    from masprism_batch.analytics import load

    rows = load.read(outdir, "attributions", columns=_VERDICT_COLS).to_pylist()
    if by == "confidence":  # the most confident first: the verdicts to review first (README)
        rows.sort(key=lambda r: (-(r["confidence"] if r["confidence"] is not None else -1.0), r["trace_id"]))
    else:
        rows.sort(key=lambda r: r["trace_id"])
    table = Table(title=f"{len(rows):,} verdicts (by {by})", title_justify="left")
    shown = rows[:limit or None]
    # an id (what a reader copies into `show OUT TRACE_ID`) and the decided-by words are not cut below these widths;
    # only a longer one folds, so the table always fits the terminal
    widths = {"trace": min(24, max((len(r["trace_id"]) for r in shown), default=5)),
              "decided by": min(24, max((len(w) for r in shown for w in decided_by(r).split()), default=5))}
    for col in ("trace", "source", "steps", "blamed step", "its author", "blamed agent", "confidence", "decided by"):
        whole = col in ("steps", "blamed step", "confidence")  # short: never broken mid-word
        table.add_column(col, overflow="fold", no_wrap=whole, min_width=widths.get(col))
    for r in shown:
        conf = "-" if r["confidence"] is None else f"{r['confidence']:.2f}"
        table.add_row(terminal(r["trace_id"]), terminal(r["source"] or "-"), str(r["n_steps"]), set_cell(r),
                      terminal(str(r["pred_step_agent"] or "-")), terminal(str(r["pred_agent"] or "-")), conf,
                      terminal(decided_by(r)))
    if any(r.get("read_steps") for r in rows):
        table.caption = ("blamed step, then the other steps to read first (best first, +N: more; together they hold "
                         "the failure's source at the run's coverage); ~: not localised, the set spans most of the log")
        table.caption_justify = "left"
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
        table.add_row(terminal(r["input_path"] or "-"), terminal(r["record_id"] or "-"), kind, terminal(r["reason"]),
                      terminal(_cut(r["message"], MESSAGE_CHARS)))
    return table, len(rows)


@app.command()
def show(outdir: Path = OutdirArg,
         trace_id: str = typer.Argument(None, help="one trace (its id as the listing shows it): its candidates, "
                                        "symptoms, agent rule and evidence, confidence, step set and step texts"),
         errors: bool = typer.Option(False, "--errors", help="list OUTDIR/errors/ instead: each rejected, set "
                                     "aside (succeeded_run) or warned record with the file it came from"),
         by: str = typer.Option("confidence", "--by", help="order of the verdicts: confidence (most confident "
                                "first) | trace"),
         limit: int = typer.Option(50, "--limit", min=0, help="rows to print (0: all)"),
         verbose: bool = VerboseOpt) -> None:
    """Print a run's verdicts, one line per trace: the blamed step, its author, the blamed agent, the
    confidence and what decided it (or, with --errors, what was rejected or set aside, file by file). With
    TRACE_ID: that verdict at a glance (candidates with their step texts, symptoms, agent rule and evidence,
    confidence, the step set where the run has one)."""
    from masprism_batch.analytics import AnalyticsInputError
    from masprism_batch.cli.common import usage

    setup_logging(verbose)
    if by not in ("confidence", "trace"):
        raise usage(f"--by must be confidence or trace, not {by!r}")
    if trace_id is not None and errors:
        raise usage("give TRACE_ID or --errors, not both")
    check_run_dir(outdir)
    out = Console(width=max(Console().width, 120))  # stdout: the listing is the command's result
    if trace_id is not None:
        try:
            lines = one_trace(outdir, trace_id)
        except (AnalyticsInputError, DamagedOutput, OSError) as exc:
            raise outdir_failure(exc) from None
        for line in lines:
            out.print(line)
        raise typer.Exit(EXIT_OK)
    try:
        table, n = _errors(outdir, limit) if errors else _verdicts(outdir, limit, by)
    except (AnalyticsInputError, DamagedOutput, OSError) as exc:
        raise outdir_failure(exc) from None
    out.print(table)
    if limit and n > limit:
        out.print(f"... {n - limit:,} more: --limit 0 lists all", soft_wrap=True)
    raise typer.Exit(EXIT_OK)


def candidates_table(a: dict, t, top: int = 5) -> Table:
    """The verdict's ranked candidates (rank 1 = pred_step), with the symptoms each explains and its text cut."""
    table = Table(title=f"{_txt(a['trace_id'])}  ({_txt(a['source'] or '-')}, {a['n_steps']} steps)",
                  title_justify="left")
    for col in ("rank", "step", "agent", "score", "symptoms it explains", "step text"):
        table.add_column(col, overflow="fold", no_wrap=col in ("rank", "step", "score"))
    for r, c in enumerate((a["candidates"] or [])[:top], 1):
        text = t.steps[c["step"]].content if t and c["step"] < len(t.steps) else ""
        score = "-" if c.get("score") is None else f"{c['score']:.3g}"
        table.add_row(str(r), str(c["step"]), _txt(c["agent"] or "-"), score,
                      ", ".join(map(str, c["symptoms"] or [])) or "-", _txt(_cut(text, STEP_CHARS)))
    return table


def verdict_line(a: dict, t=None) -> str:
    """The run's verdict as attributions hold it: the blamed step (with its author) and the blamed agent, the agent
    rule that chose it where it is not the step's author, what decided the step and its confidence."""
    author = a.get("pred_step_agent")
    if author is None and t is not None and a["pred_step"] is not None:
        author = t.steps[a["pred_step"]].agent  # outputs written before attributions carried the author
    line = f"predicted: step {a['pred_step']} (written by {author}); blamed agent: {a['pred_agent']}"
    rule = a.get("pred_agent_rule") or "author"
    if a.get("agent_by") and (a["pred_agent"] != author or rule != "author"):  # why the blame is on this agent
        line += f" ({a['agent_by']})"
    elif rule == "aggregate":
        line += " (step probabilities summed per agent)"
    elif rule != "author":
        line += f" (agent_by {rule})"
    by, conf = a.get("verdict_by"), a.get("confidence")
    if by:
        line += f"; decided by {by}" + ("" if conf is None else f", confidence {conf:.2f}")
        if by.startswith("no_symptom:"):  # said, not dressed as evidence (issue 51)
            line += " (no symptom points to this step: the rule's fallback by position, no evidence)"
    return line


def _set_line(a: dict) -> str | None:
    """The step set (verdicts a team can act on): present in outputs that carry it."""
    if a.get("read_steps") is None and a.get("set_size") is None:
        return None
    parts = [f"read steps {', '.join(map(str, a.get('read_steps') or []))}"]
    if a.get("set_size") is not None:
        parts.append(f"set_size {a['set_size']}" + ("" if a.get("set_share") is None
                                                      else f" ({a['set_share']:.0%} of the log)"))
    if a.get("set_coverage") is not None:
        parts.append(f"set_coverage {a['set_coverage']:.2f}" + (f" by {a['set_by']}" if a.get("set_by") else ""))
    if a.get("localised") is not None:
        parts.append("localised" if a["localised"] else "not localised (the set is much of the log)")
    return "step set: " + "; ".join(parts)


def one_trace(outdir: Path, trace_id: str, top: int = 5) -> list:
    """What `show OUTDIR TRACE_ID` prints: the candidates, then the verdict, its evidence and the blamed step."""
    from masprism_batch.analytics import AnalyticsInputError, load
    from masprism_batch.analytics.export_text import agent_rule_words, verdict_by_words
    from masprism_batch.trace import Trace

    trace_id = load.stored_trace_id(outdir, trace_id)  # the id as the listing shows it names the stored one
    rows = load.read(outdir, "attributions", trace_ids={trace_id}).to_pylist()
    if not rows:
        near = load.read(outdir, "attributions", columns=["trace_id"])["trace_id"].to_pylist()[:3]
        raise AnalyticsInputError(f"trace {trace_id!r} is not in {outdir / 'attributions'} (ids as `show "
                                  f"{outdir}` lists them, e.g. {', '.join(map(repr, near)) or 'none'})")
    a = max(rows, key=lambda r: (r.get("attributed_at") is not None, r.get("attributed_at") or 0))  # latest
    traces = load.read(outdir, "traces", trace_ids={trace_id}).to_pylist()
    t = Trace.from_row(traces[0]) if traces else None
    out: list = [candidates_table(a, t, top), _txt(verdict_line(a, t))]
    out.append(f"  step chosen by: {_txt(verdict_by_words(a.get('verdict_by')))}")
    out.append(f"  agent chosen by: {_txt(agent_rule_words(a.get('pred_agent_rule')))}"
               + (f"; evidence: {_txt(a['agent_by'])}" if a.get("agent_by") else ""))
    conf = a.get("confidence")
    out.append("  confidence: " + ("none (an output written before confidences)" if conf is None else
                                   f"{conf:.2f} (calibrated P(step {a['pred_step']} is right))"))
    out.append(f"  symptoms (steps where the failure shows): {', '.join(map(str, a['symptoms'] or [])) or 'none'}")
    if (line := _set_line(a)) is not None:
        out.append("  " + _txt(line))
    if a.get("category"):
        out.append(f"  failure kind: {_txt(a['category'])} ({_txt(a.get('category_family') or '-')}), "
                   f"P {a.get('category_confidence') or 0:.2f}, by {_txt(a.get('category_by') or '-')}")
    if t is not None and a["pred_step"] is not None and a["pred_step"] < len(t.steps):
        s = t.steps[a["pred_step"]]
        out.append(f"blamed step {a['pred_step']} ({_txt(s.agent or '-')}): {_txt(_cut(s.content, BLAMED_CHARS))}")
    return out
