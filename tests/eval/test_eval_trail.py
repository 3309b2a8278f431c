"""TRAIL scoring: hand-checked location accuracy / precision, random baseline against exact enumeration."""

from __future__ import annotations

from itertools import combinations

import pytest

from masprism_batch.eval import evaluate, format_tables, score_trail
from masprism_batch.trace import Labels, Step, Trace

GAIA = "trail/GAIA"


def tr(tid, spans, gold, source=GAIA):
    steps = [Step(i, "agent", f"c{i}", kind=kind, span_id=sid) for i, (kind, sid) in enumerate(spans)]
    return Trace(tid, source, steps, labels=None if gold is None else Labels(error_locations=gold))


def row(tid, steps):
    return {"trace_id": tid, "pred_step": steps[0] if steps else None, "pred_agent": "agent",
            "candidates": [{"step": s, "agent": "agent", "span_id": None, "score": 1.0, "symptoms": []} for s in steps]}


def hand_cases():
    t1 = tr("T1", [("llm", "a"), ("tool", "b"), ("llm", "c"), ("llm", "d"), ("llm", "e")], ["c", "b", "c"])
    t2 = tr("T2", [("llm", "x"), ("llm", "y")], ["x"])  # no row: a miss
    t4 = tr("T4", [("llm", "x")], [])
    t5 = tr("T5", [("llm", "x")], None)
    return [t1, t2, t4, t5], [row("T1", [2, 1, 4])]


def test_hand_checked_trail():
    traces, rows = hand_cases()
    res = score_trail(rows, traces)
    m, b = res["subsets"][GAIA], res["baselines"][GAIA]["random"]
    assert res["excluded"] == {"no_error_locations": 1, "unlabelled": 1}
    assert m["n"] == 2 and m["n_missing"] == 1
    # T1: gold {c, b}; @1 pred {c}: loc 1/2, prec 1 ; @5 pred {c, b, e}: loc 1, prec 2/3 ; T2: all 0
    expect = {"location_acc@1": 0.25, "precision@1": 0.5, "n_pred@1": 0.5,
              "location_acc@5": 0.5, "precision@5": 1 / 3, "n_pred@5": 1.5}
    for k, v in expect.items():
        assert m[k] == pytest.approx(v), k
    # random: T1 L=4 LLM spans, G=1 (b is a tool span), |gold|=2 ; T2 L=2, G=1, |gold|=1
    expect_b = {"location_acc@1": (1 / 8 + 1 / 2) / 2, "precision@1": (1 / 4 + 1 / 2) / 2, "n_pred@1": 1.0,
                "location_acc@5": (4 / 8 + 2 / 2) / 2, "precision@5": (1 / 4 + 1 / 2) / 2, "n_pred@5": 3.0}
    for k, v in expect_b.items():
        assert b[k] == pytest.approx(v), k


def test_step_without_span_predicts_nothing():
    t = tr("T", [("llm", None), ("llm", "g")], ["g"])
    res = score_trail([row("T", [0])], [t], ks=(1,))
    assert res["subsets"][GAIA]["precision@1"] == 0.0 and res["subsets"][GAIA]["n_pred@1"] == 0.0


def test_random_baseline_is_exact_expectation(rng):
    traces = []
    for n in range(rng.randint(4, 10)):
        spans = [(rng.choice(["llm", "llm", "tool", "agent"]), f"s{j}") for j in range(rng.randint(1, 9))]
        pool = [s for _, s in spans] + ["elsewhere"]
        gold = rng.sample(pool, rng.randint(1, min(3, len(pool))))
        traces.append(tr(f"t{n}", spans, gold))
    ks = (1, 2, 5)
    b = score_trail([], traces, ks=ks)["baselines"][GAIA]["random"]
    for k in ks:
        loc, prec, npred = [], [], []
        for t in traces:
            llm = sorted({s.span_id for s in t.steps if s.kind == "llm"})
            gold = set(t.labels.error_locations)
            draws = list(combinations(llm, min(k, len(llm)))) if llm else []
            if not draws:
                loc.append(0.0), prec.append(0.0), npred.append(0.0)
                continue
            loc.append(sum(len(gold & set(d)) / len(gold) for d in draws) / len(draws))
            prec.append(sum(len(gold & set(d)) / len(d) for d in draws) / len(draws))
            npred.append(float(len(draws[0])))
        assert b[f"location_acc@{k}"] == pytest.approx(sum(loc) / len(loc))
        assert b[f"precision@{k}"] == pytest.approx(sum(prec) / len(prec))
        assert b[f"n_pred@{k}"] == pytest.approx(sum(npred) / len(npred))


def test_evaluate_and_table_show_method_and_baselines():
    traces, rows = hand_cases()
    wnw = Trace("W", "who-and-when/Hand-Crafted", [Step(0, "human", "q"), Step(1, "WebSurfer", "x")],
                labels=Labels(mistake_step=1, mistake_agent="WebSurfer"))
    res = evaluate(rows + [row("W", [1])], traces + [wnw])
    assert [d["dataset"] for d in res["datasets"]] == ["who-and-when", "trail"]
    text = format_tables(res, width=160)
    for needle in ("trail/GAIA", "who-and-when/Hand-Crafted", "random", "first_step", "0.250", "0.312",
                   "100.0%", "1 missing", "1 no_error_locations", "loc@5", "prec@1"):
        assert needle in text, needle


def test_bad_ks():
    with pytest.raises(ValueError):
        score_trail([], [], ks=(0,))


def test_names_from_the_logs_reach_the_table_escaped():
    # a subset named by a log's source: rich markup stays text and an escape sequence cannot act on the terminal
    src = "trail/[bold]GAIA\x1b[2J"
    traces = [tr("A", [("llm", "s0"), ("tool", "s1")], ["s1"], source=src)]
    text = format_tables(evaluate([row("A", [1])], traces), width=200)
    assert "[bold]GAIA" in text and "\x1b" not in text
