"""Where the weights this package ships live (rankers, head weights, fallback.json: what bench_accuracy.py wrote)."""

from pathlib import Path


def weights_dir() -> Path:
    """The packaged weights folder, found through the installed package (a wheel or an editable source tree)."""
    from importlib.resources import files

    return Path(str(files("masprism_batch") / "method" / "weights"))
