"""Learning curve of `masprism-batch fit` (issue 23, item 5): how many labelled logs of a system it takes.

    python benchmarks/accuracy/accuracy_extract.py --counterfactual-k 0 --no-learned-heads   # prefills, once (resumable)
    python benchmarks/accuracy/bench_learning_curve.py --counterfactual-k 0 --no-learned-heads

For each dev system and k = 5, 10, 20, 40 and "all": 20 random draws of k labelled logs, fitted by the product's
fit (masprism_batch/fit/system.py, as `fit` runs it) and tested on that system's remaining logs ("all": 5-fold within
the system x 8 seeds, the protocol of the per-system 5-fold reference figures). Every method is scored on the
same test logs of a draw, so the targets compare them by the paired difference over draws (mean ± its SE).
Beside the fitted verdict, on the same test logs: the zero-training rule, the same fit with the selection before
issue 59 (`--ablate selection`, default: one option's margin for the step, Z_AGENT 1.0), or allowed to correct only
the rule's order (`--ablate orders`: what fit.OFFSETS adds), and the label-prior baselines learned from the same k
labels (most common blamed position; most common blamed agent).
Step: top-1 (Who&When) / P@1 (TRAIL) over logs with a labelled step; agent: exact (Who&When). Also the
accuracy of the most confident half of the fitted verdicts and the fitted confidence on the test logs (its AUROC,
interquartile range and which confidence the fit kept: issue 59), each fit given the zero-training calibration
fitted on the other systems (fitted_confidence.loso_calibrations), as `fit` reads fallback.json's.
The table and the targets it checks are written by learning_curve_report.py.
Writes tidy rows to benchmarks/results/learning_curve.csv and a section of docs/results.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import platform
import sys
import time
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.accuracy.accuracy_cases import FOLD_SEEDS, add_cache_args, cached_cases, fit_cases
from benchmarks.accuracy.accuracy_report import replace_block
from benchmarks.accuracy.fitted_confidence import loso_calibrations
from benchmarks.accuracy.learning_curve_report import ABLATION, MAXT, SELECTION, markdown
from benchmarks.rows import write_rows
from masprism_batch.fit import fitting as ft
from masprism_batch.fit import system as fs
from masprism_batch.method import calibrate
from masprism_batch.method import confidence as cf
from masprism_batch.verdict import case as vcase
from masprism_batch.verdict import rules as zr
from masprism_batch.verdict.rankfile import SystemRanker

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("bench_learning_curve")
KS = (5, 10, 20, 40, "all")
ABLATIONS = ("maxt",)  # default; "orders" adds the fit allowed only the rule's order (--ablate orders)


@contextmanager
def before_issue_59():
    """fit/system.py's selection as it was before issue 59: the step's margin for one option (no max-t over the
    options tried), the author and mixing rule at the ranker's margin (Z_AGENT 1.0). Measured beside the fit as it
    ships, paired on the same draws."""
    saved = fs.MULTIPLE, fs.Z_AGENT
    fs.MULTIPLE, fs.Z_AGENT = False, 1.0
    try:
        yield
    finally:
        fs.MULTIPLE, fs.Z_AGENT = saved


def _step_agent(applied) -> tuple[int, str | None]:
    order, _, agent, _ = applied
    return order[0], agent


def evaluate(train: list[vcase.LogCase], test: list[vcase.LogCase], system: str, rule: str, rule_agent: str,
             ablations=ABLATIONS, zero_cal: dict | None = None) -> dict:
    """{(method, metric): value} of one draw; `zero_cal`: the zero-training confidence's calibration the fit
    reads (as `fit` reads fallback.json's), fitted on the other systems only."""
    f = fs.fit_system(train, system, rule=rule, rule_agent=rule_agent, zero_cal=zero_cal)
    sr = SystemRanker(f.entry, "")
    others = {}
    if "orders" in ablations:  # the same fit allowed to correct only the rule's order (what each order adds)
        others[ABLATION] = SystemRanker(fs.fit_system(train, system, rule=rule, rule_agent=rule_agent,
                                                      offsets=("rule",)).entry, "")
    if "selection" in ablations:  # the same fit with the selection before issue 59
        with before_issue_59():
            others[SELECTION] = SystemRanker(fs.fit_system(train, system, rule=rule, rule_agent=rule_agent).entry, "")
    if "maxt" in ablations:  # the same fit with the step's margin for the best of the options tried (not shipped)
        saved, fs.MULTIPLE = fs.MULTIPLE, True
        try:
            others[MAXT] = SystemRanker(fs.fit_system(train, system, rule=rule, rule_agent=rule_agent).entry, "")
        finally:
            fs.MULTIPLE = saved
    pri = vcase.Priors.count(train)
    res: dict[tuple[str, str], list] = {}
    conf, hits = [], []
    for c in test:
        order, _, agent, conf_c = sr.apply(c.trace, c.rows, c.ranked)
        top = c.ranked[0] if c.ranked else 0
        ti = pri.top_index()
        got = {"fitted": (order[0], agent),
               **{m: _step_agent(ab.apply(c.trace, c.rows, c.ranked)) for m, ab in others.items()},
               "zero-training rule": (top, zr.agent_verdict(rule_agent, c.trace, c.rows, c.ranked or [top])),
               "label prior: position": (min(ti, len(c.trace.steps) - 1) if ti is not None else top, None),
               "label prior: agent": (None, pri.top_agent(c.trace) or zr.agent_verdict(zr.FLOOR, c.trace, c.rows,
                                                                                       c.ranked or [top]))}
        for m, (step, ag) in got.items():
            if step is not None:
                res.setdefault((m, "step"), []).append(ft.hit(c, step))
            if ag is not None and c.gold_agents:
                res.setdefault((m, "agent"), []).append(ft.agent_hit(c, ag))
        conf.append(conf_c)
        hits.append(ft.hit(c, order[0]))
    out = {k: float(np.mean(v)) for k, v in res.items() if v}
    if conf and all(x is not None for x in conf):
        out[("fitted, top 50% confident", "step")] = calibrate.accuracy_at_coverage(conf, hits)[0.5][1]
        out.update(confidence_rows(f.entry, conf, hits))
    out[("fitted", "uses ranker")] = float(f.verdict == "ranker")
    out[("fitted", "uses prior")] = float(f.verdict == "prior")
    if any(c.gold_agents for c in train):
        out[("fitted", "agent: uses prior")] = float(f.entry["agent_rule"].startswith("prior"))
        out[("fitted", "agent: uses author/aggregate")] = float(f.entry["agent_rule"] in ("author", "aggregate",
                                                                                       fs.MIX_AGENT))
    return out


def confidence_rows(entry: dict, conf: list[float], hits: list[bool]) -> dict:
    """The fitted confidence on a draw's test logs (issue 59): its AUROC against a right step (none where every
    test verdict is right or every one wrong), its interquartile range, whether the fit kept the zero-training
    one, and whether the one kept ranked the fit's own folds worse than the other (never, by construction); how
    honest it is: its mean minus the test logs' hit rate, the same within the more and the less confident half
    (ties split in input order); and the AUROC the fit measured on its own folds (what its scale is matched to)."""
    h = entry["heldout"]
    c, y = np.asarray(conf, dtype=np.float64), np.asarray(hits, dtype=np.float64)
    order = np.argsort(-c, kind="stable")
    top, bottom = order[: len(c) // 2], order[len(c) // 2:]
    out = {("fitted", "confidence iqr"): float(np.subtract(*np.percentile(conf, [75, 25]))),
           ("fitted", "confidence kept zero-training"): float(h.get("confidence_kept") == "zero-training"),
           ("fitted", "confidence minus hit rate"): float(c.mean() - y.mean()),
           ("fitted", "confidence minus hit rate, bottom half"): float(c[bottom].mean() - y[bottom].mean())}
    if top.size:
        out[("fitted", "confidence minus hit rate, top half")] = float(c[top].mean() - y[top].mean())
    if h.get("auroc") is not None:
        out[("fitted", "confidence own auroc")] = float(h["auroc"])
    if (a := cf.auroc(conf, hits)) is not None:
        out[("fitted", "confidence auroc")] = float(a)
    fa, za = h.get("fitted_auroc"), h.get("zero_training_auroc")
    if fa is not None and za is not None:
        out[("fitted", "confidence kept the worse on its folds")] = float(h["auroc"] < max(fa, za))
    return out


def draws(cases: list[vcase.LogCase], k, n_draws: int, seed: int):
    """(train, test) pairs: k random logs vs the rest; "all": 5-fold x len(FOLD_SEEDS) (each fold once per seed, as the per-system 5-fold figures)."""
    rng = np.random.default_rng(seed)
    if k == "all":
        for _ in range(len(FOLD_SEEDS)):
            fold = rng.permutation(len(cases)) % 5
            for f in range(5):
                yield ([c for c, x in zip(cases, fold, strict=True) if x != f],
                       [c for c, x in zip(cases, fold, strict=True) if x == f])
        return
    for _ in range(n_draws):
        idx = rng.permutation(len(cases))
        yield [cases[i] for i in idx[:k]], [cases[i] for i in idx[k:]]


def system_draws(fc: list[vcase.LogCase], system: str, k, n_draws: int):
    """`draws` of one system's labelled logs, seeded by the system and k only (not by how many rows came before:
    adding a reported column must not redraw every split; two models' caches sorted alike draw the same logs);
    nothing where k labelled logs would leave fewer than 5 to test on."""
    if k != "all" and k >= len(fc) - 4:
        return iter(())
    return draws(fc, k, n_draws, seed=zlib.crc32(f"{system}|{k}".encode()))


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
    ap.add_argument("--ablate", nargs="*", default=list(ABLATIONS), choices=["selection", "maxt", "orders"],
                    help="fits measured beside the shipped one on the same draws: the selection before issue 59, "
                         "the step's margin for the best of the options tried (max-t, not shipped), the rule's "
                         "order alone (each one more fit per draw)")
    ap.add_argument("--note", default="", help="a sentence added to the section's opening paragraph (e.g. that the "
                    "cache was partial when the curve was drawn)")
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
    zero_cals = loso_calibrations(cases, rule)  # each system's from the other systems' verdicts only
    rows, t0 = [], time.process_time()
    for system in sorted({c.system for c in cases}):
        fc = fit_cases([c for c in cases if c.system == system], rule)
        for k in KS:
            for d, (train, test) in enumerate(system_draws(fc, system, k, args.draws)):
                for (m, metric), v in evaluate(train, test, system, rule, rule_agent, args.ablate,
                                                   zero_cals.get(system)).items():
                    rows.append({"system": system, "k": k, "draw": d, "n_train": len(train), "n_test": len(test),
                                 "method": m, "metric": metric, "value": round(v, 4)})
            log.info("%s k=%s done (%.0f s CPU)", system, k, time.process_time() - t0)
    write_rows(Path(args.csv), rows)
    replace_block(Path(args.md), markdown(rows, cases, rule, rule_agent, args))


if __name__ == "__main__":
    main()
