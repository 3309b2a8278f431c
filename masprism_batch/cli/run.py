"""Command `run`: the resumable batch run, on the local engine (embedded) or on Ray. `execute` is that run, which
`attribute` makes too (`--engine local`); `run_here` the in-process run of `demo` and `eval`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import typer

from masprism_batch.cli import app, setup_logging
from masprism_batch.cli.common import (
    check_inputs,
    check_outdir,
    check_prompt_or_fail,
    check_ranker,
    check_some_data,
    console,
    fail,
    load_model_or_fail,
    no_traces_message,
    ranker_matches,
    usage,
)
from masprism_batch.cli.options import (
    AllFeaturesOpt,
    AllRunsOpt,
    ConfigOpt,
    ConfigOptions,
    ContextOpt,
    CoverageOpt,
    FormatOpt,
    IntervalOpt,
    LimitOpt,
    MethodOpt,
    ModelOpt,
    OutcomeNameOpt,
    OutcomesOpt,
    PassThresholdOpt,
    ProgressOpt,
    RankerOpt,
    RefreshOpt,
    SampleOpt,
    SeedOpt,
    ShardOpt,
    SystemOpt,
    TaxonomyOpt,
    ThreadsOpt,
    TokenBudgetOpt,
    VerboseOpt,
    build_config,
)
from masprism_batch.cli.progress import DEFAULT_INTERVAL, heartbeat
from masprism_batch.schema import terminal

log = logging.getLogger("masprism_batch.cli")


class Engine(str, Enum):
    local = "local"
    ray = "ray"


@dataclass
class Job:
    """How a run is executed and shown, beside what it computes (`ConfigOptions`)."""

    engine: Engine = Engine.local
    workers: int | None = None
    address: str | None = None
    num_cpus: int | None = None
    fmt: str = "auto"
    limit: int | None = None
    sample: int | None = None
    seed: int = 0
    progress: bool = True
    progress_interval: float = DEFAULT_INTERVAL
    refresh_changed: bool = False  # --refresh (pipelines/refresh.py)


@app.command()
def run(
    inputs: list[str] = typer.Argument(..., help="raw trace files/dirs (ingested once) or canonical traces Parquet"),
    out: Path = typer.Option(..., "-o", "--out", help="output directory (re-run the same command to resume)"),
    engine: Engine = typer.Option(Engine.local, help="local: in this process; ray: Ray Data actors"),
    workers: int = typer.Option(None, min=1, help="model actors (ray; default: one per GPU, else 1)"),
    address: str = typer.Option(None, help="join this Ray cluster (ray://… or host:port; default: $RAY_ADDRESS "
                                "if set, else start a private one)"),
    num_cpus: int = typer.Option(None, help="CPUs of the local Ray cluster this command starts"),
    model: str = ModelOpt, config: str = ConfigOpt, max_context: int = ContextOpt, ranker: str = RankerOpt,
    method: str = MethodOpt, system: str = SystemOpt, taxonomy: Path = TaxonomyOpt,
    token_budget: int = TokenBudgetOpt, traces_per_shard: int = ShardOpt, threads: int = ThreadsOpt,
    all_features: bool = AllFeaturesOpt, fmt: str = FormatOpt, all_runs: bool = AllRunsOpt,
    coverage: float = CoverageOpt,
    outcomes: Path = OutcomesOpt, outcome_name: str = OutcomeNameOpt, pass_threshold: float = PassThresholdOpt,
    limit: int = LimitOpt, sample: int = SampleOpt, seed: int = SeedOpt,
    progress: bool = ProgressOpt, progress_interval: float = IntervalOpt, refresh_changed: bool = RefreshOpt,
    verbose: bool = VerboseOpt,
):
    """The overnight job: attribute millions of logs on a Ray cluster (or embedded), resumable and exactly-once
    per shard. Same outputs as `attribute` (OUT/{traces,attributions,step_scores,errors}/, OUT/run.json) plus
    OUT/_manifest/; re-run the same command to resume."""
    setup_logging(verbose)
    opts = ConfigOptions(config, model, max_context, threads, ranker, method, system, taxonomy, token_budget,
                         traces_per_shard, all_runs, all_features, coverage, outcomes=outcomes,
                         outcome_name=outcome_name, pass_threshold=pass_threshold)
    execute(inputs, out, opts, Job(engine, workers, address, num_cpus, fmt, limit, sample, seed, progress,
                                   progress_interval, refresh_changed))


def run_here(inputs: list[str], outdir: Path, cfg, model, ranker, interval: float = DEFAULT_INTERVAL, select=None):
    """ingest (+ selection) -> attribute -> write, on the local engine, every write under the OUTDIR lock
    (resumable: re-running skips committed shards), with the model and the ranker setting already loaded."""
    from masprism_batch.pipelines import run_local

    with heartbeat(interval) as display:
        return run_local(list(inputs), outdir, cfg, progress=display, model=model, select=select, ranker=ranker)


def execute(inputs: list[str], out: Path, opts: ConfigOptions, job: Job):
    """Check everything that can be checked before any work, build the config, run, and say what was done
    (exits with the run's exit code)."""
    from masprism_batch.ingest import FORMATS
    from masprism_batch.pipelines import run_local, run_ray
    from masprism_batch.pipelines.selection import Selection
    from masprism_batch.pipelines.staging import staging_conflict

    engine, workers, address, fmt = job.engine, job.workers, job.address, job.fmt
    limit, sample, progress = job.limit, job.sample, job.progress
    if engine is Engine.local and (workers not in (None, 1) or address):
        raise usage("--workers/--address apply to --engine ray; the local engine runs one model")
    if limit and sample:
        raise usage("--limit and --sample exclude each other")
    select = Selection(limit=limit, sample=sample, seed=job.seed)
    if fmt not in FORMATS:
        raise usage(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    check_inputs(inputs)
    check_some_data(inputs)
    from masprism_batch.cli.probe import check_format

    check_format(list(inputs), fmt)  # before OUT exists: a wrong --format leaves nothing behind
    check_outdir(out)
    cfg = build_config(opts)
    check_outcomes(cfg)
    conflict = staging_conflict(out, list(inputs), fmt, select)
    if conflict:  # answered before a model is loaded (stage_raw checks again under the OUTDIR lock)
        raise fail(conflict)
    # A first run into OUTDIR loads the model before OUTDIR is touched (below). A rerun into a bound OUTDIR loads
    # it only once the OUTDIR lock is held, the configuration checked against the header and a shard found
    # pending (issue 60: a nightly rerun with nothing new, or one refused as "in use", costs no model load).
    ranker = check_ranker(cfg)  # the one read of the ranker file this run makes
    bound = (out / "_manifest" / "HEADER.json").is_file()
    if engine is not Engine.local or not bound:
        # a rerun into a bound OUTDIR skips it: its header names the model that ran (a change is refused
        # there), and this check imports the model package (torch), seconds a rerun with nothing new needs not
        from masprism_batch.model import ModelNotFoundError, require_model

        try:
            require_model(cfg.model.name)
        except ModelNotFoundError as exc:
            raise fail(f"cannot load model {cfg.model.name!r}: {exc}") from None
    if engine is not Engine.local:
        check_prompt_or_fail(cfg)  # its tokenizer only (the actors load the model): the prompt leaves room

    def load_checked(run_cfg):  # the local engine's load, once work is found (pipelines/local.run_local)
        loaded = load_model_or_fail(run_cfg, ranker)
        check_ranker(run_cfg, ranker, loaded.model_id)
        return loaded

    fresh = not out.exists() or not any(out.iterdir())
    early, early_seconds = None, None
    if engine is Engine.local and not bound:
        # a first run into OUTDIR has all its work ahead: the model is loaded before OUTDIR is touched, as before,
        # so what only the loaded model can check (its prompt room, a ranker file's model) is refused with
        # nothing left behind; "in use" is still said first, without the load
        _refuse_in_use(out)
        t0 = time.perf_counter()
        early = load_checked(cfg)
        early_seconds = round(time.perf_counter() - t0, 3)
    try:
        with heartbeat(job.progress_interval if progress else 0, show=progress) as display:
            if engine is Engine.local:
                summary = run_local(inputs, out, cfg, fmt=fmt, progress=display, load_model=load_checked,
                                    model=early, seconds_model_load=early_seconds, select=select, ranker=ranker,
                                    refresh=job.refresh_changed)
            else:
                summary = run_ray(inputs, out, cfg, workers=workers, address=address, num_cpus=job.num_cpus,
                                  fmt=fmt, progress=display, select=select, ranker=ranker,
                                  refresh=job.refresh_changed)
    except KeyboardInterrupt as exc:  # SIGTERM/SIGHUP/SIGINT: a clean stop, never blamed on a trace
        from masprism_batch.pipelines.interrupts import exit_status, signal_name

        kept = getattr(exc, "kept", None) or f"what was committed is kept in {out}"  # (set by the engine)
        raise fail(f"interrupted ({signal_name(exc)}): {kept}; re-run the same command to resume",
                   exit_status(exc)) from None
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc}") from None
    from masprism_batch.ingest.status import counts_line, signals_line

    if summary.attributed == 0 and not summary.counts["succeeded"] and fresh:
        _remove_outdir(out)  # nothing usable: no output skeleton left behind (the reasons are said below)
        raise fail(no_traces_message(list(inputs), summary.rejected_by_reason).replace(
            " (see OUTDIR/errors/)", ""))
    inv = _this_invocation(out)
    # what this invocation did, then what the whole OUTDIR holds (run.json: `this_invocation` and the top level)
    loaded = summary.facts.model_loaded
    model = ("model loaded in " + f"{summary.facts.seconds_model_load or 0:.1f} s" if loaded and
             summary.facts.seconds_model_load is not None else "model loaded" if loaded else
             "no model loaded (nothing to run)" if loaded is False else "model loaded before")
    console.print(
        f"this run: {inv.get('traces', 0):,} trace(s) attributed, {summary.shards_run} shards run, "
        f"{summary.shards_skipped} already committed"
        + (f" ({summary.traces_resumed:,} traces committed before this run)" if summary.traces_resumed else "")
        + f"; {model}; {summary.wall_seconds:.1f} s wall, {summary.traces_per_second:.2f} traces/s, "
        f"{summary.tokens_per_second:,.0f} tokens/s ({summary.engine}, {summary.workers} worker(s))")
    console.print(f"{terminal(str(out))} holds: {terminal(counts_line(summary.counts))}")
    from masprism_batch.pipelines.increment import summary_line

    if new := summary_line(summary.facts.inputs):
        console.print(terminal(new), highlight=False)
    if summary.breakdown and inv.get("traces"):
        console.print(f"time: {summary.breakdown}")
    if matched := ranker_matches(cfg, out, ranker):
        console.print(terminal(matched))
    succeeded = summary.counts["succeeded"]
    if line := signals_line(summary.counts):
        console.print(f"{terminal(line)} (listed in {terminal(out / 'errors')} as succeeded_run; --all-runs attributes them)")
    if summary.rejected or summary.counts["warnings"] or succeeded:
        console.print(f"each with its file: masprism-batch show {terminal(out)} --errors")
    if summary.attributed == 0 and succeeded:
        raise typer.Exit(summary.exit_code)  # every run was graded passed: nothing to blame, nothing went wrong
    if summary.attributed == 0:
        raise fail(no_traces_message(list(inputs), summary.rejected_by_reason))
    raise typer.Exit(summary.exit_code)


def check_outcomes(cfg) -> None:
    """`--outcomes FILE` read once before anything runs: a missing file, a row without a trace id or outcome,
    or several evaluations and no --outcome-name are refused (exit 1) before OUTDIR is touched."""
    from masprism_batch.ingest.outcomes import Grader

    try:
        Grader.of(cfg.ingest)
    except (OSError, ValueError) as exc:
        raise fail(str(exc)) from None


def _refuse_in_use(out: Path) -> None:
    """Exit 1 at once when another live run holds OUTDIR (the run itself takes the lock again, pipelines)."""
    from masprism_batch.outdir.lock import LOCK_NAME
    from masprism_batch.outdir.parts import OutdirLock, OutdirLocked

    if not (out / LOCK_NAME).is_file():  # no run ever held it: nothing to probe (and nothing created)
        return

    try:
        OutdirLock(out, "probe").acquire().release()
    except OutdirLocked as exc:
        raise fail(str(exc)) from None


def _this_invocation(out: Path) -> dict:
    import json

    try:
        return json.loads((out / "run.json").read_text(encoding="utf-8")).get("this_invocation") or {}
    except (OSError, ValueError):
        return {}


def _remove_outdir(out: Path) -> None:
    """A fresh OUTDIR this command created and filled with nothing usable: removed (never one that held
    anything before the command)."""
    import shutil

    try:
        shutil.rmtree(out)
    except OSError as exc:
        log.warning("could not remove %s: %s", out, exc)
