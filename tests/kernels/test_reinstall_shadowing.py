"""Issue 60 item 2: the source root's kernels/ folder must not shadow HF's `kernels` package while setuptools
builds this project's metadata. transformers installs `kernels`, which declares a setuptools entry point
(`egg_info.writers`) in `kernels._internals`; setuptools loads it on every build, so a second
`pip install --no-build-isolation -e .` in the same venv failed with "No module named 'kernels._internals'".

The test installs a stand-in `kernels` distribution with such an entry point on PYTHONPATH and runs setup.py's
metadata step from the source root (which puts the root first on sys.path, as the bug needed): it must load
the stand-in, not the root's kernels/. `.ci/run` runs the real command twice as well."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _stand_in(site: Path) -> None:
    """A `kernels` distribution like HF's: an `egg_info.writers` entry point in `kernels._internals`."""
    pkg = site / "kernels" / "_internals"
    pkg.mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "locking.py").write_text(
        "def write_egg_lockfile(cmd, basename, filename):\n"
        "    cmd.write_file('stand-in lock', filename, 'loaded from the stand-in')\n")
    dist = site / "kernels-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kernels\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text(
        "[egg_info.writers]\nkernels.lock = kernels._internals.locking:write_egg_lockfile\n")


def test_metadata_builds_with_an_installed_kernels_package(tmp_path):
    assert (ROOT / "kernels" / "__init__.py").is_file(), "the card's top-level kernels/ folder stays"
    site, egg_base = tmp_path / "site", tmp_path / "egg"
    site.mkdir()
    egg_base.mkdir()
    _stand_in(site)
    env = {**os.environ, "PYTHONPATH": str(site), "MASPRISM_NO_EXT": "1"}
    proc = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(egg_base)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "kernels._internals" not in proc.stderr
    lock = next(egg_base.glob("*.egg-info")) / "kernels.lock"
    assert lock.read_text() == "loaded from the stand-in"  # the entry point ran: HF's package was the one loaded
