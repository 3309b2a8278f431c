"""Who&When scoring: step top-1 / top-3 / within ±1 step and agent accuracy, per subset, with baselines.

Step indices are 0-based positions in the trace (= indices into the original `history`). Baselines are exact
expectations on the same cases (nothing is sampled):
- random: a uniformly random step; top-1 = mean 1/N, top-3 = mean min(3,N)/N, ±1 = mean |{j: |j-g|<=1}|/N,
  agent = mean share of steps whose agent is the gold agent.
- first_step: always step 0 (top-3: steps 0,1,2). On Who&When step 0 is the task message: 14% on the
  Algorithm-Generated dev split here, 0% on Hand-Crafted.
- step_1: always step 1, the first reply after the task message (top-3: steps 1,2,3). This is the convention
  behind the "~27% always-step-1" figure quoted for Algorithm-Generated (24% = 19/78 on the dev split here).
- majority_agent: agent only; the agent with the most steps in the trace (ties: the one acting first). Uses no
  label.
- label_majority_agent: agent only; the most frequent gold agent of the subset (ties: alphabetical). It is
  fitted on the labels it is scored on, so it is an optimistic reference, not a method.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from masprism_batch.eval.predictions import index_rows, ranked_steps, step_agent
from masprism_batch.method.calibrate import mean
from masprism_batch.trace import Trace, norm_agent

DATASET = "who-and-when"
METRICS = ("step_top1", "step_top3", "step_within1", "agent")


def _majority(trace: Trace) -> str | None:
    counts = Counter(a for a in (norm_agent(s.agent) for s in trace.steps) if a is not None)
    if not counts:
        return None
    first = {}
    for i, s in enumerate(trace.steps):
        first.setdefault(norm_agent(s.agent), i)
    return max(counts, key=lambda a: (counts[a], -first[a]))


def _fixed_step(trace: Trace, g: int, gold_agent: str | None, k: int) -> dict[str, float | None]:
    n = len(trace.steps)
    p = min(k, n - 1)
    return {"step_top1": float(p == g), "step_top3": float(g in range(p, min(p + 3, n))),
            "step_within1": float(abs(p - g) <= 1),
            "agent": None if gold_agent is None else float(norm_agent(trace.steps[p].agent) == gold_agent)}


def _random(trace: Trace, g: int, gold_agent: str | None) -> dict[str, float | None]:
    n = len(trace.steps)
    near = min(g + 1, n - 1) - max(g - 1, 0) + 1
    same = sum(norm_agent(s.agent) == gold_agent for s in trace.steps)
    return {"step_top1": 1 / n, "step_top3": min(3, n) / n, "step_within1": near / n,
            "agent": None if gold_agent is None else same / n}


def _method(trace: Trace, row: dict | None, g: int, gold_agent: str | None) -> dict[str, float | None]:
    ranked = ranked_steps(row)
    top = ranked[0] if ranked else None
    agent = None if gold_agent is None else float(
        top is not None and norm_agent(step_agent(trace, row, top)) == gold_agent)
    return {"step_top1": float(top == g), "step_top3": float(g in ranked[:3]),
            "step_within1": float(top is not None and abs(top - g) <= 1), "agent": agent}


def _aggregate(per_case: list[dict[str, float | None]], keys=METRICS) -> dict[str, Any]:
    # a metric no case defines (step metrics of agent-only baselines) is None, so every dict has every key
    out: dict[str, Any] = {"n": len(per_case)}
    for k in keys:
        vals = [c[k] for c in per_case if c.get(k) is not None]
        out[k] = mean(vals)
    out["n_agent"] = sum(1 for c in per_case if c.get("agent") is not None)
    return out


def score_who_and_when(rows: Iterable[dict[str, Any]] | dict[str, dict], traces: Iterable[Trace],
                       on_missing: str = "miss") -> dict[str, Any]:
    """Score attribution rows against step-labelled traces. on_missing: "miss" (score 0) or "skip"."""
    if on_missing not in ("miss", "skip"):
        raise ValueError(f"on_missing must be 'miss' or 'skip', got {on_missing!r}")
    by_id = rows if isinstance(rows, dict) else index_rows(rows)
    excluded: Counter = Counter()
    subsets: dict[str, list] = {}
    for t in traces:
        lab = t.labels
        if lab is None or lab.mistake_step is None:
            excluded["unlabelled"] += 1
            continue
        if not 0 <= lab.mistake_step < len(t.steps):
            excluded["label_out_of_range"] += 1
            continue
        row = by_id.get(t.trace_id)
        if row is None and on_missing == "skip":
            excluded["no_attribution"] += 1
            continue
        subsets.setdefault(t.source, []).append((t, row))

    result: dict[str, Any] = {"dataset": DATASET, "subsets": {}, "baselines": {}, "excluded": dict(excluded)}
    for name in sorted(subsets):
        cases = subsets[name]
        golds = [(t, row, t.labels.mistake_step, norm_agent(t.labels.mistake_agent)) for t, row in cases]
        m = _aggregate([_method(t, r, g, a) for t, r, g, a in golds])
        m["n_missing"] = sum(1 for _, r, _, _ in golds if r is None)
        result["subsets"][name] = m
        prior = Counter(a for *_, a in golds if a is not None)
        label_major = min(prior, key=lambda a: (-prior[a], a)) if prior else None
        result["baselines"][name] = {
            "random": _aggregate([_random(t, g, a) for t, _, g, a in golds]),
            "first_step": _aggregate([_fixed_step(t, g, a, 0) for t, _, g, a in golds]),
            "step_1": _aggregate([_fixed_step(t, g, a, 1) for t, _, g, a in golds]),
            "majority_agent": _aggregate(
                [{"agent": None if a is None else float(_majority(t) == a)} for t, _, _, a in golds]),
            "label_majority_agent": _aggregate(
                [{"agent": None if a is None else float(label_major == a)} for *_, a in golds]),
        }
    return result
