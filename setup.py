"""Only what must be computed at build time: the package list (top-level kernels/ and pipelines/ are
mapped under masprism_batch) and the optional C++ CPU extension from csrc/<op>/ (see csrc_build.py).

Set MASPRISM_NO_EXT=1 to skip the extension. A failed extension build never fails the install: the
torch reference backend is the fallback.
"""
import importlib.util
import os
import sys

from setuptools import find_namespace_packages, find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
# The source root must not be on sys.path while setuptools runs: it loads the entry points every installed
# package declares (egg_info.writers), and HF's `kernels` (a transformers dependency) declares one in
# `kernels._internals`, which the root's own kernels/ folder would shadow: a reinstall in the same venv then
# failed with "No module named 'kernels._internals'" (issue 60). `python setup.py ...` puts the root first.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != ROOT]

# Namespace packages too: the data folders (analytics/assets, data/sample/..., method/weights) are importable
# names, and setuptools warns ("Package ... would be ignored") for each one `packages` leaves out.
packages = find_namespace_packages(include=["masprism_batch", "masprism_batch.*"], exclude=["*__pycache__*"])
packages += ["masprism_batch.kernels"] + ["masprism_batch.kernels." + p for p in find_packages("kernels")]
packages += ["masprism_batch.pipelines"] + ["masprism_batch.pipelines." + p for p in find_packages("pipelines")]

ext_modules, cmdclass = [], {}
if os.environ.get("MASPRISM_NO_EXT", "0") != "1":
    try:
        # csrc_build.py by its path, not through sys.path (above; PEP 517 builds omit the cwd anyway)
        spec = importlib.util.spec_from_file_location("csrc_build", os.path.join(ROOT, "csrc_build.py"))
        csrc_build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(csrc_build)
        ext_modules, cmdclass = csrc_build.extension_and_cmdclass()
    except Exception as exc:  # the extension is optional by design
        print(f"masprism-batch: skipping C++ extension ({exc})")

setup(packages=packages, ext_modules=ext_modules, cmdclass=cmdclass)
