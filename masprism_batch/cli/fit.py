"""Command `fit`: fit rankers to your own systems from finished runs on labelled logs, with no new prefill
(issue 23; method/fit.py, method/fit_system.py, the ranker file: method/rankfile.py)."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from masprism_batch.cli import EXIT_OK, app, setup_logging
from masprism_batch.cli.common import VerboseOpt, check_out_file, fail

console = Console(stderr=True)
log = logging.getLogger(__name__)
# step_scores columns the step features read (method/ranker.py step_features) and the rule's order needs
STEP_COLUMNS = ["trace_id", "step", "nll_pass1", "nll_pass2", "h_score", "score", "rank", "masprism_rank",
                "is_symptom", "is_candidate", "has_failure_word", "attention_pass1", "cf_effect", "attn_in_learned"]


def named_system(run: Path) -> str | None:
    """The system a run named (`attribute/run --system`, recorded in run.json's config), else None."""
    import json

    try:
        cfg = json.loads((run / "run.json").read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return (cfg.get("method") or {}).get("system") if isinstance(cfg, dict) else None


def load_runs(runs: list[Path], named: dict | None = None):
    """(traces by id, step_scores rows by trace id, model id) of finished runs; every run must be of one model.
    `named` (filled when given): trace id -> the system its run named with `--system`."""
    from masprism_batch.analytics import load
    from masprism_batch.trace import Trace

    traces, rows, models = {}, {}, {}
    for run in runs:
        system = named_system(run)
        if not load.has_dataset(run, "attributions"):
            raise fail(f"{run}: no attributions/ (a run directory made by `attribute` or `run` is expected)")
        for name in ("traces", "step_scores"):
            if not load.has_dataset(run, name):
                raise fail(f"{run}: no {name}/ parts: `fit` reads the run's {name} (made by `attribute`/`run`)")
        att = load.read(run, "attributions", ["trace_id", "model_id"]).to_pylist()
        for a in att:
            models.setdefault(a["model_id"], run)
        done = {a["trace_id"] for a in att}
        for r in load.read(run, "traces").to_pylist():
            if r["trace_id"] in done:
                traces[r["trace_id"]] = Trace.from_row(r)
                if named is not None and system:
                    named[r["trace_id"]] = system
        here: dict[str, dict[int, dict]] = {}
        for r in load.read(run, "step_scores", STEP_COLUMNS).to_pylist():
            here.setdefault(r["trace_id"], {})[r["step"]] = r  # a step written twice (a resumed run) counts once
        for tid, by_step in here.items():  # a trace in several runs: the last run given wins
            rows[tid] = list(by_step.values())
    if len(models) > 1:
        raise fail("runs of different models cannot be fitted together: " +
                   ", ".join(f"{m} ({p})" for m, p in models.items()))
    for v in rows.values():
        v.sort(key=lambda r: r["step"])
    return traces, rows, next(iter(models), None)


def unfinished(runs: list[Path], allow: bool) -> None:
    """A run without run.json did not finish (interrupted, killed, or still running): its committed part is a
    sample chosen by when it stopped, so `fit` refuses it unless told (`--allow-partial`, then a warning)."""
    partial = [r for r in runs if not (r / "run.json").is_file()]
    if not partial:
        return
    what = (f"{', '.join(map(str, partial))}: the run did not finish (no run.json: interrupted, killed or still "
            f"running), so only its committed part would be fitted")
    if not allow:
        raise fail(f"{what}; resume it (re-run the same command) or pass --allow-partial")
    console.print(f"[yellow]warning:[/] {escape(what)} (--allow-partial)", soft_wrap=True)


def lacking_features(rows: dict[str, list[dict]]) -> list[str]:
    """The costly features (method/reads.py) no step of the runs carries: their step_scores column is null where
    the model stage skipped them because no verdict read them."""
    from masprism_batch.method import reads

    columns = {reads.COUNTERFACTUAL: "cf_effect", reads.HEAD_ATTENTION: "attn_in_learned"}
    steps = [r for rs in rows.values() for r in rs]
    return [name for name, col in columns.items() if steps and all(r.get(col) is None for r in steps)]


def build_cases(traces, rows, labels_file: Path | None, system: str | None, named: dict | None = None):
    """{system: [FitCase]} and the label problems to report; a log's system: `system` (fit --system), else the
    one its run named (`named`), else what it records (rankfile.system_key), as `--ranker` will match it."""
    from masprism_batch.fit import fitting as ft
    from masprism_batch.fit import labels as lb
    from masprism_batch.fit.rankfile import system_key
    from masprism_batch.method import rules

    if labels_file is not None:
        try:
            gold, problems = lb.from_file(labels_file, traces)
        except (OSError, lb.LabelsFileError) as exc:
            raise fail(str(exc)) from None
    else:
        gold = {tid: g for tid, t in traces.items() if (g := lb.from_trace(t)) is not None}
        problems = []
    rule = rules.read_fallback(None).rule
    out: dict[str, list] = {}
    for tid, g in sorted(gold.items()):
        t, r = traces[tid], rows.get(tid, [])
        if len(r) != len(t.steps):
            problems.append(f"trace {tid!r}: {len(r)} step_scores rows for {len(t.steps)} steps: skipped")
            continue
        base = sorted((x for x in r if (x.get("masprism_rank") or x.get("rank"))),
                      key=lambda x: x.get("masprism_rank") or x.get("rank"))
        ranked = rules.order(rule, r, [x["step"] for x in base])
        out.setdefault(system or system_key(t, (named or {}).get(tid)), []).append(ft.FitCase(t, r, sorted(g.steps), g.agents, ranked))
    return out, problems, rule


def agent_by(rule: str) -> str:
    """The fitted agent verdict in words (`agent_rule` of a ranker file entry)."""
    if rule.startswith("prior|") or rule == "prior":
        other = rule.split("|", 1)[1] if "|" in rule else "author"
        return f"label prior (most often blamed agent present in the log, else {agent_by(other)})"
    return {"author": "author of the blamed step", "aggregate": "ranker's summed step probabilities"}.get(
        rule, f"zero-training rule {rule}")


CORRECTS = {"rule": "a correction of the zero-training rule's order",
            "rule_free": "a correction of the zero-training rule's order at a learned weight",
            "prior": "a correction of the label prior's re-ranking of each log's own candidates"}


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


@app.command("fit")
def fit(
    runs: list[Path] = typer.Argument(..., help="run directories made by `attribute`/`run` on labelled logs"),
    out: Path = typer.Option(..., "-o", "--out", help="ranker file to write (JSON; apply with --ranker)"),
    labels: Path = typer.Option(None, "--labels", help="JSON lines or CSV: trace_id, step (0-based) or span_id, "
                                "optional agent; replaces the labels carried by the traces"),
    system: str = typer.Option(None, "--system", help="fit every labelled log as this one system (default: "
                               "per system: the --system its run was given, else each log's recorded system "
                               "field / source); apply with the same --system or on logs recording it"),
    allow_partial: bool = typer.Option(False, "--allow-partial", help="fit on the committed part of a run that "
                                       "did not finish (interrupted, killed or still running); refused otherwise"),
    verbose: bool = VerboseOpt,
) -> None:
    """Fit a ranker per system from finished runs on labelled logs (no new prefill): a correction of a simple
    order (the zero-training rule's, or the label prior's: the positions your labels blame most), shrunk toward
    it; which order and how much shrinkage are chosen by internal cross-validation. The step and the agent verdict are each
    chosen held out, simplest first: the zero-training rule, the label prior if it beats it, the ranker only if it
    beats that clearly. Prints per system the held-out estimates beside the rule's and the label-prior
    baselines' and the verdicts used; writes OUT only when every system fitted (never a partial file)."""
    from masprism_batch.fit import system as fs
    from masprism_batch.fit.rankfile import RankerFile, SystemRanker
    from masprism_batch.method import rules

    setup_logging(verbose)
    missing = [str(r) for r in runs if not r.is_dir()]
    if missing:
        raise fail(f"run directory not found: {', '.join(missing)}")
    if labels is not None and not labels.is_file():
        raise fail(f"labels file not found: {labels}")
    check_out_file(out)
    unfinished(runs, allow_partial)
    named: dict[str, str] = {}
    traces, rows, model_id = load_runs(runs, named)
    lacking = lacking_features(rows)
    if lacking:
        console.print(f"the runs lack {', '.join(lacking)} (made without --all-features); the fitted rankers do not "
                      "read them, so nothing is lost", soft_wrap=True)
    cases, problems, rule = build_cases(traces, rows, labels, system, named)
    for p in problems:
        log.debug("%s", p)  # each row with --verbose; one summary line otherwise
    if problems:
        from masprism_batch.cli.fit_messages import skipped_summary

        console.print(f"[yellow]warning:[/] {escape(skipped_summary(problems))}", soft_wrap=True)
    if not cases:
        raise fail("no labelled log to fit on" + (f" ({len(problems)} label rows skipped, see above; -v lists each)" if problems
                                                  else ": the runs' traces carry no labels; give --labels FILE"))
    fits = {}
    for name, cs in sorted(cases.items()):
        try:
            # the zero-training agent rule a log of an unfitted system gets (what the fit must beat)
            fits[name] = fs.fit_system(cs, name, rule=rule, rule_agent=rules.read_fallback(None).agent_rule)
        except (ValueError, ArithmeticError) as exc:
            raise fail(f"system {name!r}: {exc}") from None
    console.print("held out within each system (leave-one-out up to 20 logs, else 5 folds); step: top-1 (any "
                  "labelled step is a hit), agent: exact", soft_wrap=True)
    for name, f in fits.items():
        e = f.estimates
        verdict = SystemRanker(f.entry, model_id or "").verdict_by
        if f.k < fs.MIN_K:
            verdict += f" (fewer than {fs.MIN_K} labelled logs: the zero-training verdict is kept)"
        elif f.verdict == "ranker":
            verdict += f" ({CORRECTS[f.entry['offset']]})"
        console.print(f"{escape(name)}: k={f.k} | step: fitted {_pct(e['fitted'])}, zero-training rule "
                      f"{_pct(e['rule'])}, label prior (most common blamed position) {_pct(e['pos_prior'])} | agent: "
                      f"fitted {_pct(e['fitted_agent'])}, zero-training rule {_pct(e['rule_agent'])}, label prior "
                      f"(most common blamed agent) {_pct(e['agent_prior'])} | verdict: {escape(verdict)}; agent: "
                      f"{escape(agent_by(f.entry['agent_rule']))}", soft_wrap=True)
        for note in f.entry.get("notes") or []:  # e.g. the label prior is all it learned (issue 32)
            console.print(f"  [yellow]note:[/] {escape(note)}", soft_wrap=True)
    meta = {"date": dt.date.today().isoformat(), "fitted_by": "masprism-batch fit",
            "runs": [str(r) for r in runs], "labels": str(labels) if labels else "traces"}
    RankerFile(model_id or "", {n: f.entry for n, f in fits.items()}, meta).write(out)
    console.print(f"wrote {escape(str(out))}: {len(fits)} system(s); apply with --ranker {escape(str(out))}")
    raise typer.Exit(EXIT_OK)
