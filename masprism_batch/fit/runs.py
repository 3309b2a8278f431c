"""What `masprism-batch fit` fits on: finished runs on labelled logs read back (traces, step_scores, model),
grouped per system into fitting cases, then one fit per system (fit/system.py). No new prefill.
"""

from __future__ import annotations

import json
from pathlib import Path

from masprism_batch.fit import categories as fc
from masprism_batch.fit import labels as lb
from masprism_batch.fit import system as fs
from masprism_batch.method import reads
from masprism_batch.trace import Trace
from masprism_batch.verdict import case as vcase
from masprism_batch.verdict import rules
from masprism_batch.verdict.rankfile import system_key

# step_scores columns the step features read (method/ranker.py step_features) and the rule's order needs
STEP_COLUMNS = ["trace_id", "step", "nll_pass1", "nll_pass2", "h_score", "score", "rank", "masprism_rank",
                "is_symptom", "is_candidate", "has_failure_word", "attention_pass1", "cf_effect", "attn_in_learned",
                "category_pmi"]  # the model's evidence for each kind where it was read (fit/categories.py)


class FitInputError(ValueError):
    """Runs or labels `fit` cannot use (said to the user as one line)."""


def named_system(run: Path) -> str | None:
    """The system a run named (`attribute/run --system`, recorded in run.json's config), else None."""
    try:
        cfg = json.loads((run / "run.json").read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError, AttributeError):
        return None
    method = cfg.get("method") if isinstance(cfg, dict) else None
    named = method.get("system") if isinstance(method, dict) else None
    return named if isinstance(named, str) and named else None  # a hand-edited run.json's list is no name


def load_runs(runs: list[Path], named: dict | None = None):
    """(traces by id, step_scores rows by trace id, model id) of finished runs; every run must be of one model.
    `named` (filled when given): trace id -> the system its run named with `--system`. A run whose outputs
    cannot be read: FitInputError naming it."""
    traces, rows, models = {}, {}, {}
    for run in runs:
        try:
            _read_run(run, traces, rows, models, named)
        except FitInputError:
            raise
        except (ValueError, OSError) as exc:  # a part cut short (DamagedOutput), a stray file among the parts
            raise FitInputError(f"{run}: its outputs cannot be read ({type(exc).__name__}: {str(exc)[:400]})") \
                from None
    if len(models) > 1:
        raise FitInputError("runs of different models cannot be fitted together: " +
                            ", ".join(f"{m} ({p})" for m, p in models.items()))
    for v in rows.values():
        v.sort(key=lambda r: r["step"])
    return traces, rows, next(iter(models), None)


def _read_run(run: Path, traces: dict, rows: dict, models: dict, named: dict | None) -> None:
    """One run's traces, step rows and model ids into the accumulators of `load_runs`."""
    from masprism_batch.analytics import load

    system = named_system(run)
    if not load.has_dataset(run, "attributions"):
        raise FitInputError(f"{run}: no attributions/ (a run directory made by `attribute` or `run` is expected)")
    for name in ("traces", "step_scores"):
        if not load.has_dataset(run, name):
            raise FitInputError(f"{run}: no {name}/ parts: `fit` reads the run's {name} (made by "
                                f"`attribute`/`run`)")
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


def unfinished_runs(runs: list[Path]) -> list[Path]:
    """The runs without run.json: interrupted, killed or still running (their committed part is a sample
    chosen by when they stopped)."""
    return [r for r in runs if not (r / "run.json").is_file()]


def lacking_features(rows: dict[str, list[dict]]) -> list[str]:
    """The costly features (method/reads.py) no step of the runs carries: their step_scores column is null where
    the model stage skipped them because no verdict read them."""
    steps = [r for rs in rows.values() for r in rs]
    return [name for name, col in reads.COLUMNS.items() if steps and all(r.get(col) is None for r in steps)]


def build_cases(traces, rows, labels_file: Path | None, system: str | None, named: dict | None = None,
                match=None):
    """({system: [LogCase]}, the label problems to report, the zero-training fallback the cases are ordered by); a
    log's system: `system` (fit --system), else the one its run named (`named`), else what it records
    (rankfile.system_key), as `--ranker` will match it. A labels file that cannot be read: FitInputError.
    `match` (fit/tool_labels.Match): which records of an annotation tool's export are labels."""
    if labels_file is not None:
        try:
            gold, problems = lb.from_file(labels_file, traces, match)
        except (OSError, lb.LabelsFileError) as exc:
            raise FitInputError(str(exc)) from None
    else:
        gold = {tid: g for tid, t in traces.items() if (g := lb.from_trace(t)) is not None}
        problems = []
    fallback = rules.read_fallback(None)
    out: dict[str, list] = {}
    for tid, g in sorted(gold.items()):
        t, r = traces[tid], rows.get(tid, [])
        if len(r) != len(t.steps):
            problems.append(f"trace {tid!r}: {len(r)} step_scores rows for {len(t.steps)} steps: skipped")
            continue
        base = sorted((x for x in r if (x.get("masprism_rank") or x.get("rank"))),
                      key=lambda x: x.get("masprism_rank") or x.get("rank"))
        ranked = rules.order(fallback.rule, r, [x["step"] for x in base])
        key = system or system_key(t, (named or {}).get(tid))
        out.setdefault(key, []).append(vcase.LogCase(t, r, sorted(g.steps), g.agents, ranked, gold_kinds=g.kinds))
    return out, problems, fallback


def fit_systems(cases: dict[str, list], fallback: rules.Fallback, taxonomy=None,
                problems: list[str] | None = None) -> dict[str, fs.SystemFit]:
    """One fit per system, against the zero-training agent rule and confidence a log of an unfitted system gets
    (what the fit must beat); a system that cannot be fitted: FitInputError naming it. With a `taxonomy`, a
    system whose labels name categories also gets its kinds fitted (entry["category"], fit/categories.py);
    labels naming no kind of it are appended to `problems`."""
    fits = {}
    for name, cs in sorted(cases.items()):
        try:
            fits[name] = fs.fit_system(cs, name, rule=fallback.rule, rule_agent=fallback.agent_rule,
                                       zero_cal=fallback.calibration)
            if taxonomy is not None and (d := fc.kind_data(cs, taxonomy, problems if problems is not None else [])):
                fits[name].entry["category"] = fc.fit_kinds(d, taxonomy, name)
        except (ValueError, ArithmeticError) as exc:
            raise FitInputError(f"system {name!r}: {exc}") from None
    return fits


def run_taxonomy(runs: list[Path]) -> tuple[str | None, bool]:
    """(the taxonomy the runs named: None for TRAIL's, else the TOML path as given, and whether any run had the
    failure kinds on); runs naming different taxonomies: FitInputError."""
    named, on = set(), False
    for run in runs:
        try:
            cfg = json.loads((run / "run.json").read_text(encoding="utf-8")).get("config") or {}
        except (OSError, ValueError, AttributeError):
            continue
        m = cfg.get("method") if isinstance(cfg, dict) else None
        if isinstance(m, dict) and m.get("categories"):
            on = True
            if not isinstance(m.get("taxonomy"), (str, type(None))):  # a hand-edited run.json
                raise FitInputError(f"{run}/run.json: method.taxonomy {json.dumps(m['taxonomy'])[:80]} names no "
                                    "taxonomy; name one with --taxonomy trail|FILE")
            named.add(m.get("taxonomy"))
    if len(named) > 1:
        raise FitInputError("the runs name different taxonomies (" + ", ".join(sorted(map(str, named))) +
                            "): fit the runs of one taxonomy together, or name one with --taxonomy")
    return next(iter(named), None), on
