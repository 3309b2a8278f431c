"""Accuracy of attributions against the labels a trace carries, beside the random baseline of each metric.

Who&When-style labels (mistake_step / mistake_agent): step top-1, top-3, within +-1 step, agent of the
predicted step; exact index match only. TRAIL-style labels (error span ids): location accuracy
|gold & predicted| / |gold| and precision at k = 1 and k = K (all candidates). Random baselines are exact
expectations of drawing uniformly among the trace's steps (spans: among steps that carry a span id, of any
kind -- the method doc's figures draw among LLM spans only, so ours are a little lower).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

_SUFFIX = re.compile(r"\s*\([^)]*\)\s*$")
METRICS_STEP = ("step_top1", "step_top3", "step_within1", "agent")
METRICS_SPAN = ("loc_acc@1", "precision@1", "loc_acc@k", "precision@k")


def norm_agent(a: str | None) -> str | None:
    """Who&When compares agents suffix-stripped ("Orchestrator (thought)") and case-insensitively."""
    return None if a is None else _SUFFIX.sub("", a).strip().lower()


def trace_outcome(attr: dict[str, Any], labels: dict[str, Any] | None, agents: list[str | None],
                  span_ids: list[str | None]) -> dict[str, tuple[float, float]]:
    """{metric: (value, random baseline)} for one attributed trace; {} when it has no usable labels."""
    out: dict[str, tuple[float, float]] = {}
    if not labels:
        return out
    n = len(agents) or int(attr.get("n_steps") or 0)
    ranked = [c["step"] for c in (attr.get("candidates") or [])]
    if not ranked and attr.get("pred_step") is not None:
        ranked = [attr["pred_step"]]
    gold = labels.get("mistake_step")
    if gold is not None and n > 0:
        top = ranked[0] if ranked else None
        out["step_top1"] = (float(top == gold), 1.0 / n)
        out["step_top3"] = (float(gold in ranked[:3]), min(3, n) / n)
        near = sum(1 for s in range(max(0, gold - 1), min(n, gold + 2)))
        out["step_within1"] = (float(top is not None and abs(top - gold) <= 1), near / n)
        gold_agent = norm_agent(labels.get("mistake_agent"))
        if gold_agent is not None and agents:
            pred_agent = norm_agent(agents[top]) if top is not None and top < len(agents) else None
            share = sum(1 for a in agents if norm_agent(a) == gold_agent) / len(agents)
            out["agent"] = (float(pred_agent == gold_agent), share)
    locs = set(labels.get("error_locations") or [])
    spans = [s for s in span_ids if s]
    if locs and spans:
        k = max(1, len(ranked))
        inside = len(locs & set(spans)) / len(spans)  # chance that one random span is a gold one
        for tag, kk in (("1", 1), ("k", k)):
            pred = {span_ids[s] for s in ranked[:kk] if s < len(span_ids) and span_ids[s]}
            hit = len(locs & pred)
            draws = min(kk, len(spans))
            out[f"loc_acc@{tag}"] = (hit / len(locs), draws * inside / len(locs))
            out[f"precision@{tag}"] = (hit / len(pred) if pred else 0.0, inside)
    return out


class AccuracyAccumulator:
    """Per-source means of every metric and of its baseline, fed one trace at a time."""

    def __init__(self) -> None:
        self._sum: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0, 0.0])

    def add(self, source: str | None, outcome: dict[str, tuple[float, float]]) -> None:
        for metric, (v, b) in outcome.items():
            acc = self._sum[(source or "", metric)]
            acc[0] += 1
            acc[1] += v
            acc[2] += b

    def rows(self) -> list[dict[str, Any]]:
        order = {m: i for i, m in enumerate(METRICS_STEP + METRICS_SPAN)}
        keys = sorted(self._sum, key=lambda k: (k[0], order.get(k[1], 99)))
        return [{"source": s, "metric": m, "n_traces": int(self._sum[(s, m)][0]),
                 "value": self._sum[(s, m)][1] / self._sum[(s, m)][0],
                 "random_baseline": self._sum[(s, m)][2] / self._sum[(s, m)][0]} for s, m in keys]
