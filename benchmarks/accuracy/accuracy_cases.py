"""The cached dev cases of the accuracy benchmarks and how a verdict is scored on them (bench_accuracy.py,
bench_learning_curve.py): loading the signal cache, gold steps, the scorers, the zero-training verdicts, and the
product's fit (`masprism-batch fit`: fit/system.py, called here, never re-implemented) 5-fold within a system.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.accuracy.accuracy_extract import extract_config, load_systems, trace_key
from masprism_batch.eval import score_trail, score_who_and_when
from masprism_batch.fit import system as fs
from masprism_batch.trace import norm_agent
from masprism_batch.verdict import case as vcase
from masprism_batch.verdict import rules as zr
from masprism_batch.verdict.rankfile import SystemRanker


class Case:
    def __init__(self, system, trace, meta, arr):
        self.system, self.trace, self.meta, self.arr = system, trace, meta, arr
        self.rows = [dict(r) for r in meta["rows"]]

    @property
    def dataset(self) -> str:
        return self.system.split("/")[0]



ROOT = Path(__file__).resolve().parents[2]
# the fold seeds of every "5-fold within the system" figure: eight, since with three the spread over seeds of a
# small system (Hand-Crafted, 36 logs: ±0.06) was as large as the differences the figures were read for
FOLD_SEEDS = tuple(range(8))
KFOLD = f"5-fold CV within system x{len(FOLD_SEEDS)} seeds"  # the protocol's name in the tables


def add_cache_args(ap: argparse.ArgumentParser) -> None:
    """The arguments every script reading the signal cache takes (as given to accuracy_extract.py)."""
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--work", default="/tmp/masprism-accuracy")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--cache", default=None, help="signal cache folder (default: WORK/cache-<config hash>)")
    ap.add_argument("--counterfactual-k", type=int, default=None, help="as given to accuracy_extract.py")
    ap.add_argument("--no-learned-heads", action="store_true", help="as given to accuracy_extract.py")


def extract_overrides(args) -> dict:
    extra = {} if args.counterfactual_k is None else {"method__counterfactual_k": args.counterfactual_k}
    if args.no_learned_heads:
        extra["method__learned_heads"] = False
    return extra


def cached_cases(args) -> tuple[list, object]:
    """(the cached cases, the extraction config) named by `add_cache_args`' arguments."""
    cfg = extract_config(args.model, **extract_overrides(args))
    cache = Path(args.cache) if args.cache else Path(args.work) / f"cache-{cfg.config_hash()}"
    return load_cases(Path(args.data), cache), cfg


def load_cases(data: Path, cache: Path) -> list[Case]:
    cases = []
    for system, traces in load_systems(data).items():
        for t in traces:
            p = cache / trace_key(t)
            if not p.with_suffix(".json").exists():
                continue
            meta = json.loads(p.with_suffix(".json").read_text())
            if "attribution" not in meta:
                continue
            with np.load(p.with_suffix(".npz")) as z:
                arr = {k: z[k] for k in z.files}
            cases.append(Case(system, t, meta, arr))
    return cases


def gold_of(t) -> list[int]:
    lab = t.labels
    if lab is None:
        return []
    if lab.mistake_step is not None:
        return [lab.mistake_step] if 0 <= lab.mistake_step < len(t.steps) else []
    locs = set(lab.error_locations or [])
    return [i for i, s in enumerate(t.steps) if s.span_id in locs]


# ---- scoring and the zero-training verdicts --------------------------------------------------------------------------
def score(cases: list[Case], rows: dict[str, dict]) -> tuple[dict, dict]:
    """{(system, metric): value} and {(system, baseline, metric): value}."""
    flat, base = {}, {}
    for ds, fn in (("who-and-when", score_who_and_when), ("trail", score_trail)):
        sub = [c for c in cases if c.dataset == ds]
        if not sub:
            continue
        res = fn({c.trace.trace_id: rows[c.trace.trace_id] for c in sub if c.trace.trace_id in rows},
                 [c.trace for c in sub])
        for s, m in res["subsets"].items():
            flat.update({(s, k): v for k, v in m.items() if isinstance(v, (int, float))})
        for s, b in res["baselines"].items():
            for bn, m in b.items():
                base.update({(s, bn, k): v for k, v in m.items() if isinstance(v, (int, float))})
    return flat, base


def headline_mean(flat: dict) -> float:
    """Mean over systems of the headline step metric (Who&When step top-1, TRAIL precision@1)."""
    vals = [v for (s, m), v in flat.items() if m == ("precision@1" if s.startswith("trail") else "step_top1")]
    return float(np.mean(vals)) if vals else 0.0


def faithful_rows(cases: list[Case]) -> dict[str, dict]:
    return {c.trace.trace_id: c.meta["attribution"] for c in cases}


def pass1_rows(cases: list[Case]) -> dict[str, dict]:
    out = {}
    for c in cases:
        cands = [int(x) for x in c.arr["candidates"]]
        h = {r["step"]: r["h_score"] or 0.0 for r in c.rows}
        order = sorted(cands, key=lambda k: (-h[k], k)) or [c.meta["attribution"]["pred_step"]]
        out[c.trace.trace_id] = {"trace_id": c.trace.trace_id, "pred_step": order[0],
                                 "pred_agent": c.trace.steps[order[0]].agent,
                                 "candidates": [{"step": i, "span_id": c.trace.steps[i].span_id} for i in order]}
    return out


def rule_rows(cases: list[Case], rule: str) -> dict[str, dict]:
    """A zero-training rule's verdict: its first candidate, blamed on that step's author."""
    out = {}
    for c in cases:
        ranked = [int(k) for k in c.meta["ranking"]["ranked"]] or [c.meta["attribution"]["pred_step"]]
        order = zr.order(rule, c.rows, ranked)
        out[c.trace.trace_id] = {"trace_id": c.trace.trace_id, "pred_step": order[0],
                                 "pred_agent": c.trace.steps[order[0]].agent,
                                 "candidates": [{"step": i, "span_id": c.trace.steps[i].span_id} for i in order]}
    return out


def available_rules(cases: list[Case]) -> tuple[str, ...]:
    """The zero-training rules the cache can score: counterfactual / learned_heads need signals a cache made with
    --counterfactual-k 0 / --no-learned-heads does not hold (they would silently equal the faithful order)."""
    has_cf = any("D" in c.arr for c in cases)
    has_heads = any("A2h" in c.arr for c in cases)
    return tuple(r for r in zr.RULES if (r != "counterfactual" or has_cf) and (r != "learned_heads" or has_heads))


# ---- the product's fit (issue 23): the same function `masprism-batch fit` runs ---------------------------------------
def fit_cases(cases: list[Case], rule: str = "faithful") -> list[vcase.LogCase]:
    """FitCases of the labelled cached traces: what `masprism-batch fit` builds from a run's step_scores."""
    out = []
    for c in cases:
        gold = gold_of(c.trace)
        if not gold:
            continue
        lab = c.trace.labels
        agents = [norm_agent(lab.mistake_agent)] if lab is not None and norm_agent(lab.mistake_agent) else []
        ranked = zr.order(rule, c.rows, [int(k) for k in c.meta["ranking"]["ranked"]])
        out.append(vcase.LogCase(c.trace, c.rows, gold, agents, ranked))
    return out


def system_fit(cases: list[Case], system: str, rule: str = "faithful", rule_agent: str = "author",
               zero_cal: dict | None = None) -> fs.SystemFit:
    return fs.fit_system(fit_cases(cases, rule), system, rule=rule, rule_agent=rule_agent, zero_cal=zero_cal)


def fitted_rows(train: list[Case], test: list[Case], system: str, rule: str, rule_agent: str,
                zero_cal: dict | None = None) -> dict[str, dict]:
    """Verdicts on `test` of the fit on `train` (applied as `--ranker` applies it), keyed by trace id;
    `zero_cal`: the zero-training confidence's calibration the fit reads (fallback.json's)."""
    sr = SystemRanker(system_fit(train, system, rule, rule_agent, zero_cal).entry, "")
    out = {}
    for c in fit_cases(test, rule) + [fc for fc in _unlabelled(test, rule)]:
        order, _, agent, conf = sr.apply(c.trace, c.rows, c.ranked)
        out[c.trace.trace_id] = {"trace_id": c.trace.trace_id, "pred_step": order[0], "pred_agent": agent,
                                 "confidence": conf,
                                 "candidates": [{"step": i, "span_id": c.trace.steps[i].span_id} for i in order[:5]]}
    return out


def _unlabelled(cases: list[Case], rule: str) -> list[vcase.LogCase]:
    return [vcase.LogCase(c.trace, c.rows, [], [], zr.order(rule, c.rows, [int(k) for k in c.meta["ranking"]["ranked"]]))
            for c in cases if not gold_of(c.trace)]


def fitted_kfold(cases: list[Case], rule: str, rule_agent: str, folds=5, seeds=FOLD_SEEDS):
    """The product's fit, 5-fold within each system (x seeds): what today's per-system rankers are measured by."""
    def rows_of(system, train, test) -> dict:
        return fitted_rows(train, test, system, rule, rule_agent) if test and fit_cases(train) else {}

    return _kfold_scores(cases, rows_of, folds, seeds)


def kfold_rows(cases: list[Case], rows_of, folds: int, seed: int) -> dict[str, dict]:
    """Every log's held-out row under one fold seed: `rows_of(system, train, test)` on each fold of each system."""
    rows: dict[str, dict] = {}
    for system in sorted({c.system for c in cases}):
        sub = [c for c in cases if c.system == system]
        fold = np.random.default_rng(seed).permutation(len(sub)) % folds
        for f in range(folds):
            train = [c for c, k in zip(sub, fold, strict=True) if k != f]
            test = [c for c, k in zip(sub, fold, strict=True) if k == f]
            rows.update(rows_of(system, train, test))
    return rows


def _kfold_scores(cases: list[Case], rows_of, folds: int, seeds, on_rows=None) -> tuple[dict, dict]:
    """Mean and spread over seeds of the scores of `rows_of(system, train, test)` (predicted rows of `test`),
    5-fold within each system: the one split of both k-fold protocols. `on_rows(rows)`: each seed's held-out rows,
    for a caller that reads them otherwise too (per log) without fitting again."""
    per: dict = {}
    for seed in seeds:
        rows = kfold_rows(cases, rows_of, folds, seed)
        if on_rows is not None:
            on_rows(rows)
        for k, v in score(cases, rows)[0].items():
            per.setdefault(k, []).append(v)
    return {k: float(np.mean(v)) for k, v in per.items()}, {k: float(np.std(v)) for k, v in per.items()}
