"""`fit` learns a system's failure kinds from its labels' categories (issue 49, item 2), end to end with the tiny
random model: a run with a team's taxonomy, a labels file with a category column (one category naming no kind),
the held-out estimates printed and kept in the ranker file, and a run with that ranker file naming kinds with the
fitted weights (`category_by` says so)."""

from __future__ import annotations

import json
import random

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, app

runner = CliRunner()
OURS = ('name = "ours"\n[[kind]]\nname = "Bad plan"\nfamily = "planning"\ndescription = "the plan is wrong"\n'
        '[[kind]]\nname = "Crash"\nfamily = "runtime"\ndescription = "the code crashed"\n')
CALM = ["Plan: search the file and sum the values.", "The answer is 41.", "Let me check the totals again.",
        "I will read the table first."]
LOUD = ["Traceback: NameError: name 'xs' is not defined", "Error: HTTP 500 internal server error",
        "Exception: failed to open the file"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    (d / "ours.toml").write_text(OURS)
    rng = random.Random(int(tmp_path_factory.getbasetemp().stat().st_ino) % 1000)
    labels, logs = [], []
    for j in range(14):
        steps = [rng.choice(CALM) for _ in range(7)]
        loud = rng.sample(range(1, 7), 2)
        steps[loud[0]] = rng.choice(LOUD)  # one labelled step records a crash, one does not
        for k in loud:
            labels.append({"trace_id": f"kinds-bot-{j}", "step": k,
                           "category": "Crash" if steps[k] in LOUD else "bad PLAN"})  # spelled as a team might
        logs.append({"trace_id": f"kinds-bot-{j}", "source": "jsonl", "system": "kinds-bot",
                     "steps": [{"index": i, "agent": "AB"[i % 2], "role": "assistant", "content": c}
                               for i, c in enumerate(steps)]})
    labels.append({"trace_id": "kinds-bot-0", "step": 0, "category": "Vibes"})  # no kind of the taxonomy
    (d / "logs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in logs))
    (d / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))
    (d / "c.json").write_text(json.dumps({"model": {"name": "tiny-random"}, "render": {"max_context": 512},
                                          "method": {"counterfactual_k": 0}}))
    res = runner.invoke(app, ["attribute", str(d / "logs.jsonl"), "-o", str(d / "run"), "--config", str(d / "c.json"),
                              "--taxonomy", str(d / "ours.toml"), "--no-progress"])
    assert res.exit_code == EXIT_OK, res.output
    return d


def test_fit_learns_the_kinds_and_a_run_applies_them(made, tmp_path):
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["fit", str(made / "run"), "-o", str(out), "--labels", str(made / "labels.jsonl")])
    assert res.exit_code == EXIT_OK, res.output
    text = " ".join(res.output.split())
    # the summary of skipped label rows names it
    assert "1 category not a kind of the taxonomy; first: category 'Vibes' (-v lists each row)" in text
    cat = json.loads(out.read_text())["systems"]["kinds-bot"]["category"]
    assert cat["taxonomy"] == "ours" and cat["errors"] == 28 and cat["logs"] == 14
    assert f"kinds (ours): 28 labelled errors in 14 logs, {cat['model_read']} read by the model" in text
    # the log says where a step crashed: the fitted kinds learn it and beat zero-training held out
    assert cat["kept"] == "fitted" and cat["fitted"] > cat["zero_training"] and cat["fitted"] >= 0.9
    assert f"held out: fitted {100 * cat['fitted']:.1f}%" in text and "kept: the fitted kinds" in text
    run2 = tmp_path / "run2"
    res = runner.invoke(app, ["attribute", str(made / "logs.jsonl"), "-o", str(run2), "--config", str(made / "c.json"),
                              "--taxonomy", str(made / "ours.toml"), "--ranker", str(out), "--no-progress"])
    assert res.exit_code == EXIT_OK, res.output
    atts = ds.dataset(str(run2 / "attributions")).to_table().to_pylist()
    assert len(atts) == 14 and all(a["category_by"].endswith(":ours:fit:kinds-bot") for a in atts)
    scores = ds.dataset(str(run2 / "step_scores")).to_table().to_pylist()
    for a in atts:  # the fitted layer reads the log: a blamed step that crashed is a Crash
        (top,) = [r for r in scores if r["trace_id"] == a["trace_id"] and r["final_rank"] == 1]
        assert len(top["category_pmi"]) == 2 and top["category"] == a["category"]


def test_category_labels_need_a_taxonomy(made, tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "run.json").write_text(json.dumps({"config": {"method": {"categories": False}}}))
    from masprism_batch.cli.fit import _taxonomy

    # runs without kinds (TRAIL's annotations carry categories all the same): the steps are fitted, no kinds, said
    assert _taxonomy(None, [plain], labelled=True) is None
    said = capsys.readouterr()
    assert "no failure kinds are fitted" in " ".join((said.out + said.err).split())
    assert _taxonomy(None, [plain], labelled=False) is None
    assert _taxonomy("trail", [plain], labelled=True).name == "trail"
    assert _taxonomy(None, [made / "run"], labelled=True).name == "ours"  # the run's own
    res = runner.invoke(app, ["fit", str(made / "run"), "-o", str(tmp_path / "r.json"), "--labels",
                              str(made / "labels.jsonl"), "--taxonomy", str(tmp_path / "absent.toml")])
    assert res.exit_code == EXIT_FATAL and "--taxonomy" in res.output
