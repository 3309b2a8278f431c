"""Shared harness of the kernel benchmarks (bench_step_attention, bench_token_nll, bench_prefill).

Each case runs in a fresh subprocess (`--worker JSON`) so that peak memory is the case's own: the worker
builds its inputs, resets the kernel's peak-RSS counter (/proc/self/clear_refs = 5), runs the case and
reports peak RSS minus the RSS before the call. glibc's mmap threshold is pinned (MALLOC_MMAP_THRESHOLD_)
so large buffers are returned to the OS when freed and repeated calls measure the same thing.
Rows are tidy (one measurement per row) and appended to benchmarks/results/<name>.csv (benchmarks/rows.py).
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.rows import append_rows, commit, hardware, torch_version

# (Hq, Hk, D, hidden, vocab, layers) of the two models the issue names (random weights are enough)
MODELS = {
    "smollm2-135m": dict(hq=9, hk=3, d=64, hidden=576, vocab=49152, layers=30),
    "qwen3-0.6b": dict(hq=16, hk=8, d=128, hidden=1024, vocab=151936, layers=28),
}


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def mem_total() -> int:
    """This machine's RAM in bytes (16 GiB where /proc/meminfo does not say)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 16 * 2**30


def measure(fn, repeats: int, warmup: bool) -> dict:
    """Wall and CPU time of fn() (median/min over repeats) and peak RSS increase (bytes) of one call."""
    if warmup:
        fn()
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM (peak RSS) to the current RSS
    base = rss_kib("VmRSS")
    walls, cpus = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    peak = rss_kib("VmHWM")
    return dict(time_s=statistics.median(walls), time_min_s=min(walls), cpu_s=statistics.median(cpus),
                peak_mem_bytes=max(0, peak - base) * 1024)


def run_cases(script: str, cases: list[dict], out_csv: Path, timeout: float = 1800) -> list[dict]:
    """Run each case in a subprocess of `script --worker`, append tidy rows to out_csv, return them.

    A case names several impls (`impls`); the worker measures them one after the other (memory is
    re-baselined before each) and prints a JSON list with one result per impl. `skips` maps an impl
    to the reason it is not run (a row is still written, so the table shows the gap).
    """
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", TOKENIZERS_PARALLELISM="false")
    meta = dict(hardware=hardware(), date=dt.date.today().isoformat(), torch=torch_version(), commit=commit())
    rows = []
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    try:
        from tqdm import tqdm
    except ImportError:  # progress is optional
        def tqdm(x, **_):
            return x
    for case in tqdm(cases, desc=Path(script).stem, unit="case"):
        skips = case.pop("skips", {})
        todo = [i for i in case["impls"] if i not in skips]
        base = {k: v for k, v in case.items() if k != "impls"}
        results = {i: {"status": "skipped: " + r} for i, r in skips.items()}
        if todo:
            t0 = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, script, "--worker", json.dumps({**base, "impls": todo})],
                                      env=env, capture_output=True, text=True, timeout=timeout)
                last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
                if proc.returncode == 0 and last.startswith("["):
                    for impl, res in zip(todo, json.loads(last), strict=True):
                        results[impl] = {**res, "status": "ok"}
                else:
                    err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                    results.update({i: {"status": f"failed rc={proc.returncode}: {err[:200]}"} for i in todo})
            except subprocess.TimeoutExpired:
                results.update({i: {"status": f"timeout after {time.perf_counter() - t0:.0f}s"} for i in todo})
        for impl in case["impls"]:
            rows.append({**base, "impl": impl, **results[impl], **meta})
            append_rows(out_csv, rows[-1:], FIELDS, extra="ignore")
    return rows


def worker_main(case: dict, fns: dict) -> None:
    """Measure case['impls'] in order, print one JSON list (the last stdout line is what the parent reads)."""
    out = []
    for impl in case["impls"]:
        out.append(measure(fns[impl], case["repeats"], warmup=case.get("warmup", True)))
        gc.collect()
    print(json.dumps(out))


FIELDS = ["bench", "op", "impl", "model", "T", "threads", "repeats", "time_s", "time_min_s", "cpu_s",
          "peak_mem_bytes", "status", "hardware", "date", "torch", "commit"]


def print_table(rows: list[dict], keys=("op", "model", "T", "impl")) -> None:
    print(f"{'op':<16}{'model':<14}{'T':>7} {'impl':<8}{'time_s':>9}{'cpu_s':>9}{'peak_MiB':>10}  status")
    for r in rows:
        t = f"{float(r['time_s']):9.3f}" if r.get("time_s") not in (None, "") else f"{'-':>9}"
        c = f"{float(r['cpu_s']):9.3f}" if r.get("cpu_s") not in (None, "") else f"{'-':>9}"
        m = f"{int(r['peak_mem_bytes']) / 2**20:10.1f}" if r.get("peak_mem_bytes") not in (None, "") else f"{'-':>10}"
        print(f"{r['op']:<16}{r['model']:<14}{r['T']:>7} {r['impl']:<8}{t}{c}{m}  {r['status']}")
