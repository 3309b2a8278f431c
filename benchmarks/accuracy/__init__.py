"""The accuracy protocol on the dev logs: what the shipped weights and the results page are made of.

These scripts are not speed benchmarks: they WRITE shipped files. `bench_accuracy.py --train-weights` writes the
packaged rankers and fallback (`masprism_batch/method/weights/rankers.json`, `fallback.json`), and
`bench_accuracy.py`, `bench_learning_curve.py`, `ablate_prior_guard.py` and `agent_rules.py` write the sections of
`docs/results.md` and the rows of `benchmarks/results/accuracy.csv` / `learning_curve.csv` (read by docs and tests).
Run `accuracy_extract.py` first (the prefills, cached); the rest read its cache. See docs/accuracy.md.
"""
