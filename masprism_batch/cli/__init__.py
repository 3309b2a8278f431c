"""The `masprism-batch` command line. Only this package parses arguments; each module adds its commands
to `app` and calls into the library. Exit codes: 0 all good; 1 usage or fatal error; 3 finished but some
inputs were rejected (see OUTDIR/errors/)."""

from __future__ import annotations

import logging

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_show_locals=False)

EXIT_OK, EXIT_FATAL, EXIT_REJECTED = 0, 1, 3


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# Command modules register themselves on import (one module per command group).
from . import analytics as _analytics  # noqa: E402,F401
from . import attribute as _attribute  # noqa: E402,F401
from . import ingest as _ingest  # noqa: E402,F401
from . import models as _models  # noqa: E402,F401
from . import run as _run  # noqa: E402,F401


def main() -> None:
    app()
