"""Peak memory of hostile inputs through the real commands (issue 17): the caps at ingest bound what reaches
the tokenizer, and reading never holds more than a cap.

Cases (each one command in a fresh subprocess; peak RSS is that process's own `ru_maxrss`, from `wait4`):
- `step-20mb`: `masprism-batch attribute` (tiny-random, --threads 1) on 4 Who&When traces, one of them with a
  20 MB step. Default caps: the step is cut to max_step_bytes at ingest (warning `step_truncated`) and the trace
  is attributed with the other three. `--uncapped` adds `step-20mb-uncapped` (caps raised to 64 MiB: the old
  behaviour, the whole step tokenized) for comparison; it needs several GB.
- `step-20mb-control`: the same 4 traces without the big step (what the model itself costs).
- `bombs-and-specials`: `masprism-batch run` (local, tiny-random) on a folder with 3 good traces, a FIFO named
  `*.json`, a `/dev/zero` link, and a 5 MB `.jsonl.gz` that expands to 5 GiB in one line.
- `json-gz-bomb`: `masprism-batch ingest` of a 5 MB `.json.gz` that expands to 5 GiB (one document: it stops at
  max_file_bytes, 512 MiB by default, counted as decompressed; peak ~ the cap, not twice it).
- `steps-N` (any N, e.g. `--cases steps-4096,steps-8192,steps-20000`): `masprism-batch attribute` (tiny-random,
  --threads 1) on one trace of N steps of ~10 bytes (bench_steps.write_trace) with `ingest.max_steps` = N: the
  peak memory of one trace against its steps (linear past schema.DENSE_STEPS; config_checks.BYTES_PER_STEP).

Rows (tidy, one per case and repeat) are appended to benchmarks/results/memory_caps.csv. Not a test: nothing
here asserts a time; tests/ingest/test_hostile.py and tests/pipelines/test_run_safety.py check the behaviour.

    python benchmarks/pipeline/bench_memory_caps.py [--repeats 1] [--uncapped] [--cases step-20mb,...]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository root makes `benchmarks` importable
    sys.path.append(str(Path(__file__).resolve().parents[2]))  # last: an installed masprism_batch wins
from benchmarks.rows import append_rows, cpu_name  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "memory_caps.csv"
FIELDS = ["date", "host", "cpus", "python", "case", "repeat", "exit_code", "wall_s", "peak_rss_mb", "attributed",
          "rejected", "warnings", "reasons", "load_avg_1m", "command"]
CLI = [sys.executable, "-c", "from masprism_batch.cli import main; main()"]
WORDS = "the agent searched the web and found a result then wrote code to check the answer again".split()


def _who_and_when(rng: random.Random, n_steps: int, big_step: int | None = None, big_bytes: int = 0) -> dict:
    hist = []
    for i in range(n_steps):
        content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80)))
        if i == big_step:
            content = (content + " ") * (big_bytes // (len(content) + 1) + 1)
            content = content[:big_bytes] + " Error: the big step ends here."
        hist.append({"role": rng.choice(["Orchestrator", "WebSurfer", "Assistant"]), "content": content})
    return {"question": "How many results?", "history": hist, "mistake_step": "1", "mistake_agent": "WebSurfer",
            "ground_truth": "3"}


def _gzip_bomb(path: Path, prefix: bytes, mib: int) -> None:
    """prefix + `mib` MiB of 'a' without a newline, as concatenated gzip members (about 1 kB per MiB)."""
    member = gzip.compress(b"a" * 1024**2, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(prefix, mtime=0))
        for _ in range(mib):
            f.write(member)


def _run(cmd: list[str]) -> tuple[int, float, float]:
    """(exit code, wall seconds, peak RSS MB of the process) via wait4 (its own rusage)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 3):
        print(err[-3000:], file=sys.stderr)
    return p.returncode, wall, ru.ru_maxrss / 1024


def _counts(out: Path) -> dict:
    run = out / "run.json"
    if run.exists():
        c = json.loads(run.read_text())["counts"]
        return {"attributed": c["attributed"], "rejected": c["rejected"], "warnings": c.get("warnings", 0),
                "reasons": json.dumps({**c["rejected_by_reason"], **c.get("warnings_by_reason", {})}, sort_keys=True)}
    marker = out / "_INGEST.json"
    if marker.exists():
        m = json.loads(marker.read_text())
        return {"attributed": "", "rejected": sum(m["rejected"].values()), "warnings": sum(m["warnings"].values()),
                "reasons": json.dumps({**m["rejected"], **m["warnings"]}, sort_keys=True)}
    return {"attributed": "", "rejected": "", "warnings": "", "reasons": ""}


EXTRA: dict = {}  # --config-json: merged into the config of the `attribute` cases


def case_step_20mb(work: Path, uncapped: bool, big_bytes: int = 20 * 1000**2) -> tuple[list[str], Path, str]:
    rng = random.Random(17)
    d = work / "in" / "Hand-Crafted"
    d.mkdir(parents=True)
    for i in range(4):
        doc = _who_and_when(rng, 8, big_step=3 if i == 0 and big_bytes else None, big_bytes=big_bytes)
        (d / f"trace{i}.json").write_text(json.dumps(doc), encoding="utf-8")
    out = work / "OUT"
    cmd = [*CLI, "attribute", str(work / "in"), "-o", str(out), "--model", "tiny-random", "--threads", "1"]
    what = "one 20 MB step" if big_bytes else "no big step (control)"
    shown = f"masprism-batch attribute <4 traces, {what}> -o OUT --model tiny-random --threads 1"
    conf = {k: dict(v) for k, v in EXTRA.items()}
    if uncapped:
        big = 64 * 1024**2
        conf.setdefault("ingest", {}).update(max_step_bytes=big, max_trace_bytes=big)
    if conf:
        (work / "config.json").write_text(json.dumps(conf))
        cmd += ["--config", str(work / "config.json")]
        shown += f" --config '{json.dumps(conf, sort_keys=True)}'"
    return cmd, out, shown


def case_bombs_and_specials(work: Path, uncapped: bool) -> tuple[list[str], Path, str]:
    rng = random.Random(18)
    d = work / "in" / "Algorithm-Generated"
    d.mkdir(parents=True)
    for i in range(3):
        (d / f"good{i}.json").write_text(json.dumps(_who_and_when(rng, 6)), encoding="utf-8")
    os.mkfifo(d / "pipe.json")
    os.symlink("/dev/zero", d / "zero.json")
    _gzip_bomb(d / "bomb.jsonl.gz", b'{"trace_id": "bomb", "steps": [{"agent": "a", "content": "', 5 * 1024)
    out = work / "OUT"
    cmd = [*CLI, "run", str(work / "in"), "-o", str(out), "--model", "tiny-random", "--threads", "1",
           "--no-progress"]
    return cmd, out, ("masprism-batch run <3 traces + FIFO *.json + /dev/zero link + 5 MB .jsonl.gz -> 5 GiB> "
                      "-o OUT --model tiny-random --threads 1")


def case_json_gz_bomb(work: Path, uncapped: bool) -> tuple[list[str], Path, str]:
    (work / "in").mkdir()
    _gzip_bomb(work / "in" / "bomb.json.gz", b'{"history": [{"role": "a", "content": "', 5 * 1024)
    out = work / "OUT"
    cmd = [*CLI, "ingest", str(work / "in"), "-o", str(out), "--no-progress"]
    return cmd, out, "masprism-batch ingest <5 MB .json.gz -> 5 GiB, one document> -o OUT"


def case_steps(work: Path, uncapped: bool, n: int) -> tuple[list[str], Path, str]:
    from bench_steps import write_trace  # the trace of its sibling benchmark (both run as files)

    write_trace(work / "trace.jsonl", n)
    conf = {k: dict(v) for k, v in EXTRA.items()}
    conf.setdefault("ingest", {})["max_steps"] = max(n, 1)
    (work / "config.json").write_text(json.dumps(conf))
    out = work / "OUT"
    cmd = [*CLI, "attribute", str(work / "trace.jsonl"), "-o", str(out), "--model", "tiny-random", "--threads", "1",
           "--config", str(work / "config.json")]
    return cmd, out, (f"masprism-batch attribute <1 trace, {n} steps of ~10 bytes> -o OUT --model tiny-random "
                      f"--threads 1 --config '{json.dumps(conf, sort_keys=True)}'")


def case_control(work: Path, uncapped: bool) -> tuple[list[str], Path, str]:
    return case_step_20mb(work, uncapped, big_bytes=0)


CASES = {"step-20mb": case_step_20mb, "step-20mb-control": case_control, "bombs-and-specials": case_bombs_and_specials,
         "json-gz-bomb": case_json_gz_bomb}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--uncapped", action="store_true", help="also run step-20mb with the caps raised (GBs)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--config-json", default="{}", help="config sections merged into the attribute cases' config")
    ap.add_argument("--label", default="", help="appended to each row's case as `case@label` (e.g. the commit of "
                    "older code run with PYTHONPATH pointing at a checkout of it)")
    args = ap.parse_args()
    EXTRA.update(json.loads(args.config_json))
    names = args.cases.split(",")
    plan = [(n, False) for n in names] + ([("step-20mb", True)] if args.uncapped and "step-20mb" in names else [])
    host = f"{cpu_name()} ({os.cpu_count()} cores)"
    rows = []
    for name, uncapped in plan:
        for r in range(args.repeats):
            work = Path(tempfile.mkdtemp(prefix="bench-caps-"))
            try:
                if name.startswith("steps-"):
                    cmd, out, shown = case_steps(work, uncapped, int(name.split("-", 1)[1]))
                else:
                    cmd, out, shown = CASES[name](work, uncapped)
                code, wall, rss = _run(cmd)
                row = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "host": host,
                       "cpus": os.cpu_count(), "python": platform.python_version(),
                       "case": name + ("-uncapped" if uncapped else "") + (f"@{args.label}" if args.label else ""),
                       "repeat": r, "exit_code": code,
                       "wall_s": round(wall, 2), "peak_rss_mb": round(rss, 1), **_counts(out),
                       "load_avg_1m": round(os.getloadavg()[0], 2), "command": shown}
                rows.append(row)
                print(json.dumps(row), flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    append_rows(RESULTS, rows, FIELDS)


if __name__ == "__main__":
    main()
