"""Command `fit`: fit rankers to your own systems from finished runs on labelled logs, with no new prefill
. The work is fit/runs.py (runs -> cases -> one fit per system, fit/system.py) and the ranker file
verdict/rankfile.py; here: the options, the checks said before any work, and the report."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import typer

from masprism_batch import config_checks as checks
from masprism_batch.analytics.export_text import agent_rule_words
from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import check_out_file, console, fail
from masprism_batch.cli.fit_messages import confidence_words, skipped_summary, stepset_words
from masprism_batch.cli.options import VerboseOpt
from masprism_batch.schema import terminal

log = logging.getLogger(__name__)


def unfinished(runs: list[Path], allow: bool) -> None:
    """A run that did not finish is refused unless told (`--allow-partial`, then a warning)."""
    from masprism_batch.fit.runs import unfinished_runs

    partial = unfinished_runs(runs)
    if not partial:
        return
    what = (f"{', '.join(map(str, partial))}: the run did not finish (no run.json: interrupted, killed or still "
            f"running), so only its committed part would be fitted")
    if not allow:
        raise fail(f"{what}; resume it (re-run the same command) or pass --allow-partial")
    console.print(f"[yellow]warning:[/] {terminal(what)} (--allow-partial)")


def among_runs(out: Path, runs: list[Path]) -> None:
    """OUT may sit in a run's folder (RUN/ranker.json), never among its own files: in its table folders a JSON
    file beside the Parquet parts breaks every later read of them, and RUN/run.json or RUN/_... is the run's
    record (even with --force)."""
    o = out.resolve()
    for r in runs:
        rr = r.resolve()
        if o.is_relative_to(rr) and (o.parent != rr or o.name == "run.json" or o.name.startswith("_")):
            raise fail(f"-o {out} is one of the run's own files or folders ({r}): write the ranker file beside "
                       f"them, e.g. {r / 'ranker.json'}, or elsewhere")


CORRECTS = {"rule": "a correction of the zero-training rule's order",
            "rule_free": "a correction of the zero-training rule's order at a learned weight",
            "position": "a correction of the label prior (how often each step index was blamed), which alone would "
                        "name one position",
            "prior": "a correction of the label prior's re-ranking of each log's own candidates"}


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _say_skipped(problems: list[str]) -> None:
    for p in problems:
        log.debug("%s", p)  # each row with --verbose; one summary line otherwise
    if problems:
        console.print(f"[yellow]warning:[/] {terminal(skipped_summary(problems))}")


def _taxonomy(option: str | None, runs: list[Path], labelled: bool):
    """The taxonomy the category labels name: --taxonomy, else the runs' own; None when no label names a category
    or the runs were made without kinds and no --taxonomy names them (said: the steps are fitted all the same; a
    TRAIL annotation carries categories whether or not a team wants kinds). A taxonomy that cannot be read:
    FitInputError."""
    from masprism_batch.category.taxonomy import load_taxonomy
    from masprism_batch.fit.runs import FitInputError, run_taxonomy

    if not labelled:
        return None
    where = "--taxonomy"
    if option is None:
        named, on = run_taxonomy(runs)
        if not on:
            console.print("note: the labels name categories but the runs were made without --taxonomy, so no "
                          "failure kinds are fitted (give --taxonomy trail|FILE to fit them)")
            return None
        option, where = named, "the runs' taxonomy (name it with --taxonomy)"
    try:
        return load_taxonomy(None if option in (None, "trail") else option)
    except (OSError, ValueError) as exc:
        raise FitInputError(f"{where}: {exc}") from None


def kind_words(cat: dict | None) -> str | None:
    """What `fit` learned about a system's failure kinds, held out, and which kinds its verdicts will carry."""
    if not cat:
        return None
    head = (f"kinds ({cat['taxonomy']}): {cat['errors']} labelled errors in {cat['logs']} logs, "
            f"{cat['model_read']} read by the model")
    if "fitted" not in cat:
        return f"{head}; {cat.get('note', '')}"
    fb, zb = cat.get("fitted_family_balanced"), cat.get("zero_training_family_balanced")
    return (f"{head} | held out: fitted {_pct(cat['fitted'])}, zero-training {_pct(cat['zero_training'])} of "
            f"labelled steps given one of their kinds (family balanced {_pct(fb)} vs {_pct(zb)}) | kept: "
            + ("the fitted kinds" if cat["kept"] == "fitted" else "zero-training (the fit did not beat it by "
               f"{cat.get('z', 1.0):g} paired standard error)"))

def _match(name: str | None, values: list[str] | None):
    """Which records of an annotation tool's export are labels (fit/tool_labels.py); our exports' by default."""
    from masprism_batch.fit.tool_labels import DEFAULT_VALUES, Match

    return Match(name or Match.default().name, tuple(values or DEFAULT_VALUES))


@app.command("fit")
def fit(
    runs: list[Path] = typer.Argument(..., help="run directories made by `attribute`/`run` on labelled logs"),
    out: Path = typer.Option(..., "-o", "--out", help="ranker file to write (JSON; apply with --ranker)"),
    labels: Path = typer.Option(None, "--labels", help="JSON lines or CSV: trace_id, step (0-based) or span_id, "
                                "optional agent and category; or an annotation tool's export as it writes it: "
                                "Phoenix span annotations (Parquet/CSV/JSON), Langfuse scores (CSV/JSON, the "
                                "API's JSON), LangSmith feedback (JSON); replaces the labels carried by the traces"),
    label_name: str = typer.Option(None, "--label-name", help="with a tool's export: the annotation / score / "
                                   "feedback name that marks the step that caused the failure (default: "
                                   "masprism_failure_attribution, the name `export` writes)"),
    label_value: list[str] = typer.Option(None, "--label-value", help="with a tool's export: a value of that "
                                          "name meaning 'this step caused the failure' (label, stringValue or "
                                          "value; repeatable; default: failure_source; a boolean score: true)"),
    taxonomy: str = typer.Option(None, "--taxonomy", help="the failure kinds the labels' categories name: `trail` or "
                                 "a TOML file (default: the one the runs were made with, when they had --taxonomy); "
                                 "with category labels, fit learns each system's kinds too"),
    system: str = typer.Option(None, "--system", help="fit every labelled log as this one system (default: "
                               "per system: the --system its run was given, else each log's recorded system "
                               "field / source); apply with the same --system or on logs recording it"),
    force: bool = typer.Option(False, "--force", help="replace OUT if it exists (default: refuse, exit 1)"),
    allow_partial: bool = typer.Option(False, "--allow-partial", help="fit on the committed part of a run that "
                                       "did not finish (interrupted, killed or still running); refused otherwise"),
    verbose: bool = VerboseOpt,
) -> None:
    """Fit a ranker per system from finished runs on labelled logs (no new prefill): a correction of a simple
    order (the zero-training rule's, or the label prior's: the positions your labels blame most), shrunk toward
    it; which order and how much shrinkage are chosen by internal cross-validation. The step and the agent verdict are each
    chosen held out, simplest first: the zero-training rule, the label prior if it beats it, the ranker only if it
    beats that clearly. Prints per system the held-out estimates beside the rule's and the label-prior
    baselines', the verdicts used and how well the confidence ranked the held-out verdicts; writes OUT only when
    every system fitted (never a partial file)."""
    from masprism_batch.fit import runs as fr
    from masprism_batch.fit import system as fs
    from masprism_batch.verdict.rankcheck import RankerFileError, parse_checked
    from masprism_batch.verdict.rankfile import RankerFile, SystemRanker

    setup_logging(verbose)
    missing = [str(r) for r in runs if not r.is_dir()]
    if missing:
        raise fail(f"run directory not found: {', '.join(missing)}")
    if labels is not None and (problem := checks.input_file_problem(labels)) is not None:
        raise fail(f"labels file not found: {labels}" if problem == "not found" else f"--labels: {str(labels)!r} "
                   f"{problem}")
    among_runs(out, runs)
    if labels is not None and out.resolve() == labels.resolve():
        raise fail(f"-o {out} is the --labels file itself: writing the ranker there would replace your labels "
                   f"(--force or not); give another -o")
    check_out_file(out, force)  # an existing file (hand-made labels, a run's run.json) only with --force
    unfinished(runs, allow_partial)
    named: dict[str, str] = {}
    try:
        traces, rows, model_id = fr.load_runs(runs, named)
        lacking = fr.lacking_features(rows)
        if lacking:
            console.print(f"the runs lack {', '.join(lacking)} (made without --all-features); the fitted rankers "
                          "do not read them, so nothing is lost")
        cases, problems, fallback = fr.build_cases(traces, rows, labels, system, named,
                                                   _match(label_name, label_value))
        tax = _taxonomy(taxonomy, runs, any(c.gold_kinds for cs in cases.values() for c in cs))
    except fr.FitInputError as exc:
        raise fail(str(exc)) from None
    if not cases:
        _say_skipped(problems)
        raise fail("no labelled log to fit on" + (f" ({len(problems)} label rows skipped, see above; -v lists each)" if problems
                                                  else ": the runs' traces carry no labels; give --labels FILE"))
    try:
        fits = fr.fit_systems(cases, fallback, tax, problems)
    except fr.FitInputError as exc:
        raise fail(str(exc)) from None
    _say_skipped(problems)
    console.print("held out within each system (leave-one-out up to 20 logs, else 5 folds); step: top-1 (any "
                  "labelled step is a hit), agent: exact")
    for name, f in fits.items():
        e = f.estimates
        verdict = SystemRanker(f.entry, model_id or "").verdict_by
        if f.k < fs.MIN_K:
            verdict += f" (fewer than {fs.MIN_K} labelled logs: the zero-training verdict is kept)"
        elif f.verdict == "ranker":
            verdict += f" ({CORRECTS[f.entry['offset']]})"
        console.print(f"{terminal(name)}: k={f.k} | step: fitted {_pct(e['fitted'])}, zero-training rule "
                      f"{_pct(e['rule'])}, label prior (most common blamed position) {_pct(e['pos_prior'])} | agent: "
                      f"fitted {_pct(e['fitted_agent'])}, zero-training rule {_pct(e['rule_agent'])}, label prior "
                      f"(most common blamed agent) {_pct(e['agent_prior'])} | verdict: {terminal(verdict)}; agent: "
                      f"{terminal(agent_rule_words(f.entry['agent_rule']))}")
        for note in f.entry.get("notes") or []:  # e.g. the label prior is all it learned
            console.print(f"  [yellow]note:[/] {terminal(note)}")
        if words := confidence_words(f.entry):
            console.print(f"  {terminal(words)}")
        if words := stepset_words(f.entry, kept=f.k >= fs.MIN_K):
            console.print(f"  {terminal(words)}")
        if words := kind_words(f.entry.get("category")):
            console.print(f"  {terminal(words)}")
    # A system with fewer than MIN_K labels learned nothing: an entry for it would keep the rule's step and
    # replace its confidence by a flat rate (0.14 for every log, issue 51), so it is left out of the file.
    learned = {n: f for n, f in fits.items() if f.k >= fs.MIN_K}
    if not learned:
        raise fail(f"nothing learned: every system has fewer than {fs.MIN_K} labelled logs, so a ranker would "
                   f"change no verdict; no file written (label at least {fs.MIN_K} failed runs of a system)")
    if len(learned) < len(fits):
        console.print(f"[yellow]note:[/] left out of {terminal(str(out))} (fewer than {fs.MIN_K} labelled logs, "
                      f"nothing learned): {terminal(', '.join(n for n in fits if n not in learned))}")
    meta = {"date": dt.date.today().isoformat(), "fitted_by": "masprism-batch fit",
            "runs": [str(r) for r in runs], "labels": str(labels) if labels else "traces"}
    rf = RankerFile(model_id or "", {n: f.entry for n, f in learned.items()}, meta)
    try:  # as a run will read it: a fit past a reader's bound (labels naming 100,000 agents) is said now
        parse_checked(rf.to_json().encode("utf-8"), out)
    except RankerFileError as exc:
        raise fail(f"the fitted file would be refused by every run that applies it, so nothing written: {exc}. "
                   "Check the labels (an agent column holding ids?)") from None
    rf.write(out)
    console.print(f"wrote {terminal(str(out))}: {len(learned)} system(s) ({terminal(', '.join(learned))}); apply "
                  f"with --ranker {terminal(str(out))}")
    raise typer.Exit(EXIT_OK)
