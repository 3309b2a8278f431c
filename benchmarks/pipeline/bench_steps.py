"""Cost in the number of steps (issue 27 item 2): one trace of N short steps through `masprism-batch attribute`.

Each case writes one canonical JSON-lines trace of N steps of ~10 bytes each (the shape of a chatty tool loop,
inside the 4,096-step ingest cap) and runs `attribute <file> -o OUT --model tiny-random --threads 1` in a fresh
subprocess: wall seconds, the process's own peak RSS (`ru_maxrss` from `wait4`), and the pass-1 tokens read
(`attributions.tokens_pass1`). A case past `--timeout` seconds is killed and written with exit code `timeout`.

Rows (tidy, one per case and repeat) are appended to benchmarks/results/steps.csv; `--label` names the code that
ran (e.g. `before` for a checkout of the code before a change, run with PYTHONPATH pointing at it). Not a test:
nothing here asserts a time; tests/stage/test_many_steps.py checks the growth with a deterministic cost measure.

    nice -n 10 python benchmarks/pipeline/bench_steps.py [--steps 512,1024,2048,4096] [--repeats 1] [--label after]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import append_rows, cpu_name  # noqa: E402  # the host line of its sibling benchmarks

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "steps.csv"
FIELDS = ["date", "host", "cpus", "python", "label", "commit", "steps", "trace_bytes", "repeat", "exit_code",
          "seconds", "peak_rss_mb", "tokens_pass1", "tokens_pass2", "load_avg_1m", "command"]
CLI = [sys.executable, "-c", "from masprism_batch.cli import main; main()"]
WORDS = "ok go run fix err try set get put ls cd".split()


def write_trace(path: Path, n_steps: int, seed: int = 27) -> int:
    """One canonical trace of `n_steps` steps of ~10 bytes (three short words, cut to 10); returns file bytes."""
    rng = random.Random(seed)
    steps = [{"agent": rng.choice(["Planner", "Coder", "Terminal"]),
              "content": " ".join(rng.choice(WORDS) for _ in range(3))[:10]} for _ in range(n_steps)]
    steps[-1]["content"] = "error: fail"
    path.write_text(json.dumps({"trace_id": f"steps-{n_steps}", "question": "fix the build", "steps": steps}) + "\n",
                    encoding="utf-8")
    return path.stat().st_size


WRAPPER = r"""
import json, os, resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.Popen(json.loads(sys.argv[1]), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
try:
    _, err = p.communicate(timeout=float(sys.argv[2]))
    code = str(p.returncode)
except subprocess.TimeoutExpired:
    p.kill(); _, err = p.communicate(); code = "timeout"
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"code": code, "wall": time.perf_counter() - t0, "rss": rss, "err": err.decode()[-3000:]}))
"""


def _case(cmd: list[str], timeout: float) -> tuple[str, float, float]:
    """Run `cmd` under a small wrapper whose only child it is, so RUSAGE_CHILDREN is that command's peak RSS
    (also for a killed command, which `wait4` on a communicate()d process cannot give)."""
    out = subprocess.run([sys.executable, "-c", WRAPPER, json.dumps(cmd), str(timeout)], capture_output=True,
                         text=True, check=True)
    res = json.loads(out.stdout)
    if res["code"] not in ("0", "3", "timeout"):
        print(res["err"], file=sys.stderr)
    return res["code"], res["wall"], res["rss"]


def _tokens(out: Path) -> tuple[int | str, int | str]:
    import pyarrow.dataset as ds

    d = out / "attributions"
    if not d.is_dir():
        return "", ""
    t = ds.dataset(d, format="parquet").to_table(columns=["tokens_pass1", "tokens_pass2"]).to_pylist()
    return (t[0]["tokens_pass1"], t[0]["tokens_pass2"]) if t else ("", "")


def _commit() -> str:
    """The commit of the code that runs (the `masprism_batch` this interpreter imports, which PYTHONPATH may
    point elsewhere), `+dirty` when its package files differ from it; empty outside a git checkout."""
    try:
        pkg = subprocess.run([sys.executable, "-c", "import masprism_batch, os; print(os.path.dirname(masprism_batch.__file__))"],
                             capture_output=True, text=True, check=True).stdout.strip()
        git = ["git", "-C", pkg]
        rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--", ".", "../pipelines", "../kernels"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="512,1024,2048,4096")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before a case is killed")
    ap.add_argument("--label", default="after", help="which code ran (written to the row)")
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args()
    host = f"{cpu_name()} ({os.cpu_count()} cores)"
    results = Path(args.results)
    commit = _commit()
    for n in (int(x) for x in args.steps.split(",")):
        for r in range(args.repeats):
            work = Path(tempfile.mkdtemp(prefix="bench-steps-"))
            try:
                size = write_trace(work / "trace.jsonl", n)
                out = work / "OUT"
                cmd = [*CLI, "attribute", str(work / "trace.jsonl"), "-o", str(out), "--model", "tiny-random",
                       "--threads", "1"]
                code, wall, rss = _case(cmd, args.timeout)
                t1, t2 = _tokens(out)
                row = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "host": host,
                       "cpus": os.cpu_count(), "python": platform.python_version(), "label": args.label,
                       "commit": commit, "steps": n, "trace_bytes": size, "repeat": r, "exit_code": code,
                       "seconds": round(wall, 2), "peak_rss_mb": round(rss, 1), "tokens_pass1": t1,
                       "tokens_pass2": t2, "load_avg_1m": round(os.getloadavg()[0], 2),
                       "command": f"masprism-batch attribute <1 trace, {n} steps of ~10 bytes> -o OUT "
                                  "--model tiny-random --threads 1"}
                print(json.dumps(row), flush=True)
                append_rows(results, [row], FIELDS)  # row by row: a killed bench keeps them
            finally:
                shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
