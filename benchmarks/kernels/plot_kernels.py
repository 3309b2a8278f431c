"""Plots of the kernel benchmarks: CPU time and peak memory vs T per impl (log-log), one PNG per CSV,
plus the memory slope of the signal path (least squares on the @4L prefill rows).

    pip install -e '.[bench]'
    python benchmarks/kernels/plot_kernels.py            # reads benchmarks/results/{step_attention,token_nll,prefill}.csv
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"


def load(path: Path) -> list[dict]:
    with path.open() as f:
        return [r for r in csv.DictReader(f) if r["status"] == "ok"]


def memory_slope(rows: list[dict], model: str, impl: str) -> tuple[float, float] | None:
    """Least-squares line peak_bytes = a + b * T; returns (b in bytes/token, a in bytes)."""
    pts = [(int(r["T"]), int(r["peak_mem_bytes"])) for r in rows if r["model"] == model and r["impl"] == impl]
    if len(pts) < 2:
        return None
    n = len(pts)
    mx, my = sum(t for t, _ in pts) / n, sum(m for _, m in pts) / n
    b = sum((t - mx) * (m - my) for t, m in pts) / sum((t - mx) ** 2 for t, _ in pts)
    return b, my - b * mx


def gemm_rates(path: Path) -> dict[str, float]:
    """Best fp32 GEMM rate (GFLOP/s) per hardware from the gemm_peak rows of a CSV."""
    best: dict[str, float] = {}
    for r in load(path):
        if r["op"] == "gemm_peak":
            rate = 2 * int(r["T"]) ** 3 / float(r["cpu_s"]) / 1e9
            best[r["hardware"]] = max(rate, best.get(r["hardware"], 0.0))
    return best


def _date_span(rows: list[dict]) -> str:
    dates = sorted({r["date"] for r in rows})
    return " .. ".join(dict.fromkeys([dates[0], dates[-1]]))


def markdown(path: Path) -> str:
    """Markdown tables of one CSV, one per hardware: rows (model, T), columns impl = 'CPU s / peak MiB' (or
    'not run' / 'failed'). Rows of different hardware labels are never mixed in one table."""
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r["op"] != "gemm_peak"]
    out, rates = [], gemm_rates(path)
    for hw in dict.fromkeys(r["hardware"] for r in rows):
        sub = [r for r in rows if r["hardware"] == hw]
        impls = list(dict.fromkeys(r["impl"] for r in sub))
        cells: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
        for r in sub:  # a later row of the same (model, T, impl) replaces an earlier one
            if r["status"] == "ok":
                cell = f"{float(r['cpu_s']):.3g} s / {int(r['peak_mem_bytes']) / 2**20:.0f} MiB"
            else:
                cell = "not run" if r["status"].startswith("skipped") else "failed"
            cells[(r["model"], int(r["T"]))][r["impl"]] = cell
        out.append(f"{hw}, {_date_span(sub)}:")
        if hw in rates:  # the ceiling every time in the table is to be read against
            out.append(f"fp32 GEMM peak {rates[hw]:.1f} GFLOP/s (1 thread, best n x n x n mm of bench_prefill --gemm-peak)")
        out += ["",
                "| model | T | " + " | ".join(impls) + " |", "|---|---:|" + "---|" * len(impls)]
        for (model, T), c in sorted(cells.items()):
            out.append(f"| {model} | {T} | " + " | ".join(c.get(i, "") for i in impls) + " |")
        out.append("")
    return "\n".join(out)


def plot(path: Path, out: Path, host: str | None = None) -> None:
    """One figure per CSV for ONE host (times of different hosts are not comparable): the host whose
    `hardware` label contains `host`, else the host of the CSV's last row (the latest run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in load(path) if r["op"] != "gemm_peak" and r["status"] == "ok"]
    if not rows:
        return
    hw = next((r["hardware"] for r in reversed(rows) if host is None or host in r["hardware"]), None)
    if hw is None:
        raise SystemExit(f"{path.name}: no rows whose hardware contains {host!r}")
    rows = [r for r in rows if r["hardware"] == hw]
    points: dict[tuple[str, str], dict[int, tuple]] = defaultdict(dict)
    for r in rows:  # a later row of the same (model, impl, T) replaces an earlier one, as in markdown()
        points[(r["model"], r["impl"])][int(r["T"])] = (
            int(r["T"]), float(r["cpu_s"]), int(r["peak_mem_bytes"]) / 2**20)
    series = {k: list(v.values()) for k, v in points.items()}
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (model, impl), pts in sorted(series.items()):
        pts.sort()
        T = [p[0] for p in pts]
        ax_t.plot(T, [p[1] for p in pts], marker="o", label=f"{model} {impl}")
        ax_m.plot(T, [p[2] for p in pts], marker="o", label=f"{model} {impl}")
    for ax, ylabel in ((ax_t, "CPU time per call (s)"), (ax_m, "peak RSS increase (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens T")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    ax_m.legend(fontsize=7)
    fig.suptitle(f"{path.stem}: {hw}, 1 thread, torch {rows[-1]['torch']}, {_date_span(rows)}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--markdown", action="store_true", help="print the docs/benchmarks.md tables instead of plotting")
    ap.add_argument("--host", help="plot the rows of the host whose hardware label contains this (default: "
                    "the host of each CSV's last row)")
    args = ap.parse_args()
    if args.markdown:
        for name in ("step_attention", "token_nll", "prefill"):
            if (args.results / f"{name}.csv").exists():
                print(f"\n{name}\n\n{markdown(args.results / f'{name}.csv')}")
        return
    for name in ("step_attention", "token_nll", "prefill"):
        path = args.results / f"{name}.csv"
        if path.exists():
            plot(path, args.results / f"{name}.png", args.host)
    prefill = args.results / "prefill.csv"
    if prefill.exists():
        fit = memory_slope(load(prefill), "smollm2-135m@4L", "signals_cpp")
        if fit:
            print(f"signal path peak memory ~ {fit[1] / 2**20:.1f} MiB + {fit[0] / 1024:.2f} KiB/token "
                  "(smollm2-135m@4L, signals_cpp, least squares over T)")


if __name__ == "__main__":
    main()
