"""The `masprism-batch` command line. Only this package parses arguments; each module adds its commands
to `app` and calls into the library.

Exit codes (every command): 0 done, warnings allowed; 1 fatal (missing input, unusable output path, no
traces found, model not found, bad configuration); 2 usage error (unknown option or value); 3 done, but
some inputs were rejected (one row each in OUTDIR/errors/)."""

from __future__ import annotations

import logging

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_show_locals=False,
                  pretty_exceptions_enable=False)

EXIT_OK, EXIT_FATAL, EXIT_USAGE, EXIT_REJECTED = 0, 1, 2, 3


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# Command modules register themselves on import (one module per command group).
from . import analytics as _analytics  # noqa: E402,F401
from . import attribute as _attribute  # noqa: E402,F401
from . import heads as _heads  # noqa: E402,F401
from . import ingest as _ingest  # noqa: E402,F401
from . import models as _models  # noqa: E402,F401
from . import run as _run  # noqa: E402,F401
from .common import EXIT_CODES_HELP  # noqa: E402


def _document_exit_codes() -> None:
    """Every command's --help ends with the exit codes (the same for all commands)."""
    import inspect

    for c in app.registered_commands:
        text = c.help or inspect.getdoc(c.callback) or ""
        if "Exit codes" not in text:
            c.help = (text.rstrip() + "\n\n" + EXIT_CODES_HELP).strip()


_document_exit_codes()


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
