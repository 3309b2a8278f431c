"""analytics/pick.py: the selection `pick` and its benchmark share (a sample spanning each system's verdicts from
surest to least sure, systems in turn, no near-duplicates, nothing labelled twice), and the first design kept for
the benchmark's comparison."""

from __future__ import annotations

from masprism_batch.analytics.pick import Candidate, labelled_ids, pick, pick_uncertain_first


def _c(tid, conf, share=None, agent="A", step=0, n=10, system="S", dup=None):
    return Candidate(tid, system, n, step, agent, conf, share, dup)


def test_picks_span_the_verdicts_from_surest_to_least_sure():
    cands = [_c(f"t{i:02d}", i / 20, 0.5) for i in range(21)]  # t20 the surest, t00 the least sure
    got = [c.trace_id for c in pick(cands, 3)]
    assert got == ["t20", "t10", "t00"]  # both ends and the middle, not the three least sure
    assert [c.trace_id for c in pick(cands, 1)] == ["t10"]
    assert pick(cands, 0) == [] and len(pick(cands, 50)) == 21
    assert "t10" not in {c.trace_id for c in pick(cands, 3, exclude={"t10"})}


def test_systems_in_turn_and_near_duplicates_once():
    two = [_c(f"s{i}", 0.1 * i, system="S1") for i in range(6)] + [_c("t0", 0.9, system="S2")]
    assert sorted(c.system for c in pick(two, 3)) == ["S1", "S1", "S2"]
    dups = [_c("d1", 0.1, dup="q"), _c("d2", 0.2, dup="q"), _c("other", 0.8)]
    assert sorted(c.trace_id for c in pick(dups, 3)) == ["d2", "other"]


def test_deterministic_whatever_the_input_order():
    cands = [_c(f"t{i}", (i * 7 % 10) / 10, agent=f"A{i % 3}", step=i % 10) for i in range(30)]
    assert [c.trace_id for c in pick(cands, 7)] == [c.trace_id for c in pick(list(reversed(cands)), 7)]


def test_the_first_design_takes_the_least_sure_first_with_agents_and_positions_spread():
    cands = [_c("sure", 0.9, 0.1, "A", 0), _c("unsure", 0.1, 0.9, "B", 5), _c("mid", 0.5, 0.5, "C", 9)]
    assert [c.trace_id for c in pick_uncertain_first(cands, 3)] == ["unsure", "mid", "sure"]
    spread = [_c(f"a{i}", 0.2, 0.5, "A", 0) for i in range(4)] + [_c("b", 0.3, 0.5, "B", 9)]
    assert [c.trace_id for c in pick_uncertain_first(spread, 2)] == ["a0", "b"]


def test_labelled_ids_reads_filled_rows_only(tmp_path):
    f = tmp_path / "l.csv"
    f.write_text("trace_id,step,agent,verdict_step\nt1,3,Coder,2\nt2,,,4\nt3,,Coder,1\n")
    assert labelled_ids(f) == {"t1"}
    j = tmp_path / "l.jsonl"
    j.write_text('{"trace_id": "a", "span_id": "s"}\n{"trace_id": "b", "step": null}\nnot json\n')
    assert labelled_ids(j) == {"a"}
