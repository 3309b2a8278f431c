"""Two models side by side on the same dev logs (issue 52): the accuracy protocols, the learning curve, the
confidence's ranking and the extraction's speed, paired log by log (or draw by draw).

    python benchmarks/accuracy/compare_models.py --data SUBSET \
        --a smollm2-135m /tmp/acc-smol/cache-X --b gemma3-270m /tmp/acc-gemma/cache-Y --md docs/results.md

Each side is a model id and its signal cache folder(s) of the same logs (`accuracy_extract.py --model ID`; a later
folder's logs replace an earlier one's); only the logs both caches hold, aligned with today's steps, are scored.
Per system, for each model (everything held out: no figure reads a label of the logs it scores):
- the step hit of faithful MASPrism (zero-training, nothing fitted), of the zero-training rule chosen
  leave-one-system-out, and of the product's fit 5-fold within the system x FOLD_SEEDS (paired_caches.py's
  protocols): the means and the paired difference B - A with a 95% bootstrap interval over logs;
- the learning curve: `fit` on k random labelled logs of the system (k = 5, 10, 20; 20 draws, the same logs for
  both models), scored on the system's other logs: the mean step hit and the paired difference over draws (mean,
  its standard error);
- the confidence's AUROC against a right step within the system: the zero-training verdict's own (its
  calibration fitted on the other systems) and the fitted verdict's (fitted_confidence.py's folds);
- tokens/s of the extraction: (pass-1 + pass-2 tokens) / seconds over the logs, each model under the load its own
  extraction ran at (say which in --note).
Writes benchmarks/results/compare_models.csv (the whole table) and, with --md, its block in docs/results.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import platform
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy import fitted_confidence as fconf
from benchmarks.accuracy.accuracy_cases import FOLD_SEEDS, Case, fit_cases
from benchmarks.accuracy.accuracy_report import MODELS_BEGIN, MODELS_END, replace_block
from benchmarks.accuracy.bench_learning_curve import system_draws
from benchmarks.accuracy.paired_caches import PROTOCOLS, aligned, mean_hits, overlay, paired, protocol_hits
from benchmarks.rows import write_rows
from masprism_batch.fit import fitting as ft
from masprism_batch.fit import system as fs
from masprism_batch.method import confidence as cf
from masprism_batch.verdict import confidence as vconf
from masprism_batch.verdict import rules as zr
from masprism_batch.verdict.rankfile import SystemRanker

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "compare_models.csv"
KS = (5, 10, 20)
log = logging.getLogger("compare_models")


def curve(cases: list[Case], k: int, n_draws: int, rule: str, rule_agent: str) -> dict[str, list[float]]:
    """Per system, the fitted step hit of each draw of k labelled logs (bench_learning_curve.py's draws: they
    depend on the system, k and the logs' order only, so two models sorted alike draw the same logs)."""
    out = {}
    for system in sorted({c.system for c in cases}):
        fc = fit_cases([c for c in cases if c.system == system], rule)
        got = []
        for train, test in system_draws(fc, system, k, n_draws):
            sr = SystemRanker(fs.fit_system(train, system, rule=rule, rule_agent=rule_agent).entry, "")
            got.append(float(np.mean([ft.hit(c, sr.apply(c.trace, c.rows, c.ranked)[0][0]) for c in test])))
        if got:
            out[system] = got
    return out


def fitted_and_confidence(cases: list[Case], rule: str, rule_agent: str) -> tuple[dict, dict[str, dict[str, tuple]]]:
    """One pass of the fit, 5-fold within each system x FOLD_SEEDS (as fitted_confidence.py: each fit given the
    zero-training calibration of the other systems, which moves only the confidence): each log's fitted hit
    (paired_caches' fitted protocol, from the same held-out rows) and, per system, (AUROC, right verdicts,
    verdicts) of the zero-training verdict's own confidence (leave-one-system-out calibration) and of the
    fitted verdict's (fold by fold; its counts summed over the seeds' folds)."""
    zero = fconf.loso_calibrations(cases, rule)
    seed_rows: list[dict] = []
    _, folds = fconf.measure(cases, rule, rule_agent, zero, FOLD_SEEDS, on_rows=seed_rows.append)
    out = {}
    for system in sorted({c.system for c in cases}):
        own = [c for c in fit_cases([c for c in cases if c.system == system], rule) if c.ranked]
        hits = [ft.hit(c, c.ranked[0]) for c in own]
        fitted = folds.get(system, {}).get("fitted", [])
        fh = [h for _, hs in fitted for h in hs]
        out[system] = {
            "zero-training": (cf.auroc([vconf.zero_training_confidence(c, c.ranked[0], zero[system]) for c in own],
                                       hits), int(sum(hits)), len(hits)),
            "fitted": (fconf.fold_auroc(fitted), int(sum(fh)), len(fh))}
    return mean_hits(cases, seed_rows), out


def speed(cases: list[Case]) -> tuple[int, float, float]:
    """(tokens of both passes, extraction seconds, tokens/s) over `cases`."""
    tok = sum(c.meta["attribution"]["tokens_pass1"] + c.meta["attribution"]["tokens_pass2"] for c in cases)
    secs = sum(c.meta["seconds"] for c in cases)
    return tok, secs, tok / secs if secs else 0.0


def _f(x) -> str:
    return "" if x is None else f"{x:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--a", nargs="+", required=True, metavar=("MODEL", "CACHE"), help="model A: id, cache folder(s)")
    ap.add_argument("--b", nargs="+", required=True, metavar=("MODEL", "CACHE"), help="model B: id, cache folder(s)")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--csv", default=str(RESULTS))
    ap.add_argument("--md", default=None, help="write the tables into this results page (docs/results.md)")
    ap.add_argument("--note", default="", help="a paragraph under the tables: which logs, when, where, what load")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    data = Path(args.data)
    names = {"a": args.a[0], "b": args.b[0]}
    side = {k: aligned(overlay(data, v[1:])) for k, v in (("a", args.a), ("b", args.b))}
    both = set.intersection(*({c.trace.trace_id for c in v} for v in side.values()))
    side = {k: sorted((c for c in v if c.trace.trace_id in both), key=lambda c: c.trace.trace_id)
            for k, v in side.items()}
    fb = zr.read_fallback(None)
    hits, curves, auc, spd = {}, {}, {}, {}
    for k, cases in side.items():
        log.info("%s: %d logs", names[k], len(cases))
        # the fitted protocol's rule ("faithful", paired_caches) is the one every fit here reads
        fitted, auc[k] = fitted_and_confidence(cases, "faithful", fb.agent_rule)
        hits[k] = protocol_hits(cases, names[k], fb.agent_rule, fitted)
        curves[k] = {kk: curve(cases, kk, args.draws, "faithful", fb.agent_rule) for kk in KS}
        spd[k] = speed(cases)
    system_of = {c.trace.trace_id: c.system for c in side["a"]}
    systems = sorted(set(system_of.values()))
    a, b = names["a"], names["b"]
    stamp = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "hardware": f"{platform.machine()} CPU", "model_a": a, "model_b": b}
    rows, rng = [], np.random.default_rng(0)
    t1 = [f"| system | protocol (all held out) | logs | {a} | {b} | paired diff B - A [95% CI] | logs gained / lost |",
          "|---|---|---:|---:|---:|---|---|"]
    for system in systems:
        sel = {t for t, s in system_of.items() if s == system}
        for proto in PROTOCOLS:
            r = paired({t: v for t, v in hits["a"][proto].items() if t in sel},
                       {t: v for t, v in hits["b"][proto].items() if t in sel}, rng)
            t1.append(f"| {system} | {proto} | {r['n']} | {r['before']:.3f} | {r['after']:.3f} | {r['diff']:+.3f} "
                      f"[{r['diff_lo']:+.3f}, {r['diff_hi']:+.3f}] | {r['gained']} / {r['lost']} |")
            rows.append({**stamp, "system": system, "table": "step hit", "protocol": proto, "n": r["n"],
                         "value_a": r["before"], "value_b": r["after"], "diff": r["diff"], "diff_lo": r["diff_lo"],
                         "diff_hi": r["diff_hi"]})
    t2 = [f"| system | k labelled logs | draws | {a} | {b} | paired diff B - A (± SE) |", "|---|---:|---:|---:|---:|---|"]
    for system in systems:
        for k in KS:
            va, vb = curves["a"][k].get(system), curves["b"][k].get(system)
            if not va or not vb:
                continue
            d = np.array(vb) - np.array(va)
            se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
            t2.append(f"| {system} | {k} | {len(d)} | {np.mean(va):.3f} | {np.mean(vb):.3f} | {d.mean():+.3f} "
                      f"(± {se:.3f}) |")
            rows.append({**stamp, "system": system, "table": "learning curve", "protocol": f"fit on {k}, rest held out",
                         "n": len(d), "value_a": float(np.mean(va)), "value_b": float(np.mean(vb)),
                         "diff": float(d.mean()), "diff_lo": float(d.mean() - 1.96 * se),
                         "diff_hi": float(d.mean() + 1.96 * se)})
    t3 = [f"| system | confidence of | AUROC {a} (right / verdicts) | AUROC {b} (right / verdicts) |",
          "|---|---|---:|---:|"]
    for system in systems:
        for kind, proto in (("zero-training", "leave-one-system-out"), ("fitted", f"5-fold x{len(FOLD_SEEDS)}")):
            (va, ra, na), (vb, rb, nb) = auc["a"][system][kind], auc["b"][system][kind]
            t3.append(f"| {system} | {kind} verdict ({proto}) | {_f(va)} ({ra} / {na}) | {_f(vb)} ({rb} / {nb}) |")
            rows.append({**stamp, "system": system, "table": "confidence AUROC", "protocol": f"{kind}, {proto}",
                         "n": na, "value_a": va, "value_b": vb, "diff": None if va is None or vb is None else vb - va,
                         "diff_lo": None, "diff_hi": None})
    t4 = ["| model | logs | tokens (both passes) | extraction s | tokens/s |", "|---|---:|---:|---:|---:|"]
    for k in ("a", "b"):
        tok, secs, tps = spd[k]
        t4.append(f"| {names[k]} | {len(side[k])} | {tok:,} | {secs:,.0f} | {tps:.1f} |")
        rows.append({**stamp, "system": "all", "table": "extraction tokens/s", "protocol": names[k],
                     "n": len(side[k]), "value_a": tps if k == "a" else None, "value_b": tps if k == "b" else None,
                     "diff": None, "diff_lo": None, "diff_hi": None})
    text = ["### Step hit (Who&When top-1, TRAIL precision@1)", "", *t1, "",
            "### Learning curve: `fit` on k labelled logs, scored on the system's other logs", "", *t2, "",
            "### Confidence: AUROC against a right step, within each system", "", *t3, "",
            "### Extraction speed", "", *t4]
    print("\n".join(text))  # noqa: T201 - a benchmark's result
    for r in rows:
        r.update({k: round(v, 4) for k, v in r.items() if isinstance(v, float)})
        r.update({k: "" for k, v in r.items() if v is None})
    write_rows(Path(args.csv), rows)
    if args.md:
        head = [MODELS_BEGIN, f"## Two models on the same logs: {a} (A) against {b} (B) (issue 52)", "",
                f"`python benchmarks/accuracy/compare_models.py` ({stamp['date']}, {stamp['hardware']}): "
                f"{len(both)} dev logs both caches hold; every figure held out (zero-training: nothing fitted; "
                "leave-one-system-out: chosen on the other systems; fitted and the learning curve: scored on logs "
                "the fit did not read). Paired intervals resample logs (2,000, seed 0); the curve's draws are the "
                "same logs for both models. Rows in `benchmarks/results/compare_models.csv`.", ""]
        note = ["", args.note] if args.note else []
        replace_block(Path(args.md), "\n".join(head + text + note + ["", MODELS_END]), MODELS_BEGIN, MODELS_END)


if __name__ == "__main__":
    main()
