"""Ingest throughput and memory: MB/s of raw (decompressed) JSON, traces/s, peak RSS.

Cases (each run in a fresh subprocess so its peak RSS is its own):
- `shared-data`: every file of ../shared/data (Who&When + TRAIL), as `masprism-batch ingest` reads it;
- `jsonl-x1`, `jsonl-x8`: the same traces as canonical JSON lines, once and eight times (ids suffixed), to
  show that memory does not grow with the corpus.
MB/s is reported per wall second and per CPU second of the ingest process (the machine is shared, so the
CPU-second figure is the one-core throughput). Rows are appended to benchmarks/results/ingest.csv.

    python benchmarks/pipeline/bench_ingest.py [--data ../shared/data] [--repeats 3] [--note "after issue 25"]

Compare MB/s per CPU-second between runs (the 2-core machine is shared: wall figures follow the load).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import append_rows, cpu_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "ingest.csv"
FIELDS = ["date", "host", "cpus", "python", "case", "repeat", "files", "traces", "error_rows", "mb_raw",
          "mb_disk", "wall_s", "cpu_s", "mb_per_s_wall", "mb_per_s_cpu", "traces_per_s_wall", "peak_rss_mb",
          "load_avg_1m", "command"]

CHILD = r"""
import json, sys, time
import pyarrow.parquet, tqdm  # noqa: F401  imports are not ingest work: load them before the clock starts
from masprism_batch import schema  # noqa: F401  (masprism_batch.io is gone; the ingest imports the rest)
from masprism_batch.ingest import ingest
t_cpu = time.process_time()
s = ingest(json.loads(sys.argv[1]), sys.argv[2], progress=False, overwrite=True)
d = s.as_dict(); d["cpu_s"] = time.process_time() - t_cpu; d["error_rows"] = s.error_rows
print(json.dumps(d))
"""


def _run(inputs: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(inputs), str(out)], capture_output=True, text=True,
                       env=env, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def _jsonl_copies(traces_dir: Path, dest: Path, copies: int) -> None:
    import pyarrow.dataset as ds

    with open(dest, "w", encoding="utf-8") as f:
        for k in range(copies):
            for batch in ds.dataset(str(traces_dir)).to_batches(batch_size=16):
                for row in batch.to_pylist():
                    row["trace_id"] = f"{row['trace_id']}#{k}"
                    for s in row["steps"]:
                        s["start_time"] = s["start_time"].isoformat() if s["start_time"] else None
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--note", default="", help="appended to each row's command in [...], e.g. the commit measured")
    args = ap.parse_args()
    data = Path(args.data)
    if not data.is_dir():
        sys.exit(f"no data at {data}")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    common = {"date": stamp, "host": f"{cpu_name()} ({os.cpu_count()} cores, shared)", "cpus": os.cpu_count(),
              "python": platform.python_version()}
    rows: list[dict] = []
    note = f" [{args.note}]" if args.note else ""
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        tmp = Path(tmp)
        # the recorded command names the data by its name, not by this machine's absolute path
        cases = [("shared-data", [str(data)], f"masprism-batch ingest <{data.name}> -o OUT")]
        for name, inputs, cmd in cases:
            for r in range(args.repeats):
                rows.append(_row(common, name, r, inputs, tmp / "out", cmd + note))
        for copies in (1, 8):
            src = tmp / f"x{copies}.jsonl"
            _jsonl_copies(tmp / "out" / "traces", src, copies)
            for r in range(args.repeats):
                rows.append(_row(common, f"jsonl-x{copies}", r, [str(src)], tmp / f"out{copies}",
                                 f"masprism-batch ingest traces-x{copies}.jsonl -o OUT{note}"))
    append_rows(RESULTS, rows, FIELDS)
    for row in rows:
        print(f"{row['case']:12s} #{row['repeat']}: {row['mb_raw']:7.1f} MB, {row['traces']:5d} traces, "
              f"{row['mb_per_s_wall']:6.1f} MB/s wall, {row['mb_per_s_cpu']:6.1f} MB/s per CPU-s, "
              f"{row['traces_per_s_wall']:6.0f} traces/s, peak RSS {row['peak_rss_mb']:.0f} MB")
    print(f"appended {len(rows)} rows to {RESULTS}")


def _row(common: dict, case: str, repeat: int, inputs: list[str], out: Path, cmd: str) -> dict:
    load = os.getloadavg()[0]
    d = _run(inputs, out)
    return {**common, "case": case, "repeat": repeat, "files": d["files"], "traces": d["traces"],
            "error_rows": d["error_rows"], "mb_raw": round(d["bytes_raw"] / 1e6, 2),
            "mb_disk": round(d["bytes_disk"] / 1e6, 2), "wall_s": d["seconds"], "cpu_s": round(d["cpu_s"], 3),
            "mb_per_s_wall": round(d["bytes_raw"] / 1e6 / d["seconds"], 1),
            "mb_per_s_cpu": round(d["bytes_raw"] / 1e6 / d["cpu_s"], 1),
            "traces_per_s_wall": round(d["traces"] / d["seconds"], 1), "peak_rss_mb": d["peak_rss_mb"],
            "load_avg_1m": round(load, 2), "command": cmd}


if __name__ == "__main__":
    main()
