"""Benchmarks, grouped by what they measure; none of this ships in the wheel.

- `kernels/`: one op or one prefill at a time (step attention, token NLL, the whole-model prefill, fp32 vs bf16
  GEMMs) against eager / SDPA baselines, on CPU and with `--gpu` on CUDA.
- `pipeline/`: the product path end to end (ingest, `attribute` on many traces, memory caps, pass-2 overlap,
  counterfactuals, the pipeline / plain-prefill ratio, the GPU end-to-end run).
- `accuracy/`: the accuracy protocol on the dev logs; it writes the shipped `masprism_batch/method/weights/*.json`
  and `docs/results.md`.
- `gpu_smoke.sh`: the one-command runbook of a CUDA machine (kernel tests, kernel and end-to-end benchmarks).
- `rows.py`: how a speed benchmark appends its rows to `results/<name>.csv` (read by docs and tests).

Run a script as a file (`python benchmarks/kernels/bench_token_nll.py`) or as a module
(`python -m benchmarks.kernels.bench_token_nll`); tests import them as `benchmarks.<group>.<script>` (pytest's
`pythonpath` puts the repository root first).
"""
