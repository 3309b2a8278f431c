"""What every command shares: exit codes, checks of input and output paths made before any work, the
"no traces found" explanation, and user-facing error printing (never a traceback for a user error).

Exit codes, the same for every command:
  0  finished; everything was processed (warnings, e.g. a repaired trace, allowed)
  1  fatal: nothing or not all was done — missing input, unusable output path, no traces found,
     model not found, OUTDIR of another run, an internal error
  2  usage: unknown option, bad option value (printed by the argument parser or by the command)
  3  finished, but some inputs were rejected (one row each in OUTDIR/errors/)
"""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console

from masprism_batch.schema import terminal

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_REJECTED = 0, 1, 2, 3

# soft wrap: a message is one line in a nightly job's log, and a path or command in it stays whole to copy
console = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_FATAL) -> typer.Exit:
    """Print one `error:` line (paths stay copyable: no wrapping) and return the Exit to raise."""
    console.print(f"[red]error:[/] {terminal(message)}")  # a name from a log may be in it
    return typer.Exit(code)


def usage(message: str) -> typer.Exit:
    return fail(message, EXIT_USAGE)


def check_inputs(inputs: list[str]) -> None:
    """Every input path must exist (a missing input is fatal, before anything is written)."""
    missing = [p for p in inputs if not os.path.lexists(p)]
    if missing:
        raise fail(f"input not found: {', '.join(missing)}")


def check_some_data(inputs: list[str]) -> None:
    """At least one data file under the inputs, checked before a model loads or OUTDIR is created: an empty
    folder used to load the model, create OUT and print a zero summary before `no usable traces`."""
    from masprism_batch.ingest.sources import expand

    if not any(True for _ in expand(list(inputs), lambda row: None)):
        raise fail(no_traces_message(inputs))


def check_outdir(out: Path) -> None:
    """OUTDIR may exist (as a folder) or not (it is created, parents too); a file or an unwritable place is fatal."""
    if out.exists() and not out.is_dir():
        raise fail(f"output directory {out} exists and is not a directory")
    anc = out
    while not anc.exists():
        anc = anc.parent
    if not anc.is_dir():
        raise fail(f"cannot create output directory {out}: {anc} is not a directory")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise fail(f"cannot write to {anc} (permission denied), so {out} cannot be written")
    refuse_links(out)


def refuse_links(outdir: Path) -> None:
    """OUTDIR is a tree the tool owns: one holding a symbolic link is refused (exit 1) before anything runs."""
    from masprism_batch.outdir.manifest import OutdirUnsafe
    from masprism_batch.outdir.manifest import refuse_links as check

    try:
        check(outdir)
    except OutdirUnsafe as exc:
        raise fail(str(exc)) from None


def check_out_file(out: Path, force: bool | None = None) -> None:
    """An output FILE: its folder must already exist (never created silently) and it must not be a folder. With
    `force` given (report, export, fit), an existing file is refused unless `force`. Whatever `force` says, a device
    or FIFO is written into, never replaced (`-o /dev/stdout`), any other special file is refused, and a symbolic
    link to a file is refused rather than replaced (`outdir.parts.atomic_output` holds the same rule)."""
    from masprism_batch.outdir.parts import OutdirUnsafe, output_target

    try:
        kind = output_target(out)
    except OutdirUnsafe as exc:
        raise fail(str(exc)) from None
    if kind == "stream":  # written into as it is: nothing is replaced
        return
    if out.is_dir():
        raise fail(f"output {out} is a directory; give a file name")
    if kind == "file" and force is False:
        raise fail(f"{out} exists; pass --force to replace it or choose another -o")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise fail(f"output folder {parent} does not exist (it is not created for you): create it or choose "
                   f"another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise fail(f"cannot write to {parent} (permission denied)")


def _listing(paths: list[str], n: int = 5) -> str:
    shown = ", ".join(paths[:n])
    return shown + (f", … ({len(paths) - n} more)" if len(paths) > n else "")


def no_traces_message(inputs: list[str], rejected: dict[str, int] | None = None) -> str:
    """What was looked at, skipped and rejected, for 'no traces found' (exit 1)."""
    from masprism_batch.ingest.sources import expand, readable_names

    skipped: list[str] = []
    errors: list[dict] = []
    files = list(expand(list(inputs), errors.append, skipped))
    parts = [f"no usable traces in {', '.join(inputs)}: looked at {len(files)} data file(s)"
             + (f" ({_listing(files)})" if files else "")]
    if skipped:
        parts.append(f"skipped {len(skipped)} file(s) whose names are not read from a folder (read: "
                     f"{readable_names()}): {_listing(skipped)}")
    if rejected:
        parts.append("rejected: " + ", ".join(f"{k} x{v}" for k, v in sorted(rejected.items()))
                     + " (see OUTDIR/errors/)")
    if files and not rejected:
        parts.append("every file was read but held no traces")
    parts.append("supported formats: `masprism-batch ingest --help`")
    return "; ".join(parts)


def check_taxonomy(cfg) -> None:
    """`--taxonomy` / method.taxonomy (and method.category_weights), refused (exit 1) before OUTDIR is touched."""
    if not cfg.method.categories:
        return
    from masprism_batch.category.classify import load_model
    from masprism_batch.category.taxonomy import load_taxonomy

    try:
        tax = load_taxonomy(cfg.method.taxonomy)
        if cfg.method.category_weights is not None:
            load_model(tax, cfg.model.name, cfg.method.category_weights)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise fail(f"--taxonomy: {exc}") from None


def check_ranker(cfg, ranker=None, model_id: str | None = None):
    """`--ranker` / method.ranker, read once for the whole run (`RankerSetting`, which the caller hands on to the
    run) and refused (exit 1) before OUTDIR is touched: missing, not a ranker file, or, once the model is known
    (`model_id`), fitted on another model's signals (its weights would mean nothing). `ranker`: the setting as
    already read (after the model loaded), else it is read here. The setting."""
    from masprism_batch import config_checks as checks
    from masprism_batch.verdict import rankfile

    check_taxonomy(cfg)
    setting = cfg.method.ranker
    if ranker is None:
        if setting is not None and not rankfile.is_packaged(setting):
            path = rankfile.target(setting)
            problem = checks.input_file_problem(path)
            if problem is not None:  # a FIFO or /dev/zero is said as such, never opened
                raise fail(f"--ranker: {str(path)!r} {problem}" if problem != "not found"
                           else f"ranker file not found: {path}")
        ranker = rankfile.RankerSetting.read(setting)
    if setting is None:
        return ranker
    if rankfile.is_packaged(setting):  # fitted on the default model: on another one they simply do not apply
        packaged = ranker.file.model_id if ranker.file is not None else None
        if model_id and packaged and model_id != packaged:
            console.print(f"[yellow]note:[/] the packaged rankers were fitted on {terminal(packaged)}; with {terminal(model_id)} "
                          "every log gets the zero-training verdict")
        return ranker
    if ranker.problem is not None:
        raise fail(f"--ranker {setting}: {ranker.problem}")
    if ranker.file is None:  # a folder holding only fallback.json
        return ranker
    try:
        ranker.file.check_model(model_id, ranker.path)
    except rankfile.RankerFileError as exc:
        raise fail(str(exc)) from None
    if model_id and cfg.method.name != "ranked":
        console.print("[yellow]warning:[/] --ranker applies to the ranked method; method.name masprism ignores it")
    return ranker


def load_model_or_fail(cfg, ranker=None):
    """Load the model before OUTDIR is touched: a model that cannot be loaded leaves nothing behind that would
    refuse a retry with another --model (the run header records the model). `ranker`: the run's ranker setting,
    checked first (a missing or unreadable --ranker is said before the model's load time is spent)."""
    from masprism_batch.pipelines.model_stage import load_model

    check_ranker(cfg, ranker)
    try:
        model = load_model(cfg)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:  # ModelNotFoundError is a FileNotFoundError
        raise fail(f"cannot load model {cfg.model.name!r}: {exc}") from None
    check_prompt_or_fail(cfg, model.tokenizer, model.max_context)
    return model


def check_prompt_or_fail(cfg, tokenizer=None, context: int | None = None) -> None:
    """The prompt texts in the model's own tokens (`config_checks.check_prompt_room`), before OUTDIR is touched:
    a preamble that leaves no room would reject every trace. Without a loaded model (Ray: the actors load it),
    its tokenizer alone is loaded here."""
    from masprism_batch.config_checks import check_prompt_room
    from masprism_batch.render.encoding import encoder_for

    if tokenizer is None:
        from masprism_batch.pipelines.model_stage import load_tokenizer

        try:
            tokenizer, context = load_tokenizer(cfg)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise fail(f"cannot load the tokenizer of {cfg.model.name!r}: {exc}") from None
    try:
        check_prompt_room(cfg.render, encoder_for(tokenizer).encode, context)
    except ValueError as exc:
        raise fail(f"bad configuration: {exc}") from None


def ranker_matches(cfg, outdir: Path, ranker) -> str | None:
    """One line after a run with `--ranker`: the systems its file holds and how many of this run's logs each
    matched (`rankfile.system_key`, as the verdict policy keys them). A ranker that matched no log changed no
    verdict, and a user had no way to tell (issue 51). `ranker`: the run's setting as read (`RankerSetting`)."""
    from collections import Counter
    from types import SimpleNamespace

    from masprism_batch.outdir.reads import read_dataset
    from masprism_batch.verdict import rankfile

    setting = cfg.method.ranker
    if setting is None or not (outdir / "attributions").is_dir():
        return None
    if ranker.problem is not None:
        return None
    rf = ranker.file
    if rf is None or not rf.systems:
        return f"--ranker {setting}: no ranker applies to this model; every log got the zero-training verdict"
    rows = read_dataset(outdir / "attributions", columns=["source", "system"]).to_pylist()
    keys = Counter(rankfile.system_key(SimpleNamespace(**r), cfg.method.system) for r in rows)
    each = ", ".join(f"{name} ({keys.get(name, 0):,} log{'s' * (keys.get(name, 0) != 1)})" for name in rf.systems)
    line = f"--ranker {setting} applies to {len(rf.systems)} system(s): {each}"
    if not any(keys.get(n) for n in rf.systems):
        line += ("; no log of this run matched, so every verdict is the zero-training one (name the system of "
                 "your logs with --system NAME)")
    return line


def outdir_failure(exc: Exception) -> typer.Exit:
    """An OUTDIR that cannot be read (damaged, not a run's): one `error:` line, exit 1."""
    return fail(str(exc))


def check_run_dir(outdir: Path) -> None:
    """The OUTDIR of an `attribute`/`run` command, for the commands that read one (show, stats, report, export)."""
    if not outdir.exists():
        raise fail(f"input not found: {outdir}")
    if not outdir.is_dir():
        raise fail(f"{outdir} is not a directory: give the OUTDIR of an `attribute`/`run` command")
    refuse_links(outdir)  # a link inside OUTDIR could show another run's results as this one's
