"""A category for every verdict, end to end with the tiny random model: the attributions row and the step_scores
row of pred_step name the same kind; a team's taxonomy (--taxonomy) is used; a bad one is refused before OUT."""

import json

import pyarrow.dataset as ds
from typer.testing import CliRunner

from masprism_batch.category.taxonomy import TRAIL
from masprism_batch.cli import EXIT_OK, app
from masprism_batch.trace import Step, Trace

TEXT = ["Plan: search the file and sum the values.", "Tool: python\nInput: total(xs)",
        "Traceback: NameError: name 'xs' is not defined", "Tool: python\nInput: total(xs)",
        "Error: HTTP 429 too many requests", "The answer is 41.", "Error: the expected answer was 42."]
OURS = ('name = "ours"\n[[kind]]\nname = "Bad plan"\nfamily = "planning"\ndescription = "the plan is wrong"\n'
        '[[kind]]\nname = "Crash"\nfamily = "runtime"\ndescription = "the code crashed"\n')


def _run(tmp_path, *extra):
    traces = [Trace(trace_id=f"t{j}", source="jsonl", system="toy",
                    steps=[Step(index=i, agent="AB"[i % 2], role="assistant", content=c)
                           for i, c in enumerate(TEXT[j:] + TEXT[:j])]) for j in range(3)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(t.to_row(), default=str) + "\n" for t in traces), encoding="utf-8")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["attribute", str(src), "-o", str(out), "--model", "tiny-random",
                                   "--progress-interval", "0", *extra])
    return res, out


def _check(out, names, families):
    atts = ds.dataset(str(out / "attributions")).to_table().to_pylist()
    scores = ds.dataset(str(out / "step_scores")).to_table().to_pylist()
    assert len(atts) == 3
    for a in atts:
        assert a["category"] in names and families[names.index(a["category"])] == a["category_family"]
        assert 0 < a["category_confidence"] <= 1 and a["category_by"].startswith("model+log:")
        assert a["blamed_vector"] is not None and len(a["blamed_vector"]) > 0
        (top,) = [r for r in scores if r["trace_id"] == a["trace_id"] and r["final_rank"] == 1]
        assert top["step"] == a["pred_step"] and top["category"] == a["category"]
        assert top["category_family"] == a["category_family"]
        ranked = [r for r in scores if r["trace_id"] == a["trace_id"] and r["category"] is not None]
        assert {r["final_rank"] for r in ranked} == set(range(1, len(ranked) + 1))  # the top-k, no gap


def test_trail_categories(tmp_path):
    res, out = _run(tmp_path, "--taxonomy", "trail")
    assert res.exit_code == EXIT_OK, res.output
    _check(out, TRAIL.names, [k.family for k in TRAIL.kinds])


def test_categories_are_opt_in(tmp_path):
    """Without --taxonomy no kind is named (held-out family accuracy is at chance so far: docs/results.md) and
    no suffix is read; the verdicts are the ones the opt-in run names."""
    res, out = _run(tmp_path)
    assert res.exit_code == EXIT_OK, res.output
    atts = ds.dataset(str(out / "attributions")).to_table().to_pylist()
    assert len(atts) == 3 and all(a["category"] is None and a["category_confidence"] is None for a in atts)
    (tmp_path / "on").mkdir()
    res2, out2 = _run(tmp_path / "on", "--taxonomy", "trail")
    assert res2.exit_code == EXIT_OK, res2.output
    on = {a["trace_id"]: (a["pred_step"], a["pred_agent"])
          for a in ds.dataset(str(out2 / "attributions")).to_table().to_pylist()}
    assert {a["trace_id"]: (a["pred_step"], a["pred_agent"]) for a in atts} == on


def test_team_taxonomy(tmp_path):
    (tmp_path / "ours.toml").write_text(OURS)
    res, out = _run(tmp_path, "--taxonomy", str(tmp_path / "ours.toml"))
    assert res.exit_code == EXIT_OK, res.output
    _check(out, ["Bad plan", "Crash"], ["planning", "runtime"])
    assert all(a["category_by"].endswith(":ours:zero-training")
               for a in ds.dataset(str(out / "attributions")).to_table().to_pylist())


def test_bad_taxonomy_refused_before_out(tmp_path):
    (tmp_path / "bad.toml").write_text("[[kind]]\nname = 'a'\n")
    res, out = _run(tmp_path, "--taxonomy", str(tmp_path / "bad.toml"))
    assert res.exit_code != EXIT_OK and "lacks family, description" in res.output
    assert not out.exists()
