"""Build description of the optional C++ CPU extension `masprism_batch._C` (sources in csrc/<op>/).

Imported by setup.py unless MASPRISM_NO_EXT=1. Optional by design: if the compiler or the torch headers
are missing, or compilation fails, the build logs a warning and the install goes on without it (the
torch reference backend is the fallback). Kept to few translation units and -O3 without -march=native
(the wheel must run on any x86-64; the hot loops carry per-ISA clones instead).
"""

from __future__ import annotations

from pathlib import Path

# One folder per op (csrc/<op>/, named like its Triton kernel kernels/<op>.py and its reference); one
# translation unit today. The C++ token_nll (fused LM head + online LSE) was removed: it did not beat the
# torch reference on this CPU (GEMM-bound; see README "Benchmarks" and benchmarks/results/token_nll.csv).
OPS = ["step_attention"]
SOURCES = [f"csrc/{op}/{op}.cpp" for op in OPS]


def extension_and_cmdclass():
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    root = Path(__file__).resolve().parent
    ext = CppExtension(
        name="masprism_batch._C",
        sources=SOURCES,  # relative: setuptools rejects absolute source paths
        include_dirs=[str(root / "csrc" / op) for op in OPS],
        extra_compile_args=["-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math", "-Wno-unused-function"],
    )

    class OptionalBuildExtension(BuildExtension):
        """Never fail the install because of the extension."""

        def run(self):
            try:
                super().run()
            except Exception as exc:  # noqa: BLE001  compiler missing, headers mismatch, ...
                self.warn(f"masprism-batch: C++ extension not built ({exc}); the torch backend will be used")

        def build_extension(self, ext_):
            try:
                super().build_extension(ext_)
            except Exception as exc:  # noqa: BLE001
                self.warn(f"masprism-batch: C++ extension {ext_.name} failed to build ({exc}); torch fallback")

    return [ext], {"build_ext": OptionalBuildExtension.with_options(use_ninja=True)}
