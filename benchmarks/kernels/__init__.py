"""Kernel and prefill speed: one op at a time against eager / SDPA baselines (CPU; --gpu on CUDA)."""
