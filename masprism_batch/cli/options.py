"""The options the commands share, each said once (name, help), and the typed config they build.

A command declares `model: str = ModelOpt` and so on, collects what it was given in `ConfigOptions` and builds
the run's config with `build_config`: sections set by name (`config.config_with`), never `section__field`
strings. The verdict is chosen by one option, `--ranker` (`verdict_sections`); `--method` is its deprecated
alias.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from masprism_batch.cli.common import console, fail, usage
from masprism_batch.cli.progress import DEFAULT_INTERVAL

FormatHelp = "input format for raw inputs (see `ingest`); a forced one is checked on the first files"
ALL_FEATURES_HELP = ("compute counterfactuals and per-head attention for every log, also where its verdict does "
                     "not read them (runs made to fit a ranker; default: only where read, method/reads.py)")
RANKER_HELP = ("which verdict each log gets: `rule` (default: the zero-training rule), `packaged` (the rankers "
               "fitted on the benchmark systems, for logs of those systems), a ranker FILE from `masprism-batch "
               "fit` (logs of the systems it holds get their fitted verdict, the others the zero-training rule), "
               "or `masprism` (the paper's method as published)")
RULE, MASPRISM = "rule", "masprism"  # the --ranker values that name no file

VerboseOpt = typer.Option(False, "--verbose", "-v", help="debug logging (each stage's log lines)")
AllRunsOpt = typer.Option(False, "--all-runs", help="also attribute runs graded as passed (default: every run but "
                          "those a grade says passed: tau-bench's reward, --outcomes, --outcome-name; they are "
                          "counted and listed in OUT/errors/ as succeeded_run). A status of OK is no grade")
OutcomesOpt = typer.Option(None, "--outcomes", metavar="FILE", help="your graded outcomes: runs graded passed are set "
                           "aside (listed in OUT/errors/ as succeeded_run), the others attributed. CSV, JSON lines, "
                           "JSON or Parquet with a trace id (trace_id, context.trace_id, traceId, run_id) and a "
                           "pass/fail label or a score, as Phoenix, Langfuse and LangSmith export evaluations")
OutcomeNameOpt = typer.Option(None, "--outcome-name", metavar="NAME", help="the evaluation that grades a run: its rows "
                              "in --outcomes, else a score of that name the log records (Langfuse scores, LangSmith "
                              "feedback)")
PassThresholdOpt = typer.Option(1.0, "--pass-threshold", help="a score at or above it passes (--outcomes, "
                                "--outcome-name)")
RefreshOpt = typer.Option(False, "--refresh", help="re-attribute the traces of input files changed since "
                          "OUT's last run whose content changed (default: a changed file's new traces only); their "
                          "old verdicts are kept in OUT/history/")
FormatOpt = typer.Option("auto", "--format", "-f", help=FormatHelp)
ModelOpt = typer.Option(None, "--model", "-m", help="smollm2-135m (default) | gemma3-270m | tiny-random | PATH (HF folder or .gguf); `models` lists them")
ConfigOpt = typer.Option(None, "--config", help="JSON or TOML file with PipelineConfig sections")
ContextOpt = typer.Option(None, "--max-context", help="tokens per prompt (default from config)")
RankerOpt = typer.Option(None, "--ranker", metavar="rule|packaged|FILE|masprism", help=RANKER_HELP)
MethodOpt = typer.Option(None, "--method", hidden=True, help="deprecated: --ranker masprism")
SystemOpt = typer.Option(None, "--system", help="the system these logs come from, as your ranker file names it "
                         "(default: what each log records: service name, framework; never guessed from its shape)")
TaxonomyOpt = typer.Option(None, "--taxonomy", help="name a failure kind for each verdict (opt-in, "
                           "experimental: docs/categories.md): `trail` for TRAIL's 20 kinds, or a TOML file of your "
                           "own ([[kind]] name, family, description)")
TokenBudgetOpt = typer.Option(None, "--token-budget", help="max tokens per packed prefill batch (default: sized for "
                              "the device: 8,192 on CPU, from free memory on CUDA; run.json names it)")
ShardOpt = typer.Option(None, "--traces-per-shard", help="traces per committed output shard")
ThreadsOpt = typer.Option(None, "--threads", help="torch CPU threads per model (default: the cores the load average "
                          "leaves free; `run --engine ray`: CPUs / workers)")
AllFeaturesOpt = typer.Option(False, "--all-features", help=ALL_FEATURES_HELP)
LimitOpt = typer.Option(None, "--limit", min=1, help="attribute the first N traces (input order; smoke runs)")
SampleOpt = typer.Option(None, "--sample", min=1, help="attribute a deterministic sample of N traces, every source "
                         "represented (see --seed); another sample into the same OUT is refused")
SeedOpt = typer.Option(0, "--seed", help="seed of --sample")
ProgressOpt = typer.Option(True, help="live progress bar (traces/s, tokens/s, ETA)")
OutdirArg = typer.Argument(..., help="OUTDIR of an `attribute`/`run` command")
ForceOpt = typer.Option(False, "--force", help="replace FILE if it exists (default: refuse, exit 1)")


def _coverage(value: float | None) -> float | None:
    if value is not None and not 0.0 < value < 1.0:
        raise typer.BadParameter(f"{value:g} is not a share strictly between 0 and 1 (e.g. 0.8)")
    return value


CoverageOpt = typer.Option(None, "--coverage", callback=_coverage, metavar="C",
                           help="how often each verdict's steps to read (`read_steps`) should hold the failure's "
                                "source, as a share of logs, held out (default 0.8): calibrated on your labelled "
                                "logs by `fit`, else on the dev systems (a new system's estimate)")
IntervalOpt = typer.Option(DEFAULT_INTERVAL, "--progress-interval", min=0,
                           help="seconds between progress lines when stderr is not a terminal (0: none)")


@dataclass
class ConfigOptions:
    """What a command's options set in the run's config; None (False for a flag): left to the config file."""

    config: str | None = None  # --config FILE
    model: str | None = None
    max_context: int | None = None
    threads: int | None = None
    ranker: str | None = None
    method: str | None = None  # deprecated alias of --ranker masprism
    system: str | None = None
    taxonomy: str | None = None
    token_budget: int | None = None
    traces_per_shard: int | None = None
    all_runs: bool = False
    all_features: bool = False
    coverage: float | None = None
    outcomes: str | None = None  # --outcomes FILE, --outcome-name, --pass-threshold (ingest/outcomes.py)
    outcome_name: str | None = None
    pass_threshold: float | None = None

    def sections(self) -> dict[str, dict]:
        """The config sections these options set, by name."""
        given = {
            "model": {"name": self.model, "threads": self.threads},
            "render": {"max_context": self.max_context},
            "method": {"system": self.system, "features": "all" if self.all_features else None,
                       "coverage": self.coverage},
            "batch": {"token_budget": self.token_budget},
            "engine": {"traces_per_shard": self.traces_per_shard},
            "ingest": {"all_runs": True if self.all_runs else None,
                       "outcomes": str(Path(self.outcomes).resolve()) if self.outcomes else None,
                       "outcome_name": self.outcome_name,
                       "pass_threshold": self.pass_threshold if self.pass_threshold not in (None, 1.0) else None},
        }
        out = {s: {k: v for k, v in d.items() if v is not None} for s, d in given.items()}
        out["method"].update(verdict_sections(self.ranker, self.method))
        if self.taxonomy:  # `trail` names the packaged TRAIL kinds, else a TOML file; either turns the kinds on
            out["method"].update(categories=True, taxonomy=None if str(self.taxonomy) == "trail" else str(self.taxonomy))
        return {s: d for s, d in out.items() if d}


def verdict_sections(ranker: str | None, method: str | None = None) -> dict:
    """The method settings `--ranker` chooses (and the deprecated `--method`, said once as a warning): `rule` the
    ranked method without a ranker file, `masprism` the paper's method, else a ranker setting (`packaged` or a
    file). Nothing given: what the config file says."""
    if method is not None:
        console.print("[yellow]warning:[/] --method is deprecated: --ranker chooses the verdict "
                      "(`--ranker masprism` for the paper's method; the ranked method is the default)")
        if ranker is not None and (method == MASPRISM) != (ranker == MASPRISM):
            raise usage(f"--method {method} and --ranker {ranker} choose two verdicts: give --ranker alone")
        if ranker is None:  # an unknown name is refused by the config, as before (exit 1, bad configuration)
            return {"name": method}
    if ranker is None:
        return {}
    if ranker == MASPRISM:
        return {"name": MASPRISM, "ranker": None}
    return {"name": "ranked", "ranker": None if ranker == RULE else str(ranker)}


def build_config(opts: ConfigOptions):
    """The run's typed config: the config file's (or the defaults), the options set over it. A bad value is one
    `error: bad configuration` line, exit 1."""
    from masprism_batch.config import config_with

    sections = opts.sections()
    try:
        return config_with(opts.config, sections)
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise fail(f"bad configuration: {exc}") from None
