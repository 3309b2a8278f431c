"""Find which step and which agent caused each failed run in your multi-agent LLM logs.

masprism-batch reads each log with a small local language model in two prefill passes (no tokens are generated)
and blames one step and one agent per trace, with the ranked candidates, a confidence and what decided the
verdict. Typical work: try the demo, attribute a folder of your logs (or run overnight on Ray), measure it on
labelled logs and fit it to your own system, then read the results (stats, report, export).

Exit codes (every command): 0 done, warnings allowed; 1 fatal, nothing or not all was done (missing input,
unusable output path, no traces found, model not found, bad configuration); 2 usage error (unknown option or
value); 3 done, but some inputs were rejected (one row each in OUT/errors/).

Docs: README.md and docs/ in the source tree (formats, schema, scale-out, method, results).
"""

from __future__ import annotations

import logging

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_show_locals=False,
                  pretty_exceptions_enable=False)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("masprism-batch")
        except PackageNotFoundError:  # a source tree on PYTHONPATH, not installed
            v = "unknown (not installed)"
        print(f"masprism-batch {v}")
        raise typer.Exit(0)


@app.callback()
def _root(_v: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                  help="print the version and exit")) -> None:
    pass


def _plain_help_types() -> None:
    """Help without Python type tags: typer prints `<bool>` beside every flag, `<list[str]>` beside a list
    argument and `<int>` beside a number; a flag takes no value, and a value's kind is in its help and its
    metavar (upper case, as Unix tools write it)."""
    from typer.core import TyperArgument, TyperOption

    def display(self, ctx):
        if isinstance(self, TyperOption) and (self.is_flag or self.is_bool_flag):
            return None
        if isinstance(self, TyperArgument):
            return None  # its name says it (INPUTS...)
        label = self.display_type(ctx).strip("<>")
        return None if label.startswith("list[") else {"str": "TEXT"}.get(label, label.upper())

    def usage_name(self) -> str:  # `INPUTS...`, `[NAME]`: typer's `{inputs}...` reads like a template
        name = self.display_name_raw.upper()
        return (name if self.required else f"[{name}]") + ("..." if self.nargs != 1 else "")

    TyperOption.display_type_rich = display
    TyperArgument.display_type_rich = display
    TyperArgument._usage_display_name = usage_name


_plain_help_types()

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_REJECTED = 0, 1, 2, 3


class _Printable(logging.Filter):
    """Log lines quote names and values from the logs read: their control characters (terminal escape
    sequences) are written escaped, in a terminal and in a log file alike (`schema.printable`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from masprism_batch.schema import printable

        msg = record.getMessage()
        safe = printable(msg)
        if safe is not msg:
            record.msg, record.args = safe, None
        return True


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for h in logging.getLogger().handlers:
        if not any(isinstance(f, _Printable) for f in h.filters):
            h.addFilter(_Printable())


# Command modules register themselves on import (one module per command).
from masprism_batch.cli import attribute as _attribute  # noqa: E402,F401
from masprism_batch.cli import demo as _demo  # noqa: E402,F401
from masprism_batch.cli import eval as _eval  # noqa: E402,F401
from masprism_batch.cli import export as _export  # noqa: E402,F401
from masprism_batch.cli import fit as _fit  # noqa: E402,F401
from masprism_batch.cli import fit_heads as _fit_heads  # noqa: E402,F401
from masprism_batch.cli import ingest as _ingest  # noqa: E402,F401
from masprism_batch.cli import models as _models  # noqa: E402,F401
from masprism_batch.cli import report as _report  # noqa: E402,F401
from masprism_batch.cli import run as _run  # noqa: E402,F401
from masprism_batch.cli import show as _show  # noqa: E402,F401
from masprism_batch.cli import stats as _stats  # noqa: E402,F401

# (panel, command, example) in the order of a user's work, the README's sections: --help lists them this way.
WORKFLOW = [
    ("Try it", "demo", "masprism-batch demo"),
    ("Attribute a folder of your logs", "ingest", "masprism-batch ingest ./logs -o out/"),
    ("Attribute a folder of your logs", "attribute", "masprism-batch attribute ./logs -o out/"),
    ("Read the results", "show", "masprism-batch show out/"),
    ("Read the results", "stats", "masprism-batch stats out/"),
    ("Read the results", "report", "masprism-batch report out/ -o report.html"),
    ("Read the results", "export", "masprism-batch export out/ --to phoenix -o annotations.parquet"),
    ("Fit it to your own system", "fit", "masprism-batch fit out/ -o ranker.json"),
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

    app.info.help = _one_paragraph_per_line(__doc__)
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
        print(f"error: {type(exc).__name__}: {exc}\n(an internal error, not a problem with your input; "
              f"rerun with MASPRISM_TRACEBACK=1 for the traceback and report it)", file=sys.stderr)
        sys.exit(EXIT_FATAL)
