"""Label-free failure groups (issue 49): do they follow the TRAIL kinds, are they stable, do they scale.

    python benchmarks/accuracy/bench_groups.py --work /tmp/masprism-category [--n-synthetic 100000]

1. The TRAIL dev errors' steps (category_extract.py's cache for the pooled values where the model read them, the
   step's words from the traces) grouped without labels (category/groups.py, seed 0), the normalised mutual
   information (arithmetic mean normalisation) with the TRAIL leaf kinds beside the same groups against the
   kinds shuffled (mean and 95th percentile of 200 shuffles): above it, the groups carry information on the
   kinds. Labels are read for scoring only.
2. The same grouping run again: identical assignments?
3. n synthetic verdicts (192-number vectors around 40 centres, words from a 5,000-word vocabulary) streamed in
   batches of 4,096 through the same code; wall time and the process's peak RSS before and after.
Rows: benchmarks/results/groups.csv; a section of docs/results.md.
"""

from __future__ import annotations

import argparse
import logging
import resource
import subprocess
import time
from datetime import date
from pathlib import Path

import numpy as np

from benchmarks.rows import RESULTS, append_rows
from masprism_batch.category import groups as grp

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench_groups")
BEGIN, END = "<!-- groups: begin -->", "<!-- groups: end -->"


def nmi(a: np.ndarray, b: np.ndarray) -> float:
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    c = np.zeros((ai.max() + 1, bi.max() + 1))
    np.add.at(c, (ai, bi), 1)
    p = c / c.sum()
    pa, pb = p.sum(1), p.sum(0)
    nz = p > 0
    mi = float((p[nz] * np.log(p[nz] / (pa[:, None] * pb[None, :])[nz])).sum())
    ha, hb = -float((pa * np.log(pa)).sum()), -float((pb * np.log(pb)).sum())
    return 0.0 if ha + hb == 0 else 2 * mi / (ha + hb)


def dev_groups(data: Path, work: Path, model: str, seed: int = 0):
    from benchmarks.accuracy.bench_category import SPLITS, load

    items, y = [], []
    for s in SPLITS:
        d = load(data, work, model, s)
        for i in range(len(d["y"])):
            items.append(grp.Item(f"{s}:{i}", d["vec"][i], d["terms"][i]))
            y.append(int(d["y"][i]))
    dim = next((len(it.vector) for it in items if it.vector is not None), 0)
    g = grp.fit_groups(lambda: grp.batched(items, 4096), dim, seed=seed)
    return items, np.array(y), g, dim


def synthetic(n: int, seed: int = 0, dim: int = 192):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, dim)).astype(np.float32)
    vocab = [f"w{i}" for i in range(5000)]

    def batches():
        r = np.random.default_rng(seed + 1)
        for s in range(0, n, 4096):
            m = min(4096, n - s)
            g = r.integers(40, size=m)
            V = centres[g] + 0.5 * r.normal(size=(m, dim)).astype(np.float32)
            yield [grp.Item(f"s{s + j}", V[j], [vocab[(g[j] * 97 + int(x)) % 5000] for x in r.integers(30, size=12)])
                   for j in range(m)]
    return batches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/masprism-category")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n-synthetic", type=int, default=100_000)
    ap.add_argument("--md", default=str(ROOT / "docs" / "results.md"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    items, y, g, dim = dev_groups(Path(args.data), Path(args.work), args.model)
    got = np.array([g.assign[it.key] for it in items])
    score = nmi(got, y)
    rng = np.random.default_rng(0)
    shuffled = np.array([nmi(got, rng.permutation(y)) for _ in range(200)])
    _, _, g2, _ = dev_groups(Path(args.data), Path(args.work), args.model)
    same = g2.assign == g.assign and g2.names == g.names
    with_vec = sum(it.vector is not None for it in items)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    gs = grp.fit_groups(synthetic(args.n_synthetic), 192, seed=0)
    secs = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    row = {"date": date.today().isoformat(), "commit": commit, "machine": "shared 2-core CPU",
           "dev_errors": len(items), "dev_with_vector": with_vec, "groups": len(g.names), "nmi": round(score, 4),
           "nmi_shuffled_mean": round(float(shuffled.mean()), 4),
           "nmi_shuffled_p95": round(float(np.quantile(shuffled, 0.95)), 4), "rerun_identical": same,
           "synthetic_verdicts": args.n_synthetic, "synthetic_groups": len(gs.names),
           "synthetic_seconds": round(secs, 1), "peak_rss_mib_before": round(rss0), "peak_rss_mib_after": round(rss1)}
    log.info("%s", row)
    log.info("dev groups: %s", "; ".join(f"{n} ({s})" for n, s in zip(g.names, g.sizes, strict=True)))
    append_rows(RESULTS / "groups.csv", [row])
    if args.md:
        from benchmarks.accuracy.accuracy_report import replace_block

        md = "\n".join([
            BEGIN, "## Label-free failure groups (issue 49)", "",
            f"The {len(items)} labelled TRAIL dev errors' steps (pooled pass-2 values for the {with_vec} the model "
            "read, the step's words for all; no label read) grouped by `category/groups.py` (seed 0, "
            f"{len(g.names)} groups), scored against the TRAIL leaf kinds (`benchmarks/accuracy/bench_groups.py`, "
            f"{row['date']}, shared 2-core CPU):", "",
            "| NMI with the leaf kinds | shuffled kinds: mean | shuffled: 95th pct | rerun identical |",
            "|---|---|---|---|",
            f"| {score:.3f} | {shuffled.mean():.3f} | {np.quantile(shuffled, 0.95):.3f} | {same} |", "",
            "Groups: " + "; ".join(f"*{n}* ({s})" for n, s in zip(g.names, g.sizes, strict=True)) + ".", "",
            f"Scale: {args.n_synthetic:,} synthetic verdicts (192-number vectors, 12 words each) streamed in batches "
            f"of 4,096: {secs:.0f} s, peak RSS {rss0:.0f} MiB before, {rss1:.0f} MiB after (the process, model-free).",
            END])
        replace_block(Path(args.md), md, BEGIN, END)


if __name__ == "__main__":
    main()
