"""Issue 60 item 7: `demo` warns about none of its own bundled files (a walk of the sample's top folders gave 2
`skipped_file` rows, its LICENSE files); the readable extensions are one list in every message
(ingest/sources.DATA_SUFFIXES; `no usable traces` named a shorter one); `show --errors` keeps a message whole
in its column (it was cut at 160 characters: "... a CrewAI outp")."""

from __future__ import annotations

from analytics_synth import hand_specs, write_outdir
from typer.testing import CliRunner

from masprism_batch.cli import app
from masprism_batch.cli.common import no_traces_message
from masprism_batch.cli.demo import _sample_dir, _sample_inputs
from masprism_batch.ingest.sources import DATA_SUFFIXES, expand, readable_names, skipped_row


def test_the_demo_reads_its_logs_and_warns_about_none_of_its_files():
    rows: list[dict] = []
    skipped: list[str] = []
    files = list(expand(_sample_inputs(_sample_dir()), rows.append, skipped))
    assert len(files) == 6 and rows == [] and skipped == []
    every: list[str] = []
    assert len(list(expand([str(_sample_dir())], rows.append, every))) == 6  # the same logs, and the licences:
    assert sorted(p.rsplit("/", 1)[-1] for p in every) == ["LICENSE", "LICENSE", "NOTICE.md"]  # what was warned


def test_one_list_of_readable_names_in_every_message(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    (tmp_path / "run.yaml").write_text("a: 1")
    said = [no_traces_message([str(tmp_path)]), skipped_row(str(tmp_path / "run.yaml"), "run.yaml")["message"]]
    for text in said:
        assert readable_names() in text and all(s in text for s in DATA_SUFFIXES), text


def test_show_errors_keeps_a_long_message_whole(tmp_path):
    row = skipped_row("/data/logs/crew_output.txt", "crew_output.txt")
    out = write_outdir(tmp_path / "o", hand_specs(), errors=[row])
    r = CliRunner().invoke(app, ["show", str(out), "--errors"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    cells = "".join(line.split("│")[-2].strip() + " " for line in r.output.splitlines() if line.count("│") > 5)
    assert " ".join(cells.split()).replace("- ", "-").endswith("name the file to read it anyway"), r.output
