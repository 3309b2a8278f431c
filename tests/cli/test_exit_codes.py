"""Exit codes and user errors of every command: 0 done (warnings allowed), 1 fatal, 2 usage, 3 some inputs
rejected; one `error:` line and never a traceback for a user error. End-to-end runs use tiny-random."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from masprism_batch import cli
from masprism_batch.cli import EXIT_FATAL, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, app, commands

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data"
FORMATS = DATA / "formats"
COMMANDS = ["ingest", "attribute", "eval", "demo", "run", "models", "stats", "report", "export"]


def _ok(res, code):
    out = res.output
    assert res.exit_code == code, out
    assert "Traceback" not in out and (res.exception is None or isinstance(res.exception, SystemExit)), out
    return out.replace("\n", " ")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A small real OUTDIR: chat formats attributed with tiny-random (a few seconds)."""
    out = tmp_path_factory.mktemp("run") / "OUT"
    _ok(runner.invoke(app, ["attribute", str(FORMATS / "openai_chat.json"), str(FORMATS / "ag2_chat_history.json"),
                            str(FORMATS / "langfuse_trace.json"), "-o", str(out), "--model", "tiny-random",
                            "--all-runs"]), EXIT_OK)  # the Langfuse trace records a normal end: attributed too
    return out


def test_exit_codes_are_stated_once_in_the_top_level_help():
    out = re.sub(r"[\s│╭╮╰╯─]+", " ", _ok(runner.invoke(app, ["--help"]), EXIT_OK))
    assert "Exit codes (every command): 0 done" in out and "2 usage error" in out and "3 done, but some inputs" in out


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_help_has_an_example_and_no_repeated_exit_codes(cmd):
    out = re.sub(r"[\s│╭╮╰╯─]+", " ", _ok(runner.invoke(app, [cmd, "--help"]), EXIT_OK))
    assert f"Example: masprism-batch {cmd}" in out
    assert "Exit codes" not in out


@pytest.mark.parametrize("args", [
    ["ingest", "{in}", "-o", "{tmp}/O", "--format", "xml"],
    ["ingest", "{in}", "-o", "{tmp}/O", "--no-such-option"],
    ["ingest", "{in}"],  # missing -o
    ["run", "{in}", "-o", "{tmp}/O", "--workers", "2", "--model", "tiny-random"],
    ["run", "{in}", "-o", "{tmp}/O", "--format", "xml", "--model", "tiny-random"],
    ["eval", "{in}", "--dataset", "nope", "--model", "tiny-random"],
    ["export", "{tmp}", "--to", "csv", "-o", "{tmp}/x"],
])
def test_usage_errors_exit_2_and_write_nothing(tmp_path, args):
    args = [a.format(tmp=tmp_path, **{"in": FORMATS / "openai_chat.json"}) for a in args]
    _ok(runner.invoke(app, args), EXIT_USAGE)
    assert not (tmp_path / "O").exists()


@pytest.mark.parametrize("cmd", ["ingest", "attribute", "run", "eval", "stats", "report", "export"])
def test_missing_input_is_fatal_for_every_command(tmp_path, cmd):
    nope = str(tmp_path / "nope")
    args = {"ingest": ["ingest", nope, "-o", str(tmp_path / "O")],
            "attribute": ["attribute", nope, "-o", str(tmp_path / "O"), "--model", "tiny-random"],
            "run": ["run", nope, "-o", str(tmp_path / "O"), "--model", "tiny-random"],
            "eval": ["eval", nope, "--dataset", "trail", "--model", "tiny-random", "-o", str(tmp_path / "O")],
            "stats": ["stats", nope], "report": ["report", nope, "-o", str(tmp_path / "r.html")],
            "export": ["export", nope, "--to", "jsonl", "-o", str(tmp_path / "x.jsonl")]}[cmd]
    out = _ok(runner.invoke(app, args), EXIT_FATAL)
    assert "not found" in out and nope in out
    assert not (tmp_path / "O").exists()


@pytest.mark.parametrize("cmd", ["ingest", "attribute", "run"])
def test_output_path_that_is_a_file_is_fatal_without_traceback(tmp_path, cmd):
    f = tmp_path / "afile"
    f.write_text("keep me")
    extra = [] if cmd == "ingest" else ["--model", "tiny-random"]
    out = _ok(runner.invoke(app, [cmd, str(FORMATS / "openai_chat.json"), "-o", str(f), *extra]), EXIT_FATAL)
    assert "exists and is not a directory" in out and f.read_text() == "keep me"


def test_folder_without_traces_is_fatal_and_says_what_was_looked_at_and_skipped(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    (d / "run.log").write_text("hello")
    out = _ok(runner.invoke(app, ["ingest", str(d), "-o", str(tmp_path / "O"), "--no-progress"]), EXIT_FATAL)
    assert "no usable traces" in out and "looked at 0 data file(s)" in out
    assert "skipped 2 file(s)" in out and "notes.txt" in out and "run.log" in out
    # a data file whose only record is rejected: still no traces, and the reason is named
    (d / "bad.json").write_text('{"foo": 1}')
    out = _ok(runner.invoke(app, ["ingest", str(d), "-o", str(tmp_path / "O2"), "--no-progress"]), EXIT_FATAL)
    assert "looked at 1 data file(s)" in out and "unknown_format x1" in out


def test_ingest_exit_codes_ok_warnings_rejected(tmp_path):
    _ok(runner.invoke(app, ["ingest", str(FORMATS), "-o", str(tmp_path / "A"), "--no-progress"]), EXIT_OK)
    # a repaired trace (bad label: kept, label dropped) is a warning: exit 0, the row is still in errors/
    _ok(runner.invoke(app, ["ingest", str(DATA / "hostile" / "bad_label.json"), "-o", str(tmp_path / "B"),
                            "--no-progress"]), EXIT_OK)
    assert any((tmp_path / "B" / "errors").glob("*.parquet"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n{oops\n")
    _ok(runner.invoke(app, ["ingest", str(bad), "-o", str(tmp_path / "C"), "--no-progress"]), EXIT_REJECTED)


def test_failed_model_load_leaves_nothing_that_blocks_a_retry(tmp_path):
    out = tmp_path / "A"
    src = str(FORMATS / "openai_chat.json")
    res = _ok(runner.invoke(app, ["attribute", src, "-o", str(out), "--model", "gpt5"]), EXIT_FATAL)
    assert "cannot load model 'gpt5'" in res and not out.exists()
    _ok(runner.invoke(app, ["attribute", src, "-o", str(out), "--model", "tiny-random"]), EXIT_OK)
    # the same for `run` into an OUTDIR that already exists (empty)
    out2 = tmp_path / "B"
    out2.mkdir()
    _ok(runner.invoke(app, ["run", src, "-o", str(out2), "--model", "gpt5"]), EXIT_FATAL)
    assert list(out2.iterdir()) == []
    _ok(runner.invoke(app, ["run", src, "-o", str(out2), "--model", "tiny-random"]), EXIT_OK)


def test_attribute_chat_formats_and_analytics_commands(run_dir, tmp_path):
    out = _ok(runner.invoke(app, ["stats", str(run_dir)]), EXIT_OK)
    assert "Most-blamed agents" in out and "Where the blamed step sits" in out
    assert "openai" in out and "langfuse" in out
    _ok(runner.invoke(app, ["report", str(run_dir), "-o", str(tmp_path / "r.html")]), EXIT_OK)
    out = _ok(runner.invoke(app, ["report", str(run_dir), "-o", str(tmp_path / "r2.html"), "--trace", "no-such-id"]),
              EXIT_FATAL)
    assert "no-such-id" in out and not (tmp_path / "r2.html").exists()
    # export: the output folder is never created silently
    out = _ok(runner.invoke(app, ["export", str(run_dir), "--to", "jsonl", "-o", str(tmp_path / "nope" / "dir" / "x")]),
              EXIT_FATAL)
    assert "does not exist" in out and not (tmp_path / "nope").exists()
    # chat logs have no span ids: Phoenix trace annotations, in the file of that target (langfuse: spans)
    out = _ok(runner.invoke(app, ["export", str(run_dir), "--to", "phoenix", "-o", str(tmp_path / "a.parquet")]),
              EXIT_OK)
    assert "Phoenix trace annotations" in out and "Phoenix span annotations" in out
    assert sorted(p.name for p in tmp_path.glob("a*.parquet")) == ["a.spans.parquet", "a.traces.parquet"]


def test_export_with_zero_records_is_fatal_and_writes_nothing(run_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "R"
    shutil.copytree(run_dir, d)
    for p in (d / "attributions").glob("*.parquet"):
        t = pq.read_table(p)
        pq.write_table(t.set_column(t.schema.get_field_index("candidates"), "candidates",
                                    pa.array([[]] * t.num_rows, t.schema.field("candidates").type)), p)
    shutil.rmtree(d / "_manifest")  # the parts were rewritten: their manifest would (rightly) call them damaged
    out = _ok(runner.invoke(app, ["export", str(d), "--to", "phoenix", "-o", str(tmp_path / "a.parquet")]), EXIT_FATAL)
    assert "nothing to export" in out and not list(tmp_path.glob("a*.parquet"))


def test_internal_error_is_one_line_without_traceback(monkeypatch, capsys):
    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(commands, "app", boom)  # the app the entry point calls
    monkeypatch.setattr(sys, "argv", ["masprism-batch", "ingest"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    err = capsys.readouterr().err
    assert e.value.code == EXIT_FATAL and "RuntimeError: kaboom" in err and "Traceback" not in err


def test_help_lists_commands_in_workflow_order_with_unbroken_paragraphs():
    from masprism_batch.cli import WORKFLOW

    out = _ok(runner.invoke(app, ["--help"]), EXIT_OK)
    listed = [name for _, name, _ in WORKFLOW if re.search(rf"│ {re.escape(name)} ", out)]
    assert len(listed) >= len(COMMANDS), out
    positions = [re.search(rf"│ {re.escape(name)} ", out).start() for name in listed]
    assert positions == sorted(positions), f"commands out of workflow order: {listed}"
    # a source line break inside a paragraph printed as a break mid-sentence ("no\ntraces found")
    texts = [app.info.help] + [c.help for c in app.registered_commands]
    assert all("\n" not in p for t in texts for p in t.split("\n\n")), "a help paragraph keeps a line break"
