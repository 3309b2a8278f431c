"""Progress without a terminal: a line every --progress-interval seconds with done/total, tokens/s and ETA."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from typer.testing import CliRunner

from masprism_batch.cli import EXIT_OK, app
from masprism_batch.cli.progress import heartbeat, progress_line

FORMATS = Path(__file__).resolve().parents[1] / "data" / "formats"


def test_progress_line():
    assert progress_line(120, 2000, 293.0, 1850.4) == (
        "progress: 120/2,000 traces (6.0%), 0.41 traces/s, 1,850 tokens/s, elapsed 4m53s, ETA 1h16m")
    assert progress_line(0, 10, 0.0, None) == "progress: 0/10 traces (0.0%), 0.00 traces/s, elapsed 0s, ETA -"
    assert progress_line(10, 10, 5.0, 3.0).endswith("elapsed 5s, done")


def test_heartbeat_logs_on_a_timer_without_a_terminal(caplog):
    caplog.set_level(logging.INFO, logger="masprism_batch.progress")
    with heartbeat(0.05) as display:
        display.begin(10, "attribute (local)")  # what the run's committer calls
        display.on_pack(3, 3, 1234, 1.0)
        time.sleep(0.3)  # no pack for a while: lines keep coming
    lines = [r.getMessage() for r in caplog.records if r.name == "masprism_batch.progress"]
    assert len(lines) >= 3 and lines[0].startswith("progress: 0/10 traces")
    assert any("3/10 traces (30.0%)" in x and "1,234 tokens/s" in x and "ETA" in x for x in lines)
    time.sleep(0.15)  # the block closed the display: its timer logs no more
    assert len([r for r in caplog.records if r.name == "masprism_batch.progress"]) == len(lines)


def test_heartbeat_is_silent_when_progress_is_off(caplog):
    caplog.set_level(logging.INFO, logger="masprism_batch.progress")
    with heartbeat(0.01, show=False) as display:
        display.begin(5, "attribute (local)")
        display.on_pack(5, 5, 100, 1.0)
        time.sleep(0.05)
    with heartbeat(0) as display:
        display.begin(5, "attribute (local)")
    assert not [r for r in caplog.records if r.name == "masprism_batch.progress"]


def test_attribute_logs_progress_lines(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="masprism_batch.progress")
    res = CliRunner().invoke(app, ["attribute", str(FORMATS), "-o", str(tmp_path / "A"), "--model", "tiny-random",
                                   "--progress-interval", "0.2", "--all-runs"])
    assert res.exit_code == EXIT_OK, res.output
    lines = [r.getMessage() for r in caplog.records if r.name == "masprism_batch.progress"]
    assert lines[0] == "progress: 0/12 traces (0.0%), 0.00 traces/s, elapsed 0s, ETA -"
    assert "12/12 traces (100.0%)" in lines[-1] and "tokens/s" in lines[-1] and lines[-1].endswith("done")


def test_default_display_line_gives_way_to_the_heartbeat(caplog, monkeypatch):
    """Without a terminal the default display logs a sparse line per pack; the heartbeat's lines replace it."""
    from masprism_batch.pipelines.progress import BarProgress

    monkeypatch.setattr(BarProgress, "log_every", 0.0)
    caplog.set_level(logging.INFO)
    with heartbeat(30) as display:
        display.begin(8, "attribute (local)")
        time.sleep(0.01)
        display.on_pack(3, 3, 10, 0.5)
    plain = BarProgress(show=False)
    plain.begin(8, "attribute (local)")
    time.sleep(0.01)
    plain.on_pack(4, 4, 40, 1.0)
    plain.close()
    msgs = [r.getMessage() for r in caplog.records if r.name == "masprism_batch.pipelines.progress"]
    assert msgs == ["progress: 4 traces, 4.00 traces/s, 40 tokens/s"]


def test_progress_moves_before_the_first_pack_is_committed(tmp_path, caplog, monkeypatch):
    """Issue 35, item 5: off a terminal, a line with tokens/s and traces done comes from inside the first pack
    (its prefill groups), not only when the driver commits it; the same line is never logged twice."""
    from masprism_batch.cli import progress

    order: list[tuple[str, str]] = []
    real_on_pack = progress.HeartbeatProgress.on_pack

    def on_pack(self, records, *args):
        if not any(kind == "commit" for kind, _ in order):
            # the timer thread writes at most one line per interval; on a loaded machine the first commit can
            # follow the last pass-2 group by less than that, so give the line that counts them time to appear
            time.sleep(0.5)
        order.append(("commit", str(records)))
        return real_on_pack(self, records, *args)

    class Spy(logging.Handler):
        def emit(self, record):
            order.append(("line", record.getMessage()))

    monkeypatch.setattr(progress.HeartbeatProgress, "on_pack", on_pack)
    spy = Spy(level=logging.INFO)
    logging.getLogger("masprism_batch.progress").addHandler(spy)
    caplog.set_level(logging.INFO, logger="masprism_batch.progress")
    try:
        res = CliRunner().invoke(app, ["attribute", str(FORMATS), "-o", str(tmp_path / "A"), "--model", "tiny-random",
                                       "--progress-interval", "0.06", "--all-runs"])
    finally:
        logging.getLogger("masprism_batch.progress").removeHandler(spy)
    assert res.exit_code == EXIT_OK, res.output
    first_commit = next(i for i, (kind, _) in enumerate(order) if kind == "commit")
    before = [msg for kind, msg in order[:first_commit] if kind == "line"]
    assert any("tokens/s" in m for m in before), order[:first_commit + 1]
    assert any(not m.startswith("progress: 0/") for m in before), before  # traces counted inside the pack
    lines = [msg for kind, msg in order if kind == "line"]
    assert all(a != b for a, b in zip(lines, lines[1:], strict=False)), lines
    assert lines[-1].endswith("done")


class _Terminal:
    """stderr as a terminal: tqdm draws its bar here."""

    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s

    def flush(self):
        pass

    def isatty(self):
        return True


def test_terminal_bar_ticks_every_second_from_the_first_pack(monkeypatch):
    """Issue 51 item 1: the bar sat at `0/4 [00:00<?, ?trace/s]`, clock frozen, for a whole 29 s run. It is
    redrawn every second: elapsed time always, tokens/s once a prefill group finished, ETA once a pack is in."""
    import sys

    from masprism_batch import progress_events
    from masprism_batch.cli import progress as prog

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(prog, "TICK", 0.2)
    with heartbeat(30.0) as display:
        display.begin(4, "attribute (local)")
        time.sleep(1.3)  # nothing finished yet: the clock still moves
        assert "00:01" in term.text, term.text
        progress_events.prefill_done("pass1", 3, 2500)  # the first prefill group: tokens/s before any pack
        time.sleep(0.5)
        assert "tok/s" in term.text.rsplit("\r", 1)[-1] or "tok/s" in term.text
        display.on_pack(1, 1, 4000, 1.5)
        time.sleep(0.5)
        last = term.text.rsplit("\r", 1)[-1]
        assert "1/4" in last and "<00:" in last and "?" not in last.split("<", 1)[1].split(",", 1)[0], last


def test_the_100_percent_line_is_logged_once(caplog):
    """Issue 60 item 7: off a terminal, the last pass-2 group or the last pack reaching the total logged a 100%
    line, and the end logged another one a moment later (elapsed apart): once, at the end."""
    from masprism_batch import progress_events

    caplog.set_level(logging.INFO, logger="masprism_batch.progress")
    with heartbeat(0.06) as display:
        display.begin(4, "attribute (local)")
        time.sleep(0.02)
        progress_events.prefill_done("pass2", 4, 100)  # every trace of the pack about done
        time.sleep(0.1)
        display.on_pack(4, 4, 400, 1.0)
        time.sleep(1.1)  # the timer fires; the end line comes a second later than any earlier one would
    lines = [r.getMessage() for r in caplog.records if r.name == "masprism_batch.progress"]
    full = [x for x in lines if "4/4 traces (100.0%)" in x]
    assert len(full) == 1 and full[0] == lines[-1] and full[0].endswith("done"), lines


def test_a_warning_during_the_bar_starts_its_own_line(monkeypatch):
    """Issue 60 item 7: a Ctrl-C's "interrupted" warning was written onto the bar's line; it is written above
    the bar (tqdm.write), and the log handlers are as they were once the bar is closed."""
    import sys

    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    root = logging.getLogger()
    handler = logging.StreamHandler(term)
    root.addHandler(handler)
    try:
        with heartbeat(30.0) as display:
            display.begin(4, "attribute (local)")
            time.sleep(0.05)
            logging.getLogger("masprism_batch.pipelines.interrupts").warning("interrupted (SIGINT): 1 pack kept")
        text = term.text
        at = text.index("interrupted (SIGINT)")
        assert text[at - 1] in "\r\n", repr(text[max(0, at - 40):at + 40])  # not glued onto the bar
        assert handler in root.handlers
    finally:
        root.removeHandler(handler)
