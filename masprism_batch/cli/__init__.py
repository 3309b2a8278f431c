"""The command line (`masprism-batch`): what its users and tests import. The top-level help is cli/application.py's
docstring; the commands register in cli/commands.py."""

from masprism_batch.cli.application import (  # noqa: F401  (first: every command module imports `app` from here)
    EXIT_FATAL,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_USAGE,
    _Printable,
    app,
    setup_logging,
)
from masprism_batch.cli.commands import SHORT_FLAGS, WORKFLOW, main  # noqa: F401,E402
