"""Triton kernels, installed as `masprism_batch.kernels` (never as a top-level `kernels`, which is another
PyPI package). Each op's torch reference lives in `masprism_batch.signals.reference`."""
