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
# This docstring is the top-level --help; the module holds what every command module needs (the app, exit codes,
# logging), and cli/commands.py registers the commands on it.


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
