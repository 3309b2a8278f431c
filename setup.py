"""Only what must be computed at build time: the package list (top-level kernels/ and pipelines/ are
mapped under masprism_batch) and the optional C++ CPU extension from csrc/<op>/ (see csrc_build.py).

Set MASPRISM_NO_EXT=1 to skip the extension. A failed extension build never fails the install: the
torch reference backend is the fallback.
"""
import os
import sys

from setuptools import find_namespace_packages, find_packages, setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # csrc_build.py (PEP 517 builds omit the cwd)

# Namespace packages too: the data folders (analytics/assets, data/sample/..., method/weights) are importable
# names, and setuptools warns ("Package ... would be ignored") for each one `packages` leaves out.
packages = find_namespace_packages(include=["masprism_batch", "masprism_batch.*"], exclude=["*__pycache__*"])
packages += ["masprism_batch.kernels"] + ["masprism_batch.kernels." + p for p in find_packages("kernels")]
packages += ["masprism_batch.pipelines"] + ["masprism_batch.pipelines." + p for p in find_packages("pipelines")]

ext_modules, cmdclass = [], {}
if os.environ.get("MASPRISM_NO_EXT", "0") != "1":
    try:
        from csrc_build import extension_and_cmdclass  # noqa: E402  (see csrc_build.py)

        ext_modules, cmdclass = extension_and_cmdclass()
    except Exception as exc:  # the extension is optional by design
        print(f"masprism-batch: skipping C++ extension ({exc})")

setup(packages=packages, ext_modules=ext_modules, cmdclass=cmdclass)
