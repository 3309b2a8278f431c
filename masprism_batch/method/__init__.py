"""Attribution methods over prefill signals. `masprism` is the faithful method of the paper."""

from pathlib import Path


def weights_dir() -> Path:
    """The packaged weights folder: rankers, head weights, fallback.json (what bench_accuracy.py shipped)."""
    from importlib.resources import files

    return Path(str(files("masprism_batch") / "method" / "weights"))
