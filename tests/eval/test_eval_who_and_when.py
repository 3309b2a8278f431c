"""Who&When scoring: hand-checked numbers on tiny cases, baselines against brute-force enumeration."""

from __future__ import annotations

from itertools import combinations

import pytest

from masprism_batch.eval import evaluate, score_who_and_when
from masprism_batch.trace import Labels, Step, Trace, norm_agent

AG, HC = "who-and-when/Algorithm-Generated", "who-and-when/Hand-Crafted"


def tr(tid, agents, step=None, agent=None, source=AG, labels=True):
    steps = [Step(i, a, f"content {i}") for i, a in enumerate(agents)]
    return Trace(tid, source, steps, labels=Labels(mistake_step=step, mistake_agent=agent) if labels else None)


def row(tid, pred, cands=()):
    return {"trace_id": tid, "pred_step": pred, "pred_agent": None,
            "candidates": [{"step": s, "agent": None, "span_id": None, "score": 1.0, "symptoms": []} for s in cands]}


def hand_cases():
    traces = [
        tr("A", ["u", "X", "Y", "X", "Z (thought)"], 3, "x"),
        tr("C", ["Expert_A"] * 13, 12, "expert_A"),
        tr("C2", ["Expert_A", "Expert_B"] + ["Expert_A"] * 11, 12, "Expert_A"),  # "1" in "12" must not count
        tr("D", ["P", "Q"], 1, "Q"),  # no attribution row: a miss
        tr("B", ["human", "Orchestrator (thought)", "WebSurfer", "Orchestrator (-> WebSurfer)"], 1,
           "Orchestrator", source=HC),
        tr("E", ["a", "b"], labels=False),
        tr("F", ["a", "b"], 99, "a"),
    ]
    rows = [row("A", 2, [2, 3, 0]), row("C", 12, [12]), row("C2", 1), row("B", 3, [3, 1])]
    return traces, rows


def test_hand_checked_method_scores():
    traces, rows = hand_cases()
    res = score_who_and_when(rows, traces)
    ag, hc = res["subsets"][AG], res["subsets"][HC]
    assert res["excluded"] == {"unlabelled": 1, "label_out_of_range": 1}
    assert ag["n"] == 4 and ag["n_missing"] == 1
    assert ag["step_top1"] == pytest.approx(1 / 4)  # only C
    assert ag["step_top3"] == pytest.approx(2 / 4)  # A (3 in [2,3,0]) and C
    assert ag["step_within1"] == pytest.approx(2 / 4)  # A (|2-3|=1) and C
    assert ag["agent"] == pytest.approx(1 / 4)  # C: Expert_A == expert_A case-insensitively
    assert hc == {"n": 1, "n_missing": 0, "step_top1": 0.0, "step_top3": 1.0, "step_within1": 0.0, "agent": 1.0,
                  "n_agent": 1}  # agent of step 3 is "Orchestrator (-> WebSurfer)" -> orchestrator


def test_hand_checked_baselines():
    traces, rows = hand_cases()
    b = score_who_and_when(rows, traces)["baselines"][AG]
    # N = 5, 13, 13, 2 ; gold = 3, 12, 12, 1
    assert b["random"]["step_top1"] == pytest.approx((1 / 5 + 1 / 13 + 1 / 13 + 1 / 2) / 4)
    assert b["random"]["step_top3"] == pytest.approx((3 / 5 + 3 / 13 + 3 / 13 + 2 / 2) / 4)
    assert b["random"]["step_within1"] == pytest.approx((3 / 5 + 2 / 13 + 2 / 13 + 2 / 2) / 4)
    assert b["random"]["agent"] == pytest.approx((2 / 5 + 13 / 13 + 12 / 13 + 1 / 2) / 4)
    assert b["first_step"]["step_top1"] == 0.0
    assert b["first_step"]["step_within1"] == pytest.approx(1 / 4)  # D: gold 1
    assert b["first_step"]["step_top3"] == pytest.approx(1 / 4)
    assert b["first_step"]["agent"] == pytest.approx(2 / 4)  # C, C2 (Expert_A first)
    assert b["step_1"]["step_top1"] == pytest.approx(1 / 4)  # D
    assert b["step_1"]["step_top3"] == pytest.approx(2 / 4)  # A {1,2,3}, D {1}
    assert b["step_1"]["agent"] == pytest.approx(3 / 4)  # A: X, C: Expert_A, D: Q
    # majority in trace: A -> x (2 of 5), C -> expert_a, C2 -> expert_a, D -> tie P/Q -> P (acts first)
    assert b["majority_agent"]["agent"] == pytest.approx(3 / 4)
    assert b["majority_agent"]["step_top1"] is None
    # gold agents: x, expert_a, expert_a, q -> expert_a
    assert b["label_majority_agent"]["agent"] == pytest.approx(2 / 4)


def test_norm_agent():
    assert norm_agent("Orchestrator (-> WebSurfer)") == "orchestrator"
    assert norm_agent(" Websurfer ") == norm_agent("WebSurfer") == "websurfer"
    assert norm_agent("A (x) (y)") == "a"
    assert norm_agent("Expert (") == "expert ("
    assert norm_agent(None) is None and norm_agent("  ") is None


def test_random_and_fixed_baselines_match_enumeration(rng):
    names = ["A", "B", "C (thought)", "c", None]
    traces = []
    for k in range(rng.randint(5, 12)):
        n = rng.randint(1, 9)
        traces.append(tr(f"t{k}", [rng.choice(names) for _ in range(n)], rng.randrange(n), rng.choice(["a", "C"])))
    res = score_who_and_when([], traces)
    base = res["baselines"][AG]
    exp = {"step_top1": [], "step_top3": [], "step_within1": [], "agent": []}
    for t in traces:
        n, g, a = len(t.steps), t.labels.mistake_step, norm_agent(t.labels.mistake_agent)
        picks = list(combinations(range(n), min(3, n)))
        exp["step_top3"].append(sum(g in p for p in picks) / len(picks))
        exp["step_top1"].append(sum(j == g for j in range(n)) / n)
        exp["step_within1"].append(sum(abs(j - g) <= 1 for j in range(n)) / n)
        exp["agent"].append(sum(norm_agent(s.agent) == a for s in t.steps) / n)
    for key, vals in exp.items():
        assert base["random"][key] == pytest.approx(sum(vals) / len(vals)), key
    # a method that always answers step 0 (then 1, 2) scores exactly the first_step baseline
    rows = [row(t.trace_id, 0, [0, 1, 2]) for t in traces]
    m = score_who_and_when(rows, traces)["subsets"][AG]
    for key in exp:
        assert m[key] == pytest.approx(base["first_step"][key]), key
    assert res["subsets"][AG]["n_missing"] == len(traces) and res["subsets"][AG]["step_top1"] == 0.0


def test_skip_missing_duplicates_and_routing():
    traces, rows = hand_cases()
    res = score_who_and_when(rows, traces, on_missing="skip")
    assert res["subsets"][AG]["n"] == 3 and res["excluded"]["no_attribution"] == 1
    with pytest.raises(ValueError):
        score_who_and_when(rows + rows[:1], traces)
    with pytest.raises(ValueError):
        score_who_and_when(rows, traces, on_missing="zero")
    other = Trace("O", "jsonl", [Step(0, "a", "x")], labels=None)
    out = evaluate(rows + [row("ghost", 0)], traces + [other])
    assert [d["dataset"] for d in out["datasets"]] == ["who-and-when"]
    assert out["unscored"] == {"sources_without_scoring": {"jsonl": 1}, "rows_without_trace": 1}
    with pytest.raises(ValueError):
        evaluate(rows, traces + traces[:1])
