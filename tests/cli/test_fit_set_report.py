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
    entry["stepset"]["tail"] = "learned"
    assert "in the order of a small model of the step rows fitted on these labels" in stepset_words(entry)


def test_a_system_left_out_of_the_file_is_not_said_to_calibrate_a_run(synth):
    """Under fit.MIN_K labels the system is left out of the ranker file: its report must not say a run now
    calibrates its sets on these labels."""
    entry = fs.fit_system(synth(30, seed=4), "team/agents").entry
    assert "A run now calibrates" in stepset_words(entry, kept=True)
    left = stepset_words(entry, kept=False)
    assert "A run now calibrates" not in left and "keeps stating the dev systems' estimate" in left


def test_fit_on_one_labelled_log_warns_nothing(synth):
    """A system with one labelled log (the demo's Hand-Crafted trace): its confidence folds have no training log;
    numpy's "Degrees of freedom <= 0" warnings reached the user's terminal."""
    import warnings

    cases = synth(3, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for k in (1, 2, 3):
            fs.fit_system(cases[:k], "team/agents")
