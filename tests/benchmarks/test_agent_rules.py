"""benchmarks/accuracy/agent_rules.py: TRAIL GAIA agent labels derived from the annotated spans, and the LOSO choice of
the zero-training agent rule (issue 23, item 7)."""

from __future__ import annotations

import pytest
from ingest_synth import SEED, rng, trail_trace, write_json

from benchmarks.accuracy import agent_rules as agr
from masprism_batch.ingest import read_inputs
from masprism_batch.trace import Labels, Step, Trace


def _gaia(tmp_path, r):
    """A random smolagents GAIA tree in which the manager delegated to the search agent at least once."""
    while True:
        tid = f"{r.getrandbits(128):032x}"
        doc, exp = trail_trace(r, tid)
        if any(a == "search_agent" for _, a, _, _ in exp):
            return tid, doc, exp


def _annotate(tmp_path, tid, locs):
    write_json(tmp_path / "GAIA" / "annotations" / f"{tid}.json", {"trace_id": tid, "errors": [
        {"category": "c", "location": loc, "evidence": "E", "description": "D", "impact": "HIGH"} for loc in locs]})


def test_gaia_agent_label_is_the_agent_of_the_annotated_spans(tmp_path):
    r = rng("agent-labels")
    cases = {}
    for want in ("search_agent", "CodeAgent", "several", "not a step", "none"):
        tid, doc, exp = _gaia(tmp_path, r)
        write_json(tmp_path / "GAIA" / "traces" / f"{tid}.json.gz", doc, gz=True)
        by_agent = {a: [sid for sid, b, _, _ in exp if b == a] for a in ("search_agent", "CodeAgent")}
        if want in by_agent:
            _annotate(tmp_path, tid, r.choices(by_agent[want], k=r.randint(1, 4)))
        elif want == "several":
            _annotate(tmp_path, tid, [r.choice(by_agent["search_agent"]), r.choice(by_agent["CodeAgent"])])
        elif want == "not a step":  # the AGENT span itself is annotated: no step holds it
            _annotate(tmp_path, tid, [r.choice(by_agent["CodeAgent"]), doc["spans"][0]["child_spans"][0]["span_id"]])
        cases[tid] = want
    traces = {t.trace_id: t for t in read_inputs([str(tmp_path)])}
    got = {tid: agr.trail_agent_label(traces[tid]) for tid in cases}
    expect = {"search_agent": ("search_agent", "labelled"), "CodeAgent": ("CodeAgent", "labelled"),
              "several": (None, "errors in several agents"), "not a step": (None, "error location not a step"),
              "none": (None, "no annotation")}
    assert {tid: got[tid] for tid in cases} == {tid: expect[w] for tid, w in cases.items()}, f"seed {SEED}"
    assert {tid: agr.gold_agent("trail/GAIA", traces[tid]) for tid in cases} == \
        {tid: expect[w][0] and expect[w][0].casefold() for tid, w in cases.items()}
    assert all(agr.gold_agent("trail/SWE_Bench", t) is None for t in traces.values())  # one agent: no question


class _Case:
    def __init__(self, system, trace):
        self.system, self.trace, self.rows = system, trace, []


def _log(tid, agents, blamed):
    steps = [Step(i, a, "x", role="assistant") for i, a in enumerate(agents)]
    return Trace(tid, "who-and-when", steps, labels=Labels(mistake_step=blamed, mistake_agent=agents[blamed]))


@pytest.mark.parametrize("trial", range(3))
def test_loso_never_picks_a_rule_that_loses_on_the_other_systems(trial, np_rng):
    """Three random systems where the blamed step's author is the blamed agent on one and the step verdict points
    at a random step on the others: `author` wins there but loses elsewhere, so held out it is never picked for a
    system it was not best on the others for, and the shipped rule is not below the baseline on any system."""
    g = np_rng
    cases, orders = [], {}
    good = f"sys/{int(g.integers(3))}"
    for s in range(3):
        system = f"sys/{s}"
        for j in range(int(g.integers(25, 40))):
            agents = [str(a) for a in g.choice(["Boss", "Helper", "Critic"], size=int(g.integers(4, 12)), p=[0.6, 0.3, 0.1])]
            blamed = int(g.integers(len(agents)))
            t = _log(f"{system}-{j}", agents, blamed)
            cases.append(_Case("who-and-when/" + system, t))
            orders[t.trace_id] = [blamed if system == good else int(g.integers(len(agents)))]
    res = agr.agent_loso(cases, orders)
    assert sorted(res["systems"]) == sorted({c.system for c in cases})
    for held, ar in res["picked"].items():
        others = [s for s in res["systems"] if s != held]
        # the pick's worst lower bound on the others is the best of all rules
        best = max(min(res["lb"][a][s] for s in others) for a in res["acc"])
        assert min(res["lb"][ar][s] for s in others) == pytest.approx(best)
        assert res["chosen"][held] == pytest.approx(res["acc"][ar][held])
    worst = {ar: min(res["lb"][ar].values()) for ar in res["acc"]}
    assert worst[res["shipped"]] == pytest.approx(max(worst.values()))


def test_pick_ties_go_to_the_rule_leaning_least_on_the_step_verdict(np_rng):
    g = np_rng
    n = int(g.integers(5, 30))
    zeros = {"a": [0.0] * n, "b": [0.0] * n}
    margins = {ar: dict(zeros) for ar in ("author", "mix:0.5", "active", "mix:0.25")}
    assert agr.pick(margins, ["a", "b"]) == "active"
    margins["mix:0.5"] = {"a": [1.0] * n, "b": [0.0] * n}  # surely better on a, never worse on b
    assert agr.pick(margins, ["a", "b"]) == "mix:0.5"
    margins["author"] = {"a": [1.0] * n, "b": [0.0] * n}  # as good: the one leaning less on the step verdict
    assert agr.pick(margins, ["a", "b"]) == "mix:0.5"
    margins["mix:0.5"]["b"] = [-1.0] + [0.0] * (n - 1)  # one loss on b: its lower bound there drops below 0
    assert agr.pick(margins, ["a", "b"]) == "author"
    assert agr.lower_bound([0.0] * n) == 0.0 and agr.lower_bound([]) == -1.0
