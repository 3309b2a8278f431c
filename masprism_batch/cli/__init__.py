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
