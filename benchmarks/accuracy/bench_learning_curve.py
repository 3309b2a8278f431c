"""Learning curve of `masprism-batch fit` (issue 23, item 5): how many labelled logs of a system it takes.

    python benchmarks/accuracy/accuracy_extract.py --counterfactual-k 0 --no-learned-heads   # prefills, once (resumable)
    python benchmarks/accuracy/bench_learning_curve.py --counterfactual-k 0 --no-learned-heads

For each dev system and k = 5, 10, 20, 40 and "all": 20 random draws of k labelled logs, fitted by the product's
fit (masprism_batch/fit/system.py, as `fit` runs it) and tested on that system's remaining logs ("all": 5-fold within
the system x 8 seeds, the protocol of the per-system 5-fold reference figures). Every method is scored on the
same test logs of a draw, so the targets compare them by the paired difference over draws (mean ± its SE).
Beside the fitted verdict, on the same test logs: the zero-training rule, the same fit allowed to correct only
the rule's order (what fit.OFFSETS adds), and the label-prior baselines learned from the same k labels (most
common blamed position; most common blamed agent).
Step: top-1 (Who&When) / P@1 (TRAIL) over logs with a labelled step; agent: exact (Who&When). Also the
accuracy of the most confident half of the fitted verdicts (calibrated confidence).
Just over 300 lines: the draws, the paired comparisons and the table they print stay in one script.
Writes tidy rows to benchmarks/results/learning_curve.csv and a section of docs/results.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import logging
import platform
import sys
import time
import zlib
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy.accuracy_cases import FOLD_SEEDS, add_cache_args, cached_cases, fit_cases
from benchmarks.accuracy.accuracy_report import CURVE_BEGIN, CURVE_END, replace_block
from masprism_batch.fit import fitting as ft
from masprism_batch.fit import system as fs
from masprism_batch.fit.rankfile import SystemRanker
from masprism_batch.method import calibrate
from masprism_batch.method import rules as zr

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench_learning_curve")
KS = (5, 10, 20, 40, "all")
ABLATION = "fitted, rule's order only"


def evaluate(train: list[ft.FitCase], test: list[ft.FitCase], system: str, rule: str, rule_agent: str) -> dict:
    """{(method, metric): value} of one draw."""
    f = fs.fit_system(train, system, rule=rule, rule_agent=rule_agent)
    sr = SystemRanker(f.entry, "")
    # ablation: the same fit allowed to correct only the rule's order (what each order adds, paired on this draw)
    ab = SystemRanker(fs.fit_system(train, system, rule=rule, rule_agent=rule_agent, offsets=("rule",)).entry, "")
    pri = ft.Priors.count(train)
    res: dict[tuple[str, str], list] = {}
    conf, hits = [], []
    for c in test:
        order, _, agent, cf = sr.apply(c.trace, c.rows, c.ranked)
        ab_order, _, ab_agent, _ = ab.apply(c.trace, c.rows, c.ranked)
        top = c.ranked[0] if c.ranked else 0
        ti = pri.top_index()
        got = {"fitted": (order[0], agent), ABLATION: (ab_order[0], ab_agent),
               "zero-training rule": (top, zr.agent_verdict(rule_agent, c.trace, c.rows, c.ranked or [top])),
               "label prior: position": (min(ti, len(c.trace.steps) - 1) if ti is not None else top, None),
               "label prior: agent": (None, pri.top_agent(c.trace) or zr.agent_verdict(zr.FLOOR, c.trace, c.rows,
                                                                                       c.ranked or [top]))}
        for m, (step, ag) in got.items():
            if step is not None:
                res.setdefault((m, "step"), []).append(ft.hit(c, step))
            if ag is not None and c.gold_agents:
                res.setdefault((m, "agent"), []).append(ft.agent_hit(c, ag))
        conf.append(cf)
        hits.append(ft.hit(c, order[0]))
    out = {k: float(np.mean(v)) for k, v in res.items() if v}
    if conf and all(x is not None for x in conf):
        out[("fitted, top 50% confident", "step")] = calibrate.accuracy_at_coverage(conf, hits)[0.5][1]
    out[("fitted", "uses ranker")] = float(f.verdict == "ranker")
    out[("fitted", "uses prior")] = float(f.verdict == "prior")
    if any(c.gold_agents for c in train):
        out[("fitted", "agent: uses prior")] = float(f.entry["agent_rule"].startswith("prior"))
        out[("fitted", "agent: uses author/aggregate")] = float(f.entry["agent_rule"] in ("author", "aggregate"))
    return out


ALL_SEEDS = len(FOLD_SEEDS)  # k = all: 5-fold x as many seeds as the per-system reference figures


def draws(cases: list[ft.FitCase], k, n_draws: int, seed: int):
    """(train, test) pairs: k random logs vs the rest; "all": 5-fold x ALL_SEEDS (each fold once per seed)."""
    rng = np.random.default_rng(seed)
    if k == "all":
        for _ in range(ALL_SEEDS):
            fold = rng.permutation(len(cases)) % 5
            for f in range(5):
                yield ([c for c, x in zip(cases, fold, strict=True) if x != f],
                       [c for c, x in zip(cases, fold, strict=True) if x == f])
        return
    for _ in range(n_draws):
        idx = rng.permutation(len(cases))
        yield [cases[i] for i in idx[:k]], [cases[i] for i in idx[k:]]


def time_fit(n: int, out: Path) -> str:
    """`masprism-batch fit` on a synthetic run OUTDIR of n labelled logs (10-80 steps each, the schemas a run
    writes; tests/analytics/analytics_synth.py): CPU seconds of the command in this process, no prefill."""
    import random
    import sys

    from typer.testing import CliRunner

    sys.path.insert(0, str(ROOT / "tests" / "analytics"))
    from analytics_synth import AGENTS, WORDS, write_outdir

    from masprism_batch.cli import app

    rng = random.Random(0)
    specs = []
    for t in range(n):
        k = rng.randint(10, 80)
        steps = [{"agent": rng.choice(AGENTS), "content": " ".join(rng.choices(WORDS, k=rng.randint(5, 40)))}
                 for _ in range(k)]
        ranked, g = rng.sample(range(k), k=5), rng.randrange(k)
        specs.append({"trace_id": f"t{t}", "source": "team/x", "system": "x", "steps": steps, "day_offset": 0,
                      "labels": {"mistake_step": g, "mistake_agent": steps[g]["agent"], "error_locations": None,
                                 "error_impacts": None, "error_categories": None},
                      "ranked": ranked, "scores": sorted((rng.uniform(0.1, 9) for _ in ranked), reverse=True),
                      "symptoms": sorted(rng.sample(range(k), k=k // 5)), "nll": [rng.uniform(0.5, 6) for _ in range(k)],
                      "nll2": [rng.uniform(0.5, 6) for _ in range(k)], "model_id": "smollm2-135m"})
    write_outdir(out / "run", specs)
    t0, w0 = time.process_time(), time.perf_counter()
    res = CliRunner().invoke(app, ["fit", str(out / "run"), "-o", str(out / "ranker.json")])
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    if res.exit_code:
        raise RuntimeError(res.output)
    return (f"`masprism-batch fit` on a {n}-log run OUTDIR (synthetic, 10-80 steps per log; `python "
            f"benchmarks/accuracy/bench_learning_curve.py --time-fit {n}`): {cpu:.1f} s CPU, {wall:.1f} s wall, "
            f"{dt.date.today().isoformat()}, {platform.machine()} CPU, 2 cores shared.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cache_args(ap)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--time-fit", type=int, default=None, metavar="N",
                    help="only time `fit` on a synthetic N-log run OUTDIR and print the line")
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "results" / "learning_curve.csv"))
    ap.add_argument("--md", default=str(ROOT / "docs" / "results.md"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.time_fit:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            print(time_fit(args.time_fit, Path(d)))  # noqa: T201 - a benchmark's result line
        return
    cases, _ = cached_cases(args)
    rule, rule_agent = zr.read_fallback(None).rule, zr.read_fallback(None).agent_rule
    rows, t0 = [], time.process_time()
    for system in sorted({c.system for c in cases}):
        fc = fit_cases([c for c in cases if c.system == system], rule)
        for k in KS:
            if k != "all" and k >= len(fc) - 4:  # fewer than 5 logs left to test on
                continue
            # the draws depend only on the system and k (not on how many rows came before: adding a reported
            # column must not redraw every split)
            seed = zlib.crc32(f"{system}|{k}".encode())
            for d, (train, test) in enumerate(draws(fc, k, args.draws, seed=seed)):
                for (m, metric), v in evaluate(train, test, system, rule, rule_agent).items():
                    rows.append({"system": system, "k": k, "draw": d, "n_train": len(train), "n_test": len(test),
                                 "method": m, "metric": metric, "value": round(v, 4)})
            log.info("%s k=%s done (%.0f s CPU)", system, k, time.process_time() - t0)
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    replace_block(Path(args.md), markdown(rows, cases, rule, rule_agent, args))


def _values(rows, system, k, method, metric) -> list[float]:
    return [r["value"] for r in rows if (r["system"], str(r["k"]), r["method"], r["metric"]) == (system, k, method, metric)]


def _agg(rows, system, k, method, metric) -> str:
    v = _values(rows, system, k, method, metric)
    return f"{np.mean(v):.3f} ± {np.std(v):.3f}" if v else ""


def markdown(rows, cases, rule, rule_agent, args) -> str:
    n = {s: sum(c.system == s for c in cases) for s in sorted({c.system for c in cases})}
    lines = [CURVE_BEGIN, "## Learning curve: fitted to the system's own labels (`masprism-batch fit`)", "",
             f"Generated by `python benchmarks/accuracy/bench_learning_curve.py` on {dt.date.today().isoformat()} "
             f"({platform.machine()} CPU, 2 cores shared; model {args.model}; signals from the cache, no prefill). "
             f"Traces: " + ", ".join(f"{s} {v}" for s, v in n.items()) + ". For each k, "
             f"{args.draws} random draws of k labelled logs of the system fitted by the product's fit and tested "
             f"on the system's remaining logs (k = all: 5-fold within the system x {ALL_SEEDS} seeds); mean ± spread (std) over "
             "draws. "
             "Label-prior baselines are learned from the same k labels (`prior position`: the most often blamed "
             "position for every log, a baseline no shipped verdict may be: issue 32). Step: top-1 (TRAIL: P@1) over logs with a "
             f"labelled step; agent: exact (Who&When only). Zero-training: rule `{rule}`, agent rule `{rule_agent}`. "
             "`verdicts used`: share of draws where the fit's internal CV chose, for the step, the label prior "
             "re-ranking each log's own candidates / "
             "the ranker (else the rule), and for the agent the label prior's agent / the author or the ranker's "
             "summed probabilities (else the rule's agent).", ""]
    for s in sorted({r["system"] for r in rows}):
        ks = list(dict.fromkeys(str(r["k"]) for r in rows if r["system"] == s))
        has_agent = any(r["system"] == s and r["metric"] == "agent" for r in rows)
        hdr = ["k", "step: fitted", "step: zero-training", "step: prior position", "step: fitted, top 50% confident"]
        if has_agent:
            hdr += ["agent: fitted", "agent: zero-training", "agent: prior agent"]
        used = ["step verdicts used: prior / ranker"] + (["agent verdicts used: prior / author"] if has_agent else [])
        lines += [f"### {s}", "", "| " + " | ".join(hdr + used) + " |", "|" + "---|" * (len(hdr) + len(used))]
        for k in ks:
            cells = [_agg(rows, s, k, m, "step") for m in ("fitted", "zero-training rule", "label prior: position",
                                                            "fitted, top 50% confident")]
            if has_agent:
                cells += [_agg(rows, s, k, m, "agent") for m in ("fitted", "zero-training rule", "label prior: agent")]
            share = [_agg(rows, s, k, "fitted", m).split(" ±")[0] for m in ("uses prior", "uses ranker")]
            cells.append(" / ".join(share))
            if has_agent:
                cells.append(" / ".join(_agg(rows, s, k, "fitted", m).split(" ±")[0]
                                        for m in ("agent: uses prior", "agent: uses author/aggregate")))
            n_tr = [r["n_train"] for r in rows if r["system"] == s and str(r["k"]) == k]
            label = f"all (~{np.mean(n_tr):.0f})" if k == "all" else k
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += _targets(rows) + _ablation(rows)
    return "\n".join(lines) + CURVE_END


# the per-system 5-fold figures of the 2026-11-24 run (portable ranker, with counterfactual and head features)
# that issue 23 asks the fit with all labels to reach: step (TRAIL P@1), agent
REFERENCE = {"trail/GAIA": (0.636, None), "trail/SWE_Bench": (0.796, None),
             "who-and-when/Algorithm-Generated": (0.303, 0.521), "who-and-when/Hand-Crafted": (0.185, 0.667)}


def _mean(rows, system, k, method, metric):
    v = _values(rows, system, k, method, metric)
    return float(np.mean(v)) if v else None


def _paired(rows, system, k, a, b, metric) -> tuple[float, float, int] | None:
    """Mean and SE over draws of (method a - method b) on the same draw's test logs."""
    val = {(r["method"], r["draw"]): r["value"] for r in rows
           if (r["system"], str(r["k"]), r["metric"]) == (system, k, metric)}
    d = [val[(a, i)] - val[(b, i)] for (m, i) in val if m == a and (b, i) in val]
    if len(d) < 2:
        return None
    return float(np.mean(d)), float(np.std(d, ddof=1) / np.sqrt(len(d))), len(d)


def _vs(f: float, v: float, name: str, paired) -> str:
    cmp = ">=" if f >= v - 1e-9 else "<"
    return f"fitted {f:.3f} {cmp} {name} {v:.3f}" + (f" (paired {paired[0]:+.3f} ± {paired[1]:.3f} SE)" if paired else "")


def _targets(rows) -> list[str]:
    """Issue 23's acceptance, checked on these rows: at k = 20 the fitted verdict >= the zero-training rule and the
    label-prior baselines (mean over draws); with all labels >= the 2026-11-24 per-system 5-fold figures. Beside
    each comparison, the paired difference over draws and its standard error: a miss within ~1 SE is draw noise."""
    out = ["**Targets** (issue 23), checked on the rows above (paired: fitted minus the baseline on the same test "
           "logs, mean ± SE over draws; against a fixed reference figure: ± the SE of the fitted mean):", ""]
    for s in sorted({r["system"] for r in rows}):
        parts = []
        for metric, base in (("step", ("zero-training rule", "label prior: position")),
                             ("agent", ("zero-training rule", "label prior: agent"))):
            f = _mean(rows, s, "20", "fitted", metric)
            if f is None:
                if metric == "step":
                    parts.append("k = 20: not measured (fewer than 25 labelled logs cached)")
                continue
            for b in base:
                v = _mean(rows, s, "20", b, metric)
                if v is not None:
                    parts.append(f"k = 20 {metric}: " + _vs(f, v, b, _paired(rows, s, "20", "fitted", b, metric)))
        for i, metric in enumerate(("step", "agent")):
            ref, f = REFERENCE.get(s, (None, None))[i], _mean(rows, s, "all", "fitted", metric)
            if ref is not None and f is not None:
                v = _values(rows, s, "all", "fitted", metric)
                se = float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
                parts.append(f"all labels {metric}: fitted {f:.3f} ± {se:.3f} {'>=' if f >= ref else '<'} "
                             f"2026-11-24 5-fold {ref:.3f}")
        out.append(f"- {s}: " + "; ".join(parts) + ".")
    return out + [""]


def _ablation(rows) -> list[str]:
    """What the three orders (fit.OFFSETS) add over correcting the rule's order alone, paired on each draw."""
    out = ["**What the ranker's three orders add** (`fit.OFFSETS`: the rule's order, the rule's order at a learned "
           "weight, the label prior's order; against the same fit allowed only the rule's order, on the same "
           "draws; step, paired mean ± SE):", ""]
    for s in sorted({r["system"] for r in rows}):
        ks = list(dict.fromkeys(str(r["k"]) for r in rows if r["system"] == s and r["method"] == ABLATION))
        cells = []
        for k in ks:
            p = _paired(rows, s, k, "fitted", ABLATION, "step")
            if p is not None:
                cells.append(f"k = {k} {p[0]:+.3f} ± {p[1]:.3f}")
        out.append(f"- {s}: " + "; ".join(cells) + ".")
    return out + [""]


if __name__ == "__main__":
    main()
