"""Command `demo`: the bundled sample attributed with the offline default model, its verdicts printed."""

from __future__ import annotations

from pathlib import Path

import typer

from masprism_batch.cli import app, setup_logging
from masprism_batch.cli.common import (
    check_outdir,
    check_ranker,
    console,
    fail,
    load_model_or_fail,
    no_traces_message,
)
from masprism_batch.cli.options import ConfigOptions, IntervalOpt, ModelOpt, VerboseOpt, build_config
from masprism_batch.cli.run import run_here
from masprism_batch.cli.show import candidates_table, verdict_line
from masprism_batch.schema import terminal


def _print_summary(summary, outdir: Path, inputs: list[str] | None = None) -> int:
    from masprism_batch.ingest.status import counts_line

    console.print(f"{terminal(counts_line(summary.counts))} in {summary.wall_seconds:.1f} s, "
                  f"{summary.tokens_per_second:,.0f} tokens/s -> {terminal(outdir)}")
    if inputs is not None and summary.attributed == 0:
        raise fail(no_traces_message(inputs, summary.rejected_by_reason))
    return summary.exit_code


def _sample_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("masprism_batch") / "data" / "sample"))


def _sample_inputs(sample: Path) -> list[str]:
    """The folders holding the sample's logs, not the LICENSE files beside them (a walk of the sample's top
    folders warned about each, 2 `skipped_file` rows on every demo); the traces' ids and sources are the same."""
    return [str(d) for top in ("who_and_when", "trail") for d in sorted((sample / top).iterdir()) if d.is_dir()]


def _print_attributions(outdir: Path, top: int = 3) -> None:
    from masprism_batch.outdir.reads import read_dataset
    from masprism_batch.trace import Trace

    attrs = read_dataset(outdir / "attributions").to_pylist()
    traces = {r["trace_id"]: Trace.from_row(r) for r in read_dataset(outdir / "traces").to_pylist()}
    for a in sorted(attrs, key=lambda r: r["trace_id"]):
        t = traces.get(a["trace_id"])
        console.print(candidates_table(a, t, top))  # the table `show OUT TRACE_ID` prints
        verdict = verdict_line(a, t)
        if t and t.labels and t.labels.mistake_step is not None:
            verdict += f"   (label: step {t.labels.mistake_step} by {t.labels.mistake_agent})"
        elif t and t.labels and t.labels.error_locations:
            hit = a["pred_span_id"] in set(t.labels.error_locations)
            verdict += f"   (span {a['pred_span_id']} is {'a' if hit else 'not a'} labelled error span)"
        console.print(terminal(verdict) + "\n")


@app.command()
def demo(
    model: str = ModelOpt,
    out: Path = typer.Option(None, "-o", "--out", help="output directory (default: ~/.cache/masprism-batch/demo, "
                             "replaced by each demo run)"),
    progress_interval: float = IntervalOpt,
    verbose: bool = VerboseOpt,
):
    """Attribute the bundled sample (4 Who&When + 2 TRAIL real traces) with the offline default model."""
    setup_logging(verbose)
    if out is not None:
        check_outdir(out)
    cfg = build_config(ConfigOptions(model=model))
    ranker = check_ranker(cfg)
    loaded = load_model_or_fail(cfg, ranker)
    outdir = out or _demo_dir(cfg)
    sample = _sample_dir()
    try:
        summary = run_here(_sample_inputs(sample), outdir, cfg, loaded, ranker, progress_interval)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(str(exc)) from None
    _print_attributions(outdir)
    console.print(f"sample data: {terminal(sample)} (licences: NOTICE.md there)")
    code = _print_summary(summary, outdir)
    console.print(f"outputs: {terminal(outdir)}" + ("" if out else " (replaced by the next demo; -o DIR keeps them)"))
    console.print(f"next: masprism-batch report {terminal(outdir)} -o report.html")
    raise typer.Exit(code)


def _demo_dir(cfg) -> Path:
    """One demo folder, emptied at each run (they piled up in /tmp, one per run): ours by its place in the
    model cache root, so clearing it removes nothing of the user's."""
    import shutil

    from masprism_batch.model.loader import cache_root

    d = cache_root(cfg.model.cache_dir) / "demo"
    if d.is_dir() and not d.is_symlink():
        shutil.rmtree(d)
    check_outdir(d)
    return d
