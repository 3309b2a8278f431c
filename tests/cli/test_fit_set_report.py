"""Issue 59: `fit`'s report says how often the system's step sets held the labelled step on its own held-out logs,
their share of a log beside reading from step 0, and that before a fit the coverage was the dev systems' estimate."""

from masprism_batch.cli.fit_messages import stepset_words
from masprism_batch.fit import system as fs


def test_fit_report_names_the_held_out_coverage_share_and_the_dev_estimate(synth):
    entry = fs.fit_system(synth(30, seed=4), "team/agents").entry
    words = stepset_words(entry)
    h = entry["stepset"]["heldout"]
    assert f"held out on {h['n']} labelled logs" in words
    assert f"at 80% coverage the set held the labelled step in {h['coverage_0.8']:.0%} of them" in words
    assert f"{h['share_0.8']:.0%} of a log on average (reading from step 0: {h['step0_share_0.8']:.0%})" in words
    assert "dev systems' estimate" in words
    assert stepset_words({"system": "x"}) is None  # a file written before issue 59: nothing to say


def test_fit_report_says_when_the_sets_read_the_labels_blamed_agents_first(synth):
    entry = fs.fit_system(synth(30, seed=4), "team/agents").entry
    entry["stepset"] = {**entry["stepset"], "tail": "prior", "lead": "top", "agents": {"coder": 3.0}}
    assert "(after the blamed step, the steps of the agents these labels blame most)" in stepset_words(entry)
    entry["stepset"]["tail"] = "index"
    assert "blame most" not in stepset_words(entry)
