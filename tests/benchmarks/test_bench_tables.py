"""benchmarks/kernels/plot_kernels.py turns result rows into the figures of docs/benchmarks.md: the tables, the memory slope and
the GEMM ceiling. A wrong table is a wrong claim, so these are checked on rows with random values."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks.kernels import kernel_benchlib, plot_kernels


def _row(rng, **kw):
    r = {f: "" for f in kernel_benchlib.FIELDS}
    r.update(bench="prefill", op="prefill", threads=1, repeats=1, status="ok", date="2026-11-23", torch="x",
             commit="c", time_s=rng.uniform(1, 9), time_min_s=1.0)
    r.update(kw)
    return r


def _write(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=kernel_benchlib.FIELDS)
        w.writeheader()
        w.writerows(rows)


def test_markdown_splits_hosts_later_rows_win_and_gemm_rate(tmp_path, rng):
    a, b = "Host (AVX2)", "Host (AVX512)"
    old, new = rng.uniform(10, 20), rng.uniform(30, 40)
    mem = rng.randrange(2**20, 2**30)
    n, gemm_s = 1024, rng.uniform(0.05, 0.1)
    rows = [
        _row(rng, impl="sdpa", model="m", T=1024, cpu_s=old, peak_mem_bytes=mem, hardware=a),
        _row(rng, impl="eager", model="m", T=1024, cpu_s="", peak_mem_bytes="", hardware=a, status="skipped: big"),
        _row(rng, impl="sdpa", model="m", T=1024, cpu_s=rng.uniform(1, 2), peak_mem_bytes=mem, hardware=b),
        _row(rng, impl="sdpa", model="m", T=1024, cpu_s=new, peak_mem_bytes=mem, hardware=a),
        _row(rng, op="gemm_peak", impl="gemm", model="fp32-square", T=n, cpu_s=gemm_s, peak_mem_bytes=1, hardware=a),
    ]
    _write(tmp_path / "p.csv", rows)
    md = plot_kernels.markdown(tmp_path / "p.csv")
    tables = md.split("\n\n")
    host_a = next(t for t in tables if t.startswith("| model") and f"{new:.3g} s" in t)
    assert f"{old:.3g} s" not in md  # replaced by the later row of the same host, model, T, impl
    assert f"| m | 1024 | {new:.3g} s / {mem / 2**20:.0f} MiB | not run |" in host_a
    assert md.count("| model | T |") == 2  # one table per host: ISAs never share a table
    assert "gemm" not in host_a
    rate = 2 * n**3 / gemm_s / 1e9
    assert f"{a}, " in md.split(f"GEMM peak {rate:.1f} GFLOP/s")[0].rsplit("\n", 2)[-2]  # under its own host
    assert md.count("GEMM peak") == 1  # host b has no gemm rows, so no ceiling line
    assert plot_kernels.gemm_rates(tmp_path / "p.csv") == {a: pytest.approx(2 * n**3 / gemm_s / 1e9)}


def test_memory_slope_recovers_a_line(tmp_path, rng):
    slope, base = rng.uniform(1e4, 1e5), rng.uniform(1e7, 1e8)
    Ts = [1024, 2048, 4096, 8192, 16384]
    rows = [dict(model="m", impl="signals_cpp", T=str(T), peak_mem_bytes=str(round(base + slope * T))) for T in Ts]
    rows.append(dict(model="other", impl="signals_cpp", T="1024", peak_mem_bytes=str(10**12)))
    b, a = plot_kernels.memory_slope(rows, "m", "signals_cpp")
    assert b == pytest.approx(slope, rel=1e-6) and a == pytest.approx(base, rel=1e-4)
    assert plot_kernels.memory_slope(rows, "other", "signals_cpp") is None  # one point gives no line


def test_hardware_label_names_the_cpu_family_where_cpuinfo_has_it():
    # two hosts both called "AMD EPYC ... AVX2" differed 2.8x in GEMM rate: only family/model told them apart
    label = kernel_benchlib.hardware()
    assert label.endswith(")") and "vCPU" in label
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo on this OS: the label cannot carry a CPU family")
    fam = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("cpu family")), None)
    if fam is None:
        pytest.skip("this CPU's /proc/cpuinfo has no 'cpu family' line (non-x86)")
    assert f"(family {fam} model " in label
