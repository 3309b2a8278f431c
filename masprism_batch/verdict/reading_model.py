"""A fitted system's reading order of the steps its verdict did not rank (issue 59): a small conditional logit over
a log's steps, fitted by `fit` on its own labelled logs (fit/stepset_fit.py) for shorter step sets.

The verdict's ranker is fitted to name one step and is pulled toward the zero-training rule's order; what a set
needs is the order of everything after it. This model reads, per step, only what a run already has in its
step_scores rows (no model call, no text): the label prior's chance for the step's agent (its labelled logs + 1/2
over its steps in this log: on Hand-Crafted the web surfer wrote 19% of the steps and 64% of the blamed ones), how
far into that agent's turns the step is, where it sits in the log, and the pass-1 signals (attention inflow,
NLL, length in tokens) standardised within the log. Its weights are few (FEATURES), penalised (L2), and a fit
keeps the order only where its held-out sets are smaller (fit/stepset_fit.py).

A model is {"features": FEATURES, "weights": [...], "agents": {blamed agent: labelled logs}}, held in a step-set
calibration as `model` (tail "learned").
"""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np

from masprism_batch.trace import norm_agent

FEATURES = ("agent", "turn", "rel", "h", "nll", "tokens")
MAX_AGENTS = 10_000  # blamed-agent names a calibration may hold (a team's labels name tens)
MAX_WEIGHT = 1e12  # a fitted weight is a few units; past this the scores' sums may be inf - inf (NaN)
L2 = 1.0  # the weights' penalty: on the dev systems' 5-fold sets it gave the smallest Hand-Crafted sets of 0.01-1


def matrix(rows: list[dict] | None, n: int, agents: dict) -> np.ndarray:
    """[n, len(FEATURES)] of an n-step log from its step_scores `rows` (a step without a row reads as average)."""
    by = {int(r["step"]): r for r in rows or [] if isinstance(r.get("step"), int) and 0 <= r["step"] < n}
    names = [norm_agent(by.get(k, {}).get("agent")) or "" for k in range(n)]
    steps, seen, turn = Counter(names), Counter(), []
    for a in names:
        turn.append(seen[a])
        seen[a] += 1
    cols = {
        "agent": [math.log((float(agents.get(a, 0.0)) + 0.5) / steps[a]) for a in names],
        "turn": np.log1p(np.asarray(turn, dtype=np.float64)),
        "rel": np.arange(n) / max(n - 1, 1),
        "h": _z([by.get(k, {}).get("h_score") for k in range(n)]),
        "nll": _z([by.get(k, {}).get("nll_pass1") for k in range(n)]),
        "tokens": _z([math.log1p(t) if _num(t) and t >= 0 else None
                      for t in (by.get(k, {}).get("tokens_pass1") for k in range(n))]),
    }
    return np.stack([np.asarray(cols[f], dtype=np.float64) for f in FEATURES], axis=1) if n else np.zeros((0, 6))


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _z(xs: list) -> np.ndarray:
    """Standardised within the log; a missing or non-finite value at the mean (0)."""
    v = np.array([float(x) if _num(x) else np.nan for x in xs], dtype=np.float64)
    if not v.size or np.all(np.isnan(v)):
        return np.zeros(len(xs))
    sd = np.nanstd(v)
    return np.nan_to_num((v - np.nanmean(v)) / (sd if sd > 1e-9 else 1.0))


def scores(model: dict, rows: list[dict] | None, n: int) -> np.ndarray:
    """The model's score of every step of an n-step log (higher: read earlier)."""
    return matrix(rows, n, model.get("agents") or {}) @ np.asarray(model["weights"], dtype=np.float64)


def prior_key(rows: list[dict] | None, agents: dict):
    """The step-set tail `prior`'s sort key: (agent's labelled logs + 1/2) / its steps in this log, highest first
    (the label prior's chance for one step, uniform within an agent), then h_score, then the index."""
    who = {r["step"]: norm_agent(r.get("agent")) or "" for r in rows or []}
    steps = Counter(who.values())
    h = {r["step"]: r.get("h_score") for r in rows or []}

    def key(k: int):
        a = who.get(k, "")
        return (-(float(agents.get(a, 0.0)) + 0.5) / max(steps.get(a, 1), 1),
                -(float(h[k]) if _num(h.get(k)) else -math.inf), k)

    return key


def check_agents(agents, where: str = "model.agents") -> str | None:
    """What is wrong with a {blamed agent: labelled logs} dict, or None."""
    if not isinstance(agents, dict) or len(agents) > MAX_AGENTS:
        return f"{where} must be an object of at most {MAX_AGENTS:,} blamed agents and their labelled logs"
    for name, x in agents.items():
        if not _num(x) or x < 0:
            return f"{where}[{str(name)[:40]!r}]: {json.dumps(x)[:40]} is not a count >= 0"
    return None


def check(model) -> str | None:
    """What is wrong with a model dict (a user's ranker file may hold one), or None."""
    if not isinstance(model, dict):
        return "model must be an object"
    if model.get("features") != list(FEATURES):  # as JSON holds them (list() of a number was a TypeError)
        return f"model.features must be {list(FEATURES)}"
    w = model.get("weights")
    if not isinstance(w, list) or len(w) != len(FEATURES) or not all(_num(x) and abs(x) <= MAX_WEIGHT for x in w):
        return f"model.weights must be {len(FEATURES)} finite numbers within ±{MAX_WEIGHT:g}"
    return check_agents(model.get("agents"))
