"""Synthetic labelled logs for the fit tests: random prefill rows with a planted rule for the gold step."""

import numpy as np
import pytest

from masprism_batch.trace import Step, Trace
from masprism_batch.verdict import case as vcase


def synth_case(rng, i, gold_by="nll", source="team/agents", agent_gold=None):
    n = int(rng.integers(6, 15))
    steps = [Step(index=j, agent=str(rng.choice(["Planner", "Coder", "Critic"])), content="x " * int(rng.integers(1, 40)),
                  role="assistant") for j in range(n)]
    ranked = [int(x) for x in rng.permutation(n)[:5]]
    rows = []
    for j in range(n):
        rows.append({"step": j, "agent": steps[j].agent, "nll_pass1": float(rng.random() * 4), "nll_pass2": float(rng.random() * 4),
                     "h_score": float(rng.random()), "score": float(5 - ranked.index(j)) if j in ranked else None,
                     "rank": ranked.index(j) + 1 if j in ranked else None, "is_symptom": bool(rng.random() < .2),
                     "is_candidate": j in ranked, "has_failure_word": bool(rng.random() < .2),
                     "attention_pass1": [float(x) for x in rng.random(j + 1)]})
    if gold_by == "nll":  # the planted signal: the most surprising step is the source
        gold = [int(np.argmax([r["nll_pass1"] for r in rows]))]
    elif gold_by == "rule":
        gold = [ranked[0]]
    else:
        gold = [int(rng.integers(0, n))]
    agents = [agent_gold] if agent_gold else [steps[gold[0]].agent.lower()]
    t = Trace(trace_id=f"{source}-{i}", source=source, steps=steps)
    return vcase.LogCase(t, rows, gold, agents, ranked)


@pytest.fixture
def synth():
    def make(k, seed=0, **kw):
        rng = np.random.default_rng(seed)
        return [synth_case(rng, i, **kw) for i in range(k)]
    return make
