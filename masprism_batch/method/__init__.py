"""Attribution methods over prefill signals. `masprism` is the faithful method of the paper."""

from masprism_batch.method.packaged import weights_dir  # noqa: F401
