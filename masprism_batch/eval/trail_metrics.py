"""TRAIL scoring: location accuracy and precision at k (default 1 and 5), per subset, with the random baseline.

Per trace: gold = the set of distinct labelled error span ids (several errors may share a span); predicted@k =
the distinct span ids of the top-k ranked steps (pred_step, then candidates). Location accuracy =
|gold ∩ pred| / |gold| (the benchmark's metric, no precision penalty); precision = |gold ∩ pred| / |pred|,
0 when nothing is predicted (so `n_pred@k`, the mean number predicted, is always reported beside it).
Random baseline: k spans drawn uniformly without replacement among the trace's L distinct LLM spans (steps of
kind 'llm'), G of them gold. The hit count is hypergeometric with mean k'·G/L, k' = min(k, L), so exactly:
location_acc = k'·G / (L·|gold|), precision = G / L, n_pred = k' (all 0 when the trace has no LLM span).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from masprism_batch.eval.predictions import index_rows, ranked_steps, step_span
from masprism_batch.method.calibrate import mean
from masprism_batch.trace import Trace

DATASET = "trail"


def metric_names(ks: Sequence[int]) -> list[str]:
    return [f"{m}@{k}" for k in ks for m in ("location_acc", "precision", "n_pred")]


def _method(trace: Trace, row: dict | None, gold: set[str], ks: Sequence[int]) -> dict[str, float]:
    ranked = ranked_steps(row)
    out = {}
    for k in ks:
        pred: list[str] = []
        for s in ranked[:k]:
            sid = step_span(trace, row, s)
            if sid is not None and sid not in pred:
                pred.append(sid)
        hits = len(gold.intersection(pred))
        out[f"location_acc@{k}"] = hits / len(gold)
        out[f"precision@{k}"] = hits / len(pred) if pred else 0.0
        out[f"n_pred@{k}"] = float(len(pred))
    return out


def _random(trace: Trace, gold: set[str], ks: Sequence[int]) -> dict[str, float]:
    llm = {s.span_id for s in trace.steps if s.kind == "llm" and s.span_id is not None}
    n_llm, g = len(llm), len(gold & llm)
    out = {}
    for k in ks:
        kk = min(k, n_llm)
        out[f"location_acc@{k}"] = kk * g / (n_llm * len(gold)) if n_llm else 0.0
        out[f"precision@{k}"] = g / n_llm if kk else 0.0
        out[f"n_pred@{k}"] = float(kk)
    return out


def _aggregate(per_case: list[dict[str, float]], ks: Sequence[int]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(per_case)}
    for name in metric_names(ks):
        out[name] = mean([c[name] for c in per_case])
    return out


def score_trail(rows: Iterable[dict[str, Any]] | dict[str, dict], traces: Iterable[Trace],
                ks: Sequence[int] = (1, 5), on_missing: str = "miss") -> dict[str, Any]:
    """Score attribution rows against span-labelled traces. on_missing: "miss" (nothing predicted) or "skip"."""
    if on_missing not in ("miss", "skip"):
        raise ValueError(f"on_missing must be 'miss' or 'skip', got {on_missing!r}")
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive, got {ks!r}")
    by_id = rows if isinstance(rows, dict) else index_rows(rows)
    excluded: Counter = Counter()
    subsets: dict[str, list] = {}
    for t in traces:
        if t.labels is None or t.labels.error_locations is None:
            excluded["unlabelled"] += 1
            continue
        gold = {x for x in t.labels.error_locations if x}
        if not gold:
            excluded["no_error_locations"] += 1
            continue
        row = by_id.get(t.trace_id)
        if row is None and on_missing == "skip":
            excluded["no_attribution"] += 1
            continue
        subsets.setdefault(t.source, []).append((t, row, gold))

    result: dict[str, Any] = {"dataset": DATASET, "ks": list(ks), "subsets": {}, "baselines": {},
                              "excluded": dict(excluded)}
    for name in sorted(subsets):
        cases = subsets[name]
        m = _aggregate([_method(t, r, g, ks) for t, r, g in cases], ks)
        m["n_missing"] = sum(1 for _, r, _ in cases if r is None)
        result["subsets"][name] = m
        result["baselines"][name] = {"random": _aggregate([_random(t, g, ks) for t, _, g in cases], ks)}
    return result
