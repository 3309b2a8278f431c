"""One log as a ranker reads it, and the features a fitted ranker file weighs: the log's trace, its step rows,
the zero-training rule's order of its candidates (and, when it is labelled, its gold steps and agents), its base
step features and the label priors a fit counted.

Shared by the run-time verdict (verdict/rankfile.py applies a fitted entry to an unlabelled log) and the offline
fit (fit/fitting.py, fit/system.py), so that both read a log the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from masprism_batch.method import ranker as rk
from masprism_batch.trace import Trace, norm_agent

# What a fitted ranker reads: what any log has plus this system's turn-taking (within one system the agents'
# choreography is real signal), without the counterfactual and per-head features, whose ablations lost
# nothing (docs/results.md) and which cost most of a trace's time (method/reads.py skips them when nothing reads them).
COSTLY = {"cf_z": "counterfactual", "has_cf": "counterfactual", "attn_learned_norm": "head_attention"}
BASE_FEATURES = [f for f in rk.FEATURES if f not in COSTLY]
PRIOR_FEATURES = ["pos_prior", "relpos_prior", "agent_prior"]
OFFSET_SCALE = 2.0
RELPOS_BINS = 10


@dataclass
class LogCase:
    """One log: its trace, step_scores rows (ordered by step), gold steps (any of them is a hit; [] when unlabelled),
    blamed agents (trace.norm_agent names; [] when unlabelled) and the zero-training rule's order of its candidates;
    gold_kinds: the categories labelled at gold steps, as written (what `fit` learns a team's kinds from)."""

    trace: Trace
    rows: list[dict]
    gold: list[int]
    gold_agents: list[str]
    ranked: list[int]
    key: str = ""
    gold_kinds: dict[int, list[str]] = field(default_factory=dict)
    _base: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        self.key = self.key or self.trace.trace_id

    def base(self) -> np.ndarray:
        """The log's base step features (computed once: every fold and strength reuses them)."""
        if self._base is None:
            self._base = rk.step_features(self.trace, self.rows)[:, [rk.FEATURES.index(f) for f in BASE_FEATURES]]
        return self._base


@dataclass
class Priors:
    """Label counts of the training logs: blamed index, blamed relative-position bin, blamed agent."""

    pos: dict[int, float] = field(default_factory=dict)
    relpos: dict[int, float] = field(default_factory=dict)
    agent: dict[str, float] = field(default_factory=dict)
    n: int = 0

    @classmethod
    def count(cls, cases: list[LogCase]) -> Priors:
        p = cls()
        for c in cases:
            p.add(c, 1.0)
        return p

    def add(self, c: LogCase, sign: float) -> None:
        n = len(c.trace.steps)
        for g in c.gold:  # a log with several blamed steps spreads one count over them
            w = sign / len(c.gold)
            self.pos[g] = self.pos.get(g, 0.0) + w
            b = _bin(g, n)
            self.relpos[b] = self.relpos.get(b, 0.0) + w
        for a in gold_agent_names(c):
            self.agent[a] = self.agent.get(a, 0.0) + sign / max(len(gold_agent_names(c)), 1)
        self.n += int(sign)

    def features(self, trace: Trace) -> np.ndarray:
        n, d = len(trace.steps), max(self.n, 1)
        return np.stack([np.array([self.pos.get(i, 0.0) / d for i in range(n)]),
                         np.array([self.relpos.get(_bin(i, n), 0.0) / d for i in range(n)]),
                         np.array([self.agent.get(norm_agent(s.agent) or "", 0.0) / d for s in trace.steps])], axis=1)

    def top_index(self) -> int | None:
        return min(self.pos, key=lambda i: (-self.pos[i], i)) if self.pos else None

    def top_agent(self, trace: Trace) -> str | None:
        present = {}
        for s in trace.steps:
            if norm_agent(s.agent):
                present.setdefault(norm_agent(s.agent), s.agent)
        best = [a for a in sorted(self.agent, key=lambda a: (-self.agent[a], a)) if a in present]
        return present[best[0]] if best else None

    def to_json(self) -> dict:
        return {"pos": {str(k): v for k, v in self.pos.items()}, "relpos": {str(k): v for k, v in self.relpos.items()},
                "agent": self.agent, "n": self.n}

    @classmethod
    def from_json(cls, d: dict) -> Priors:
        return cls({int(k): v for k, v in d["pos"].items()}, {int(k): v for k, v in d["relpos"].items()},
                   dict(d["agent"]), int(d["n"]))


def _bin(i: int, n: int) -> int:
    return min(RELPOS_BINS - 1, int(RELPOS_BINS * i / max(n, 1)))


def gold_agent_names(c: LogCase) -> list[str]:
    """The labelled agent, else the authors of the gold steps (TRAIL labels spans, not agents)."""
    if c.gold_agents:
        return c.gold_agents
    return sorted({norm_agent(c.trace.steps[g].agent) for g in c.gold if norm_agent(c.trace.steps[g].agent)})


def rule_offset(n: int, ranked: list[int], scale: float = OFFSET_SCALE) -> np.ndarray:
    off = np.zeros(n)
    for pos, k in enumerate(ranked):
        off[k] = scale / (pos + 1)
    return off


def design(c: LogCase, priors: Priors, loo: bool) -> np.ndarray:
    """[N, F] base + prior features; loo: the log's own label is taken out of the prior counts (training)."""
    if loo:
        priors.add(c, -1.0)
    try:
        pf = priors.features(c.trace)
    finally:
        if loo:
            priors.add(c, 1.0)
    return np.concatenate([c.base(), pf], axis=1)

