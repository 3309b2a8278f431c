"""Issue 61 (reliability round 6), how files are opened and streamed: a `.parquet` input is opened as the walk checked
it, so a FIFO swapped in under its name is refused, never waited on (12); a CrewAI text log is streamed entry by
entry, its memory bounded by the caps, not split whole first (8)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from peak_rss import HWM

from masprism_batch.ingest import read_inputs

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/proc/self/status").exists(),
                                reason="FIFOs and peak RSS from /proc/self/status: Linux")

# The walk's check (sources._not_regular) passes, then the name is a FIFO: what a swap after the check gives. A
# reader that opens by path blocks for ever on it (no writer comes); the child is stopped after 60 s.
SWAPPED = r"""
import json, sys
from masprism_batch.ingest import read_inputs, sources
from masprism_batch.ingest.parquet_rows import read_rows, trace_id_keys
from masprism_batch.config import IngestConfig
from masprism_batch.ingest.common import IngestError
sources._not_regular = lambda path: None  # the walk saw a regular file
errors = []
n = sum(1 for _ in read_inputs([sys.argv[1]], "auto", errors.append))
out = {"traces": n, "reasons": [e["reason"] for e in errors]}
for call in (lambda: trace_id_keys(sys.argv[1], IngestConfig()), lambda: list(read_rows(sys.argv[1], IngestConfig()))):
    try:
        call()
        out.setdefault("direct", []).append("read")
    except IngestError as e:
        out.setdefault("direct", []).append(e.reason)
print(json.dumps(out))
"""


def test_a_fifo_swapped_in_for_a_parquet_input_is_refused(tmp_path):
    """Finding 12: `.parquet` inputs were opened by path after the walk's check; a FIFO swapped in blocked the run
    for ever. Opened with O_NONBLOCK and checked on the descriptor now, as every other input: one row."""
    fifo = tmp_path / "traces.parquet"
    os.mkfifo(fifo)
    try:
        p = subprocess.run([sys.executable, "-c", SWAPPED, str(fifo)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("reading a FIFO named .parquet blocked (opened by path, not as the walk checked it)")
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == {"traces": 0, "reasons": ["not_a_regular_file"],
                   "direct": ["not_a_regular_file", "not_a_regular_file"]}, got


def test_parquet_inputs_still_read(tmp_path):
    """The same files read through the descriptor: a canonical Parquet file, rows and ids as before."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from masprism_batch import schema
    from masprism_batch.trace import Step, Trace

    rows = [Trace(trace_id=f"t{i}", source="app", steps=[Step(index=0, agent="a", content=f"step {i}")]).to_row()
            for i in range(5)]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema.TRACES), tmp_path / "t.parquet")
    errors: list[dict] = []
    got = list(read_inputs([str(tmp_path / "t.parquet")], "auto", errors.append))
    assert [t.trace_id for t in got] == [f"t{i}" for i in range(5)] and not errors, errors


CREW_CHILD = r"""
import json, sys
from masprism_batch.config import IngestConfig
from masprism_batch.ingest import read_inputs
""" + HWM + r"""base = hwm()
errors = []
n = 0
steps = 0
for t in read_inputs([sys.argv[1]], "auto", errors.append, limits=IngestConfig(max_file_bytes=int(sys.argv[2]))):
    n += 1
    steps += len(t.steps)
print(json.dumps({"traces": n, "steps": steps, "reasons": sorted({e["reason"] for e in errors}),
                  "base_mb": base, "peak_mb": hwm()}))
"""
MiB = 1024**2


def _crew(path: Path, cap: int) -> dict:
    p = subprocess.run([sys.executable, "-c", CREW_CHILD, str(path), str(cap)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _entries(n: int, run: int = 0) -> str:
    """One kickoff of a crew: n tasks started and completed. Another kickoff repeats the task names (that is how a
    new run shows in the log) at its own time, with its own outputs."""
    out = []
    day, hour = 1 + run // 24, run % 24
    for i in range(n):
        when = f"2026-01-{day:02d} {hour:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        task = f"task {i}"
        out.append(f'{when}: task_name="{task}", task="do {task}", agent="Worker", status="started"\n')
        out.append(f'{when}: task_name="{task}", task="do {task}", agent="Worker", status="completed", '
                   f'output="run {run}: done {i}"\n')
    return "".join(out)


def test_crewai_text_log_is_streamed(tmp_path):
    """Finding 8: a CrewAI text log was split whole into entries before any cap (64 MiB took 1.5 GB). 16 MiB of
    small entries (gzip, a few hundred KB) now stream: every run is read, and the peak stays a small multiple of
    one run, not of the file."""
    runs = 16 * MiB // len(_entries(2000)) + 1
    with gzip.open(tmp_path / "logs.txt.gz", "wt", encoding="utf-8", compresslevel=1) as f:
        for run in range(runs):
            f.write(_entries(2000, run))
    got = _crew(tmp_path / "logs.txt.gz", 64 * MiB)
    assert got["traces"] == runs and got["steps"] == runs * 4000 and got["reasons"] == [], got
    assert got["peak_mb"] - got["base_mb"] < 60, got  # +176 MB on 9473d5c, +11 MB now


def test_crewai_text_log_over_the_file_cap_keeps_the_runs_before_it(tmp_path):
    """The file cap still holds for a streamed log: past max_file_bytes (decompressed) the file ends with
    `file_too_large`; the runs that ended before it are kept (nothing read is lost), memory stays bounded."""
    with gzip.open(tmp_path / "logs.txt.gz", "wt", encoding="utf-8", compresslevel=1) as f:
        for run in range(40):
            f.write(_entries(500, run))
    got = _crew(tmp_path / "logs.txt.gz", 2 * MiB)
    assert got["reasons"] == ["file_too_large"], got
    assert 0 < got["traces"] < 40 and got["steps"] == got["traces"] * 1000, got
    assert got["peak_mb"] - got["base_mb"] < 60, got


def test_crewai_text_log_streamed_reads_as_before(tmp_path):
    """The streamed reader gives what the whole-text reader gave: the same traces, ids and steps, for a log of
    two kickoffs with a multi-line task (a value keeps its newlines)."""
    from masprism_batch.ingest.common import Context
    from masprism_batch.ingest.crewai_log import parse_text

    log = (_entries(3) + '2026-01-01 00:01:00: task_name="multi", task="line one\nline two", agent="Lead", '
           'status="started"\n' + _entries(3, 1))
    (tmp_path / "logs.txt").write_text(log, encoding="utf-8")
    errors: list[dict] = []
    streamed = list(read_inputs([str(tmp_path / "logs.txt")], "auto", errors.append))
    whole = list(parse_text(log, Context(str(tmp_path / "logs.txt"), errors.append)))
    assert not errors and len(streamed) == 2
    assert [[(s.agent, s.content, s.start_time) for s in t.steps] for t in streamed] == [
        [(s.agent, s.content, s.start_time) for s in t.steps] for t in whole]
    assert any("line one\nline two" in s.content for s in streamed[0].steps)


WALK_SWAP = r"""
import json, sys
from masprism_batch.ingest import read_inputs, sources
sources._not_regular = lambda path: None  # the walk's stat saw a regular file; the name is a FIFO by the open
errors = []
n = sum(1 for _ in read_inputs([sys.argv[1]], "auto", errors.append))
print(json.dumps({"traces": n, "reasons": sorted(e["reason"] for e in errors)}))
"""


def test_a_fifo_swapped_in_for_a_text_log_is_not_waited_on(tmp_path):
    """The walk peeks at a `.txt` / `.log` to see whether it is a known text log: that peek opens as every input is
    opened now (it opened by path, so a FIFO swapped in after the stat blocked the walk for ever)."""
    folder = tmp_path / "logs"
    folder.mkdir()
    os.mkfifo(folder / "crew.txt")
    try:
        p = subprocess.run([sys.executable, "-c", WALK_SWAP, str(folder)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("peeking at a FIFO named .txt blocked the folder walk")
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"traces": 0, "reasons": ["skipped_file"]}
