"""Paired accuracy of two signal caches of the same dev logs: what a change of the input (the rendering, the
forward) bought, verdict by verdict.

    python benchmarks/accuracy/paired_caches.py --before BASE /tmp/acc-old/cache-X --after BASE /tmp/acc-new/cache-Y \
        --label "TRAIL recorded errors in the step text (issue 47)"

Each side is one cache folder or several, a later one's logs replacing an earlier one's (BASE: a full cache of
the dev data; then the caches of the logs the change touched, extracted by each tree). Both sides are read with today's ingest (the same traces, labels and step indices; a trace whose cached step
count differs from today's steps is refused, not scored). For each protocol of bench_accuracy.py, every log's
headline hit (Who&When step top-1; TRAIL precision@1, i.e. the blamed step's span is a labelled error span) is
computed on both caches and paired:
- faithful MASPrism (zero-training, no protocol);
- zero-training verdict, rule chosen leave-one-system-out (what `attribute` ships for a system it has no ranker
  for; held out);
- fitted: the product's fit, 5-fold within the system x FOLD_SEEDS (held out; a log's hit is its mean over seeds).
Per system and protocol: the mean before and after, the paired difference with a 95% bootstrap interval (logs
resampled, 2,000 resamples, seed 0), and how many logs' hit changed: gained or lost. Rows are appended
to benchmarks/results/paired_caches.csv; the table goes into docs/results.md (its own block, which
bench_accuracy.py keeps) with --md, and is printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy.accuracy_cases import (
    FOLD_SEEDS,
    Case,
    faithful_rows,
    fit_cases,
    fitted_rows,
    kfold_rows,
    load_cases,
    score,
)
from benchmarks.accuracy.accuracy_rankers import rules_loso_rows
from benchmarks.accuracy.accuracy_report import PAIRED_BEGIN, PAIRED_END, replace_block
from benchmarks.rows import append_rows

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "paired_caches.csv"
BOOT = 2000
PROTOCOLS = ("faithful MASPrism (zero-training)", "zero-training rule chosen leave-one-system-out",
             f"fitted, 5-fold within system x{len(FOLD_SEEDS)} seeds")


def case_hits(cases: list[Case], rows: dict[str, dict]) -> dict[str, float]:
    """Each log's headline hit under `rows` (a log with no gold is left out, as the scorers leave it out)."""
    out = {}
    for c in cases:
        row = rows.get(c.trace.trace_id)
        if row is None:
            continue
        flat = score([c], {c.trace.trace_id: row})[0]  # one log: one subset, so one value of the metric
        metric = "precision@1" if c.dataset == "trail" else "step_top1"
        vals = [v for (_, m), v in flat.items() if m == metric]
        hit = vals[0] if vals else None
        if hit is not None:
            out[c.trace.trace_id] = float(hit)
    return out


def mean_hits(cases: list[Case], rows_per_seed: list[dict[str, dict]]) -> dict[str, float]:
    """Each log's hit averaged over the fold seeds' held-out rows."""
    per: dict[str, list[float]] = {}
    for rows in rows_per_seed:
        for k, v in case_hits(cases, rows).items():
            per.setdefault(k, []).append(v)
    return {k: float(np.mean(v)) for k, v in per.items()}


def fitted_hits(cases: list[Case], rule: str, rule_agent: str) -> dict[str, float]:
    """Each log's hit under the product's fit, 5-fold within its system, averaged over the fold seeds."""
    def rows_of(system, train, test) -> dict:
        return fitted_rows(train, test, system, rule, rule_agent) if test and fit_cases(train) else {}

    return mean_hits(cases, [kfold_rows(cases, rows_of, 5, seed) for seed in FOLD_SEEDS])


def protocol_hits(cases: list[Case], model_id: str, rule_agent: str,
                  fitted: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
    """Each log's hit under each of PROTOCOLS; `fitted`: the fitted protocol's, when the caller has them."""
    chosen, _, _ = rules_loso_rows(cases, model_id)
    return {PROTOCOLS[0]: case_hits(cases, faithful_rows(cases)),
            PROTOCOLS[1]: case_hits(cases, chosen),
            PROTOCOLS[2]: fitted if fitted is not None else fitted_hits(cases, "faithful", rule_agent)}


def paired(before: dict[str, float], after: dict[str, float], rng: np.random.Generator) -> dict:
    ids = sorted(set(before) & set(after))
    b = np.array([before[i] for i in ids])
    a = np.array([after[i] for i in ids])
    d = a - b
    boot = [float(d[rng.integers(0, len(d), len(d))].mean()) for _ in range(BOOT)] if len(d) else [0.0]
    return {"n": len(ids), "before": float(b.mean()) if len(b) else 0.0, "after": float(a.mean()) if len(a) else 0.0,
            "diff": float(d.mean()) if len(d) else 0.0, "diff_lo": float(np.percentile(boot, 2.5)),
            "diff_hi": float(np.percentile(boot, 97.5)), "moved": int(np.sum(np.abs(d) > 1e-12)),
            "gained": int(np.sum(d > 1e-12)), "lost": int(np.sum(d < -1e-12))}


def aligned(cases: list[Case]) -> list[Case]:
    """The cases whose cached per-step rows match today's steps of the trace (else indices would be misread)."""
    return [c for c in cases if len(c.rows) == len(c.trace.steps)]


def overlay(data: Path, folders: list[str]) -> list[Case]:
    """The cases of `folders`, a later folder's log replacing an earlier one's (in the dev data's order)."""
    by_id: dict[str, Case] = {}
    for f in folders:
        by_id.update({c.trace.trace_id: c for c in load_cases(data, Path(f))})
    return list(by_id.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--before", nargs="+", required=True, help="signal cache folder(s) before the change")
    ap.add_argument("--after", nargs="+", required=True, help="signal cache folder(s) after the change")
    ap.add_argument("--label", required=True, help="what changed between the caches (written into each row)")
    ap.add_argument("--rule-agent", default="most_active",
                    help="the fit's agent rule (the one bench_accuracy.py ships; the step hits do not read it)")
    ap.add_argument("--csv", default=str(RESULTS))
    ap.add_argument("--md", default=None, help="write the table into this results page (docs/results.md)")
    ap.add_argument("--note", default="", help="a paragraph under the table: what the caches were, when, where")
    args = ap.parse_args()
    data = Path(args.data)
    caches = {"before": aligned(overlay(data, args.before)), "after": aligned(overlay(data, args.after))}
    both = set.intersection(*({c.trace.trace_id for c in v} for v in caches.values()))
    caches = {k: [c for c in v if c.trace.trace_id in both] for k, v in caches.items()}
    model_id = next(c.meta["attribution"]["model_id"] for c in caches["after"])
    hits = {k: protocol_hits(v, model_id, args.rule_agent) for k, v in caches.items()}
    system_of = {c.trace.trace_id: c.system for c in caches["after"]}
    rng = np.random.default_rng(0)
    rows, stamp = [], dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    table = ["| system | protocol (held out unless zero-training) | logs | before | after | paired diff [95% CI] "
             "| logs whose hit changed (gained / lost) |", "|---|---|---:|---:|---:|---|---|"]
    for system in sorted(set(system_of.values())):
        for proto in PROTOCOLS:
            sel = {k for k, s in system_of.items() if s == system}
            r = paired({k: v for k, v in hits["before"][proto].items() if k in sel},
                       {k: v for k, v in hits["after"][proto].items() if k in sel}, rng)
            table.append(f"| {system} | {proto} | {r['n']} | {r['before']:.3f} | {r['after']:.3f} | {r['diff']:+.3f} "
                         f"[{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}] | {r['moved']} ({r['gained']} / {r['lost']}) |")
            rows.append({"date": stamp, "hardware": f"{platform.machine()} CPU", "label": args.label,
                         "system": system, "protocol": proto, **{k: round(v, 4) if isinstance(v, float) else v
                                                                  for k, v in r.items()},
                         "before_cache": " + ".join(args.before), "after_cache": " + ".join(args.after)})
    print("\n".join(table))
    if args.md:
        head = [PAIRED_BEGIN, f"## Paired before / after: {args.label}", "",
                f"`python benchmarks/accuracy/paired_caches.py` ({stamp}): each log's headline hit (Who&When step "
                "top-1, TRAIL precision@1) on the cache before and after the change, paired log by log; fitted: a "
                f"log's hit is its mean over the {len(FOLD_SEEDS)} fold seeds; the interval resamples logs (2,000, "
                "seed 0). Rows in `benchmarks/results/paired_caches.csv`.", ""]
        note = [args.note, ""] if args.note else []
        replace_block(Path(args.md), "\n".join(head + table + [""] + note + [PAIRED_END]), PAIRED_BEGIN, PAIRED_END)
    append_rows(Path(args.csv), rows)


if __name__ == "__main__":
    main()
