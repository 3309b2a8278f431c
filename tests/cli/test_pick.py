"""Issue 59 item 3: `pick` writes the logs to label next as a file `fit --labels` reads as it is, blank rows
skipped and counted as not labelled yet."""

from __future__ import annotations

import csv
import random

from analytics_synth import random_specs, write_outdir
from typer.testing import CliRunner

from masprism_batch.cli import EXIT_FATAL, EXIT_OK, app

runner = CliRunner()


def _run(tmp_path, n=40):
    specs = random_specs(random.Random(7), n)
    for i, s in enumerate(specs):
        s["labels"] = None  # a team's logs: nothing labelled yet
        s["confidence"] = (i % 10) / 10
        s["question"] = f"task {i % 30}"  # ten pairs of near-duplicates (same task, maybe the same length)
    return write_outdir(tmp_path / "run", specs), specs


def test_pick_writes_a_labels_file_fit_reads(tmp_path):
    run, specs = _run(tmp_path)
    out = tmp_path / "to_label.csv"
    res = runner.invoke(app, ["pick", str(run), "-n", "12", "-o", str(out)])
    assert res.exit_code == EXIT_OK, res.output
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 12 and len({r["trace_id"] for r in rows}) == 12
    assert list(rows[0])[:3] == ["trace_id", "step", "agent"] and all(r["step"] == r["agent"] == "" for r in rows)
    by_id = {s["trace_id"]: s for s in specs}
    for r in rows:
        s = by_id[r["trace_id"]]
        assert int(r["verdict_step"]) == s["ranked"][0]
        assert r["show"].startswith("masprism-batch show ") and r["trace_id"] in r["show"]
    # the picks are no near-duplicates of each other
    assert len({(by_id[r["trace_id"]]["question"], len(by_id[r["trace_id"]]["steps"])) for r in rows}) == 12
    # a team fills in three rows; fit reads the file as it is: the rest are counted as not labelled yet
    lines = out.read_text().splitlines()
    for i in (1, 2, 3):
        cells = next(csv.reader([lines[i]]))
        cells[1], cells[2] = cells[3], cells[4]
        lines[i] = ",".join(f'"{c}"' if "," in c or " " in c else c for c in cells)
    out.write_text("\n".join(lines) + "\n")
    res = runner.invoke(app, ["fit", str(run), "--labels", str(out), "-o", str(tmp_path / "r.json"), "--allow-partial"])
    said = " ".join(res.output.split())
    assert "9 label row(s) skipped: 9 not labelled yet (step and agent blank)" in said, said
    # asked again with the filled file: the labelled logs are not picked again
    res = runner.invoke(app, ["pick", str(run), "-n", "40", "-o", str(tmp_path / "next.csv"), "--labels", str(out)])
    assert res.exit_code == EXIT_OK, res.output
    again = {r["trace_id"] for r in csv.DictReader((tmp_path / "next.csv").open())}
    assert not again & {next(csv.reader([lines[i]]))[0] for i in (1, 2, 3)}
    assert "3 already labelled" in " ".join(res.output.split())


def test_pick_refuses_an_existing_file_and_a_missing_labels_file(tmp_path):
    run, _ = _run(tmp_path, 5)
    out = tmp_path / "x.csv"
    out.write_text("keep")
    assert runner.invoke(app, ["pick", str(run), "-o", str(out)]).exit_code == EXIT_FATAL
    assert out.read_text() == "keep"
    res = runner.invoke(app, ["pick", str(run), "-o", str(tmp_path / "y.csv"), "--labels", str(tmp_path / "no.csv")])
    assert res.exit_code == EXIT_FATAL and "not found" in res.output


def test_pick_never_writes_a_spreadsheet_formula_and_fit_reads_its_guard_back(tmp_path):
    """A log's own trace id and agent name (`=HYPERLINK(...)`, `@SUM(...)`) are written with an apostrophe before
    them, so the CSV opened in a spreadsheet runs nothing (OWASP CSV injection); fit and pick --labels take it off."""
    specs = random_specs(random.Random(3), 6)
    evil = ['=HYPERLINK("http://x.invalid","y")', "+1+1", "-2+3", "@SUM(A1)", "\tTAB", "plain-id"]
    for i, s in enumerate(specs):
        s["labels"], s["trace_id"], s["question"], s["system"] = None, evil[i], f"task {i}", "=SYS()"
        if not s["ranked"]:  # every log blamed: each is a candidate
            s["ranked"], s["scores"] = [0], [1.0]
        for st in s["steps"]:
            st["agent"] = "=cmd|' /C calc'!A0"
    run = write_outdir(tmp_path / "run", specs)
    out = tmp_path / "to_label.csv"
    res = runner.invoke(app, ["pick", str(run), "-n", "6", "-o", str(out)])
    assert res.exit_code == EXIT_OK, res.output
    rows = list(csv.DictReader(out.open(newline="")))
    assert len(rows) == 6
    for r in rows:
        for col in ("trace_id", "verdict_agent", "system"):
            assert not r[col].startswith(("=", "+", "-", "@", "\t", "\r")), (col, r[col])
    assert {r["trace_id"] for r in rows} == {"'" + e for e in evil[:5]} | {"plain-id"}
    # the team fills two rows in, copying the guarded agent; fit finds the traces and the agent under the guard
    filled = [dict(r) for r in rows]
    for r in filled[:2]:
        r["step"], r["agent"] = r["verdict_step"], r["verdict_agent"]
    with out.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(filled)
    res = runner.invoke(app, ["fit", str(run), "--labels", str(out), "-o", str(tmp_path / "r.json"), "--allow-partial"])
    said = " ".join(res.output.split())
    assert "unknown trace" not in said and "4 not labelled yet" in said, said
    res = runner.invoke(app, ["pick", str(run), "-n", "6", "-o", str(tmp_path / "next.csv"), "--labels", str(out),
                              "--force"])
    assert res.exit_code == EXIT_OK and "2 already labelled" in " ".join(res.output.split()), res.output


def test_pick_says_when_every_log_is_labelled_already(tmp_path):
    """The demo's OUTDIR: every trace carries its labels. pick wrote an empty file and told the user to fill it in."""
    specs = random_specs(random.Random(5), 4)
    for i, s in enumerate(specs):
        s["labels"] = {"mistake_step": 0, "mistake_agent": s["steps"][0]["agent"], "error_locations": None,
                       "error_impacts": None, "error_categories": None}
        s["ranked"], s["scores"], s["question"] = [0], [1.0], f"task {i}"
    run = write_outdir(tmp_path / "run", specs)
    out = tmp_path / "to_label.csv"
    res = runner.invoke(app, ["pick", str(run), "-o", str(out)])
    said = " ".join(res.output.split())
    assert res.exit_code == EXIT_OK and "nothing to pick" in said and "labelled already" in said, said
    assert "fill in" not in said
    from masprism_batch.cli.pick import FILE_COLUMNS

    assert out.read_text().splitlines() == [",".join(FILE_COLUMNS)]
