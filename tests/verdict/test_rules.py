"""Zero-training orderings (verdict/rules.py): each reorders only the faithful candidates, by its own signal."""

import json
import math

import pytest

from masprism_batch.verdict import rules


def _rows(n, rng, cf_at=(), learned=True):
    rows = []
    for i in range(n):
        rows.append({"step": i,
                     "cf_effect": float(rng.normal()) if i in cf_at else None,
                     "attn_in_learned": float(rng.random()) if learned else None})
    return rows


@pytest.mark.parametrize("n", [7, 47])
def test_every_rule_is_a_permutation_of_the_candidates(n, np_rng):
    rng = np_rng
    ranked = [int(x) for x in rng.permutation(n)[: max(2, n // 3)]]
    rows = _rows(n, rng, cf_at=ranked[:2])
    for rule in rules.RULES:
        got = rules.order(rule, rows, ranked)
        assert sorted(got) == sorted(ranked), rule


def test_each_rule_orders_by_its_signal(np_rng):
    rng = np_rng
    n = 23
    ranked = [int(x) for x in rng.permutation(n)[:6]]
    rows = _rows(n, rng, cf_at=ranked[1:3])
    assert rules.order("faithful", rows, ranked) == ranked
    assert rules.order("earliest", rows, ranked) == sorted(ranked)
    cf = rules.order("counterfactual", rows, ranked)
    measured = sorted(ranked[1:3], key=lambda k: -rows[k]["cf_effect"])
    # measured candidates first by effect, the unmeasured keep the faithful order behind them
    assert cf == measured + [k for k in ranked if k not in measured]
    lh = rules.order("learned_heads", rows, ranked)
    assert [rows[k]["attn_in_learned"] for k in lh] == sorted((rows[k]["attn_in_learned"] for k in ranked), reverse=True)


def test_missing_or_nan_signal_keeps_faithful_order(np_rng):
    rng = np_rng
    ranked = [5, 2, 9]
    rows = _rows(11, rng, learned=False)
    rows[2]["cf_effect"] = math.nan
    assert rules.order("counterfactual", rows, ranked) == ranked
    assert rules.order("learned_heads", rows, ranked) == ranked
    assert rules.order("earliest", rows, []) == []


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown zero-training rule"):
        rules.order("oracle", [], [1])


def test_fallback_rule_from_weights_folder(tmp_path, caplog):
    assert rules.read_fallback(str(tmp_path)) == rules.Fallback()  # nothing chosen: the paper method, uncalibrated
    (tmp_path / "fallback.json").write_text(json.dumps({"rule": "earliest"}))
    assert rules.read_fallback(str(tmp_path)).rule == "earliest"
    (tmp_path / "fallback.json").write_text(json.dumps({"rule": "oracle"}))
    assert rules.read_fallback(str(tmp_path)).rule == "faithful"
    assert "unknown rule" in caplog.text
    assert rules.read_fallback(None).rule in rules.RULES  # the packaged choice, whatever the benchmark shipped


def test_stage_applies_the_fallback_rule_to_a_system_without_ranker(tmp_path, rng):
    """A log of a system no ranker was fitted on gets the rule of `fallback.json`: with "earliest" the verdict is
    the earliest of the faithful candidates (tiny random model, so the faithful order is arbitrary)."""

    from masprism_batch.config import load_config
    from masprism_batch.model import load_model
    from masprism_batch.stage.attribute import attribute_traces
    from masprism_batch.trace import Step, Trace

    # failure words only in the last step: it is a symptom, so every earlier step may be a candidate (with them
    # anywhere, an early lone symptom left a single candidate and nothing to reorder: a flaky draw)
    words = "plan search the file retry tool answer check result".split()

    def content(i: int, n: int) -> str:
        text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 40)))
        return text + " error: failed, timeout" if i == n - 1 else text

    traces = []
    for j in range(3):
        n = rng.randint(9, 16)
        traces.append(Trace(trace_id=f"t{j}", source="a-system-in-none-of-the-data", question="q",
                            steps=[Step(index=i, agent=rng.choice(["A", "B", "C"]), content=content(i, n))
                                   for i in range(n)]))
    outs = {}
    for rule in ("faithful", "earliest"):
        folder = tmp_path / rule
        folder.mkdir()
        (folder / "fallback.json").write_text(json.dumps({"rule": rule, "agent_rule": "author"}))
        cfg = load_config(None, model__name="tiny-random", method__name="ranked", method__ranker=str(folder))
        model = load_model(cfg.model, cfg.signals)
        outs[rule] = attribute_traces(traces, model, cfg)
    for a, b in zip(outs["faithful"].attributions, outs["earliest"].attributions, strict=True):
        cands = [c["step"] for c in a["candidates"]]
        assert len(cands) > 1 and sorted(c["step"] for c in b["candidates"]) == sorted(cands)  # same candidates, reordered
        assert b["pred_step"] == min(cands)
        assert a["pred_step"] == cands[0]
        steps = next(t for t in traces if t.trace_id == b["trace_id"]).steps
        assert b["pred_agent"] == steps[b["pred_step"]].agent  # author of the blamed step
    rows = [r for r in outs["earliest"].step_scores if r["final_rank"] == 1]
    assert {(r["trace_id"], r["step"]) for r in rows} == {(a["trace_id"], a["pred_step"]) for a in outs["earliest"].attributions}


def test_zero_training_agent_rules():
    """author: the blamed step's author; active: most acting steps (tool outputs and the person's turns do not
    count, an agent speaking with role "user" does); mix:b moves the blame toward the candidates' authors as b grows."""
    from masprism_batch.trace import Step, Trace
    from masprism_batch.verdict import rules as zr

    steps = [Step(0, "user", "task", role="user"), Step(1, "Planner", "plan", role="assistant"),
             Step(2, "terminal", "out", role="tool"), Step(3, "terminal", "out", role="tool"),
             Step(4, "terminal", "out", role="tool", kind="tool"), Step(5, "Planner", "again", role="assistant"),
             Step(6, "Coder", "code", role="assistant")]
    t = Trace("t", "s", steps)
    order = [6, 1, 5]
    assert zr.agent_verdict("author", t, [], order) == "Coder"
    assert zr.agent_verdict("active", t, [], order) == "Planner"  # 2 acting steps; the terminal's 3 do not count
    assert zr.agent_verdict("mix:0.25", t, [], order) == "Planner"
    assert zr.agent_verdict("mix:0.75", t, [], [6]) == "Coder"
    assert zr.agent_verdict("active", Trace("u", "s", steps[2:5]), [], [2]) == "terminal"  # nothing else acts
    # AG2 group chats log the other agents' messages with role "user" under their own names: those agents act
    ag2 = steps[:2] + [Step(i, "Verifier", "check", role="user") for i in (2, 3, 4)]
    assert zr.agent_verdict("active", Trace("a", "s", ag2), [], [1]) == "Verifier"
    assert zr.agent_verdict("active", Trace("h", "s", [Step(0, "human", "q", role="human")] * 3 + steps[1:2]),
                            [], [0]) == "Planner"  # the person's turns never make the person the most active
    with pytest.raises(ValueError):
        zr.agent_verdict("loudest", t, [], order)


@pytest.mark.parametrize("trial", range(5))
def test_active_ties_go_to_the_author_then_the_first_speaker(trial, np_rng):
    """Equally active agents: `active` blames the one that wrote the blamed step, else the one that spoke first;
    with any b the mix's scores are shares that sum to 1."""
    from masprism_batch.trace import Step, Trace
    from masprism_batch.verdict import rules as zr

    rng = np_rng
    names = [f"A{i}" for i in range(int(rng.integers(2, 6)))]
    k = int(rng.integers(1, 5))
    seq = [a for a in names for _ in range(k)]  # every agent acts k times: all tied
    rng.shuffle(seq)
    steps = [Step(i, a, "x", role="assistant") for i, a in enumerate(seq)]
    t = Trace("t", "s", steps)
    blamed = int(rng.integers(len(steps)))
    assert zr.agent_verdict("active", t, [], [blamed]) == seq[blamed]
    outsider = Trace("t", "s", steps + [Step(len(steps), "user", "q", role="user")])
    assert zr.agent_verdict("active", outsider, [], [len(steps)]) == seq[0]  # the author is not an acting agent
    order = [int(x) for x in rng.permutation(len(steps))[: int(rng.integers(1, len(steps) + 1))]]
    ranking = zr.agent_ranking(f"mix:{rng.random():.3f}", t, order)
    assert sum(v for _, v in ranking) == pytest.approx(1.0)
    assert [v for _, v in ranking] == sorted((v for _, v in ranking), reverse=True)


def test_fallback_agent_rule_defaults_to_the_floor(tmp_path, caplog):
    """Without an agent rule in fallback.json (or with an unknown one) the floor: the most active agent itself."""
    from masprism_batch.verdict import rules as zr

    assert zr.read_fallback(str(tmp_path)).agent_rule == zr.FLOOR == "most_active"  # no fallback.json there
    (tmp_path / "fallback.json").write_text(json.dumps({"rule": "faithful"}))
    assert zr.read_fallback(str(tmp_path)).agent_rule == zr.FLOOR
    (tmp_path / "fallback.json").write_text(json.dumps({"agent_rule": "loudest"}))
    assert zr.read_fallback(str(tmp_path)).agent_rule == zr.FLOOR
    assert "loudest" in caplog.text
    (tmp_path / "fallback.json").write_text(json.dumps({"agent_rule": "mix:0.5"}))
    assert zr.read_fallback(str(tmp_path)).agent_rule == "mix:0.5"


@pytest.mark.parametrize("trial", range(5))
def test_the_floor_is_the_most_active_baseline_and_the_guard_moves_only_on_concentrated_votes(trial, np_rng):
    """Issue 32: `most_active` blames exactly whom eval's "most active agent" baseline blames, whatever the step
    order; `guard:t` keeps it unless one other agent holds at least t of the top-5 candidates' votes."""
    from masprism_batch.eval.who_and_when_metrics import _majority
    from masprism_batch.trace import Step, Trace
    from masprism_batch.verdict import rules as zr

    rng = np_rng
    names = [f"Agent{i}" for i in range(int(rng.integers(2, 5)))] + ["user"]
    n = int(rng.integers(3, 30))
    steps = [Step(i, str(rng.choice(names)), "x", role=str(rng.choice(["assistant", "user", "tool"])))
             for i in range(n)]
    t = Trace("t", "s", steps)
    order = [int(x) for x in rng.permutation(n)[: int(rng.integers(1, 6))]]
    floor = zr.agent_verdict(zr.FLOOR, t, [], order)
    assert floor.casefold() == _majority(t)
    votes = zr._votes(steps, order)  # noqa: SLF001 - the guard's own evidence
    mover = max(votes, key=votes.get)
    tau = float(rng.uniform(0.3, 0.95))
    got = zr.agent_verdict(f"guard:{tau:.3f}", t, [], order)
    if votes[mover] >= round(tau, 3) and list(votes.values()).count(votes[mover]) == 1:
        assert got.casefold() == mover  # concentrated votes move the blame to their agent
    elif votes[mover] < round(tau, 3):
        assert got == floor  # otherwise the floor stands
    assert zr.agent_verdict("guard:1.0", t, [], order) in (floor, steps[order[0]].agent)
