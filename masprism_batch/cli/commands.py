"""The command line as a user meets it: every command module registered on the app, the commands ordered and
grouped as the work goes (`WORKFLOW`), one example each, and the entry point `main`."""

from __future__ import annotations

from masprism_batch.cli import application

# Command modules register themselves on import (one module per command).
from masprism_batch.cli import attribute as _attribute  # noqa: F401
from masprism_batch.cli import demo as _demo  # noqa: F401
from masprism_batch.cli import eval as _eval  # noqa: F401
from masprism_batch.cli import export as _export  # noqa: F401
from masprism_batch.cli import fit as _fit  # noqa: F401
from masprism_batch.cli import fit_heads as _fit_heads  # noqa: F401
from masprism_batch.cli import ingest as _ingest  # noqa: F401
from masprism_batch.cli import models as _models  # noqa: F401
from masprism_batch.cli import pick as _pick  # noqa: F401
from masprism_batch.cli import report as _report  # noqa: F401
from masprism_batch.cli import rescore as _rescore  # noqa: F401
from masprism_batch.cli import run as _run  # noqa: F401
from masprism_batch.cli import show as _show  # noqa: F401
from masprism_batch.cli import stats as _stats  # noqa: F401
from masprism_batch.cli.application import EXIT_FATAL, app

# (panel, command, example) in the order of a user's work, the README's sections: --help lists them this way.
WORKFLOW = [
    ("Try it", "demo", "masprism-batch demo"),
    ("Attribute a folder of your logs", "ingest", "masprism-batch ingest ./logs -o out/"),
    ("Attribute a folder of your logs", "attribute", "masprism-batch attribute ./logs -o out/"),
    ("Read the results", "show", "masprism-batch show out/"),
    ("Read the results", "stats", "masprism-batch stats out/"),
    ("Read the results", "report", "masprism-batch report out/ -o report.html"),
    ("Read the results", "export", "masprism-batch export out/ --to phoenix -o annotations.parquet"),
    ("Fit it to your own system", "pick", "masprism-batch pick out/ -n 20 -o to_label.csv"),
    ("Fit it to your own system", "fit", "masprism-batch fit out/ -o ranker.json"),
    ("Fit it to your own system", "rescore", "masprism-batch rescore out/ --ranker ranker.json -o out-fitted/"),
    ("Fit it to your own system", "fit-heads", "masprism-batch fit-heads ./logs -o heads.json"),
    ("Overnight on Ray, and measuring on labelled data", "run",
     "masprism-batch run ./logs -o out/ --engine ray --address auto"),
    ("Overnight on Ray, and measuring on labelled data", "eval",
     "masprism-batch eval --dataset who-and-when ./Who_and_When"),
    ("Models", "models", "masprism-batch models"),
]
# Short flags, one meaning each on every command that has the option: -o --out, -m --model, -f --format (the
# input format), -v --verbose, -d --dataset. An option that replaces or removes something (--force) has none.
SHORT_FLAGS = {"-o": "--out", "-m": "--model", "-f": "--format", "-v": "--verbose", "-d": "--dataset"}


def _one_paragraph_per_line(text: str) -> str:
    """Help text is written wrapped in the source; the terminal re-wraps it, so a source line break must not
    survive inside a paragraph (it printed as a break mid-sentence)."""
    paras = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    return "\n\n".join(p for p in paras if p)


def _organise_commands() -> None:
    """Order and group the commands as the work goes, add one example line to each, state exit codes once (in
    the top-level help) and keep every paragraph unbroken."""
    import inspect

    app.info.help = _one_paragraph_per_line(application.__doc__)
    rank = {name: i for i, (_, name, _) in enumerate(WORKFLOW)}
    by_name = {name: (panel, example) for panel, name, example in WORKFLOW}

    def name_of(c) -> str:
        return c.name or c.callback.__name__.replace("_", "-")

    for c in app.registered_commands:
        panel, example = by_name.get(name_of(c), ("Other", None))
        text = c.help or inspect.getdoc(c.callback) or ""
        text = _one_paragraph_per_line(text)
        if example and "Example:" not in text:
            text += f"\n\nExample: {example}"
        c.help, c.rich_help_panel = text, panel
    app.registered_commands.sort(key=lambda c: rank.get(name_of(c), len(rank)))


_organise_commands()


def main() -> None:
    """Entry point. A user error is handled by its command (one `error:` line, exit 1/2/3); anything that still
    escapes is an internal error: one line naming it, exit 1, and the traceback only with MASPRISM_TRACEBACK=1."""
    import os
    import sys

    try:
        app(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - last resort: no traceback for the user
        if os.environ.get("MASPRISM_TRACEBACK") == "1":
            raise
        from masprism_batch.cli.common import console
        from masprism_batch.schema import terminal

        console.print(f"error: {terminal(type(exc).__name__)}: {terminal(exc)}\n(an internal error, not a problem "
                      "with your input; rerun with MASPRISM_TRACEBACK=1 for the traceback and report it)")
        sys.exit(EXIT_FATAL)
