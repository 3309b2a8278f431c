"""analytics/pick.py: the selection `pick` and its benchmark share (uncertain first, diverse, no near-duplicates,
nothing labelled twice)."""

from __future__ import annotations

from masprism_batch.analytics.pick import Candidate, labelled_ids, pick


def _c(tid, conf, share=None, agent="A", step=0, n=10, system="S", dup=None):
    return Candidate(tid, system, n, step, agent, conf, share, dup)


def test_uncertain_verdicts_first_and_the_labelled_left_out():
    cands = [_c("sure", 0.9, 0.1, "A", 0), _c("unsure", 0.1, 0.9, "B", 5), _c("mid", 0.5, 0.5, "C", 9)]
    assert [c.trace_id for c in pick(cands, 3)] == ["unsure", "mid", "sure"]
    assert [c.trace_id for c in pick(cands, 2, exclude={"unsure"})] == ["mid", "sure"]
    assert pick(cands, 0) == [] and len(pick(cands, 10)) == 3


def test_diverse_agents_positions_and_systems():
    # four equally uncertain verdicts of agent A at the start, one a little surer of agent B at the end: B's comes
    # second, before a third log of the same agent and position
    cands = [_c(f"a{i}", 0.2, 0.5, "A", 0) for i in range(4)] + [_c("b", 0.3, 0.5, "B", 9)]
    assert [c.trace_id for c in pick(cands, 2)] == ["a0", "b"]
    two = [_c(f"s{i}", 0.1, 0.9, system="S1") for i in range(3)] + [_c("t0", 0.9, 0.1, system="S2")]
    assert {c.system for c in pick(two, 2)} == {"S1", "S2"}  # systems in turn


def test_near_duplicates_are_picked_once():
    cands = [_c("d1", 0.1, 0.9, dup="q"), _c("d2", 0.1, 0.9, "B", 5, dup="q"), _c("other", 0.8, 0.2, "C", 9)]
    assert [c.trace_id for c in pick(cands, 3)] == ["d1", "other"]


def test_deterministic_whatever_the_input_order():
    cands = [_c(f"t{i}", 0.5, 0.5, agent=f"A{i % 3}", step=i % 10) for i in range(30)]
    assert [c.trace_id for c in pick(cands, 7)] == [c.trace_id for c in pick(list(reversed(cands)), 7)]


def test_labelled_ids_reads_filled_rows_only(tmp_path):
    f = tmp_path / "l.csv"
    f.write_text("trace_id,step,agent,verdict_step\nt1,3,Coder,2\nt2,,,4\nt3,,Coder,1\n")
    assert labelled_ids(f) == {"t1"}
    j = tmp_path / "l.jsonl"
    j.write_text('{"trace_id": "a", "span_id": "s"}\n{"trace_id": "b", "step": null}\nnot json\n')
    assert labelled_ids(j) == {"a"}
