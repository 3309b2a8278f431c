"""Issue 46, the command-level findings: `fit -o` refuses an existing file without --force (5); no command replaces a
link, device or FIFO it is told to write (12); `stats` and log lines show names from the logs escaped (13); a SIGHUP
inherited as ignored (nohup) stays ignored (7); `--ranker` / `--labels` on a FIFO or device say so (17)."""

from __future__ import annotations

import io
import logging
import os
import signal
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from masprism_batch.pipelines.interrupts import Interrupted, interruptible
from rich.console import Console
from typer.testing import CliRunner

from masprism_batch.analytics.stats_terminal import stats_tables_for_terminal
from masprism_batch.cli import _Printable, app, setup_logging
from masprism_batch.cli.common import check_ranker
from masprism_batch.config import PipelineConfig
from masprism_batch.outdir.parts import OutdirUnsafe, atomic_output

HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07[link=https://evil.example]click[/link]\x9b31m"


def _run_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    return d


@pytest.mark.parametrize("name", ["labels.csv", "run/run.json"])
def test_fit_out_refuses_an_existing_file_without_force(tmp_path, name):
    """Finding 5: `fit -o labels.csv` overwrote the hand-made labels, `-o OUT/run.json` the run's record."""
    run = _run_dir(tmp_path)
    out = tmp_path / name
    out.write_text("trace_id,step\nt1,3\n")
    res = CliRunner().invoke(app, ["fit", str(run), "-o", str(out)])
    said = " ".join(res.output.split())
    # a run's own file is refused as such, --force or not (cli/fit.py); any other existing file asks for --force
    own = "one of the run's own files" in said
    assert res.exit_code == 1 and (own if name.startswith("run/") else "--force" in said), said
    assert out.read_text() == "trace_id,step\nt1,3\n"
    res = CliRunner().invoke(app, ["fit", str(run), "-o", str(out), "--force"])  # past the check: the run is empty
    said = " ".join(res.output.split())
    assert "exists" not in said, said
    assert out.read_text() == "trace_id,step\nt1,3\n" or not name.startswith("run/")
    if name.startswith("run/"):
        assert "one of the run's own files" in said, said


def test_atomic_output_writes_into_a_device_or_fifo_and_never_replaces_a_link(tmp_path):
    """Finding 12: `-o /dev/stdout --force` (as root) replaced the /dev/stdout link itself with a regular file."""
    dev = tmp_path / "to-null"
    dev.symlink_to("/dev/null")  # what /dev/stdout is: a link to a character device
    with atomic_output(dev) as f:
        f.write("report")
    assert dev.is_symlink() and os.readlink(dev) == "/dev/null"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with atomic_output(fifo) as f:
            f.write("through the pipe")
        assert os.read(reader, 100) == b"through the pipe"
    finally:
        os.close(reader)
    assert fifo.is_fifo()
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("keep me")
    link = tmp_path / "out" / "report.html"
    link.parent.mkdir()
    link.symlink_to(outside)
    with pytest.raises(OutdirUnsafe, match="symbolic link"):
        with atomic_output(link) as f:
            f.write("replaced")
    assert link.is_symlink() and outside.read_text() == "keep me"


@pytest.mark.parametrize("command", ["report", "export", "fit"])
def test_force_never_replaces_a_link_to_a_file(tmp_path, command):
    run = _run_dir(tmp_path)
    outside = tmp_path / "elsewhere.html"
    outside.write_text("keep me")
    link = tmp_path / "o.html"
    link.symlink_to(outside)
    # export --to jsonl: the one format whose -o is the file itself (phoenix writes FILE.spans/.traces beside it)
    args = {"report": ["report", str(run)], "export": ["export", str(run), "--to", "jsonl"],
            "fit": ["fit", str(run)]}[command]
    res = CliRunner().invoke(app, [*args, "-o", str(link), "--force"])
    assert res.exit_code == 1 and "symbolic link" in res.output, res.output
    assert link.is_symlink() and outside.read_text() == "keep me"


def test_stats_shows_names_from_the_logs_escaped(tmp_path):
    """Finding 13: screen-clear, window-title and OSC 52 sequences in a name reached the terminal; rich markup in a
    name became a clickable OSC 8 link."""
    (tmp_path / "stats").mkdir()
    pq.write_table(pa.Table.from_pylist([{"source": HOSTILE, "system": HOSTILE, "agent": HOSTILE, "n_traces": 3,
                                          "share": 0.5}]), tmp_path / "stats" / "blamed_agents.parquet")
    buf = io.StringIO()
    con = Console(file=buf, width=400, force_terminal=True, color_system="truecolor")
    for t in stats_tables_for_terminal(tmp_path):
        con.print(t)
    out = buf.getvalue()
    assert "\x1b]" not in out and "\x1b[2J" not in out and "\x07" not in out and "\x9b" not in out, repr(out[:300])
    assert "[link=https://evil.example]click[/link]" in out  # markup shown as the text it is, never a link
    assert "\\x1b]52;c;ZXZpbA==" in out  # the sequence is visible, escaped


def test_log_lines_escape_control_sequences(tmp_path):
    stream = io.StringIO()
    h = logging.StreamHandler(stream)
    h.addFilter(_Printable())
    log = logging.getLogger("masprism_batch.test_round5")
    log.addHandler(h)
    try:
        log.warning("agent %s rejected", HOSTILE)
    finally:
        log.removeHandler(h)
    line = stream.getvalue()
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]0;pwned\\x07" in line, repr(line)
    setup_logging()
    assert all(any(isinstance(f, _Printable) for f in h.filters) for h in logging.getLogger().handlers)


def test_sighup_inherited_as_ignored_stays_ignored():
    """Finding 7: `nohup masprism-batch attribute ...` still stopped on SIGHUP (exit 129)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers can only be installed from the main thread")
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interruptible():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing raised
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # SIGTERM still ends the run cleanly
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        with pytest.raises(Interrupted):  # not inherited as ignored: a clean stop, as before
            with interruptible():
                os.kill(os.getpid(), signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, old)


@pytest.mark.parametrize("kind", ["fifo", "zero", "dir"])
def test_ranker_and_labels_on_a_special_file_say_not_a_regular_file(tmp_path, kind, capsys):
    """Finding 17: `--ranker` / `--labels` on a FIFO or /dev/zero said "file not found"."""
    path = {"fifo": tmp_path / "p", "zero": "/dev/zero", "dir": tmp_path / "d"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        os.mkdir(path)
        (path / "rankers.json").mkdir()  # a folder means its rankers.json: itself a folder here
    cfg = PipelineConfig.model_validate({"method": {"ranker": str(path)}})
    with pytest.raises(typer.Exit):
        check_ranker(cfg)
    err = capsys.readouterr().err
    assert "not a regular file" in err and "not found" not in err, err
    run = _run_dir(tmp_path)
    labels = path if kind != "dir" else path / "rankers.json"
    res = CliRunner().invoke(app, ["fit", str(run), "-o", str(tmp_path / "r.json"), "--labels", str(labels)])
    assert res.exit_code == 1 and "not a regular file" in res.output and "not found" not in res.output, res.output
