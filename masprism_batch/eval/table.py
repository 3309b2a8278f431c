"""Readable tables of evaluation results: per subset, the method's row and its baselines beneath it. Names read
from the logs (subsets, sources, reasons) reach the terminal through schema.terminal, as every command's do."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table

from masprism_batch.schema import terminal

WNW_COLUMNS = [("step_top1", "step@1"), ("step_top3", "step@3"), ("step_within1", "step±1"), ("agent", "agent")]


def _columns(res: dict[str, Any]) -> list[tuple[str, str]]:
    if res["dataset"] == "trail":
        cols = []
        for k in res.get("ks", [1, 5]):
            cols += [(f"location_acc@{k}", f"loc@{k}"), (f"precision@{k}", f"prec@{k}"), (f"n_pred@{k}", f"#pred@{k}")]
        return cols
    return WNW_COLUMNS


def _fmt(key: str, v: Any) -> str:
    if v is None:
        return "–"
    if key.startswith("n_pred"):
        return f"{v:.2f}"
    if key.startswith(("location_acc", "precision")):
        return f"{v:.3f}"
    return f"{100 * v:.1f}%"


def tables(result: dict[str, Any]) -> list[Table]:
    out = []
    for res in result.get("datasets", [result] if "dataset" in result else []):
        cols = _columns(res)
        t = Table(title=f"{terminal(res['dataset'])} (exact match)", title_justify="left")
        t.add_column("subset")
        t.add_column("predictor")
        t.add_column("n", justify="right")
        for _, label in cols:
            t.add_column(label, justify="right")
        for name, m in res["subsets"].items():
            missing = f" ({m['n_missing']} missing)" if m.get("n_missing") else ""
            t.add_row(terminal(name), "method", f"{m['n']}{missing}", *[_fmt(k, m.get(k)) for k, _ in cols], style="bold")
            for bname, b in res["baselines"].get(name, {}).items():
                t.add_row("", terminal(bname), str(b["n"]), *[_fmt(k, b.get(k)) for k, _ in cols], style="dim")
            t.add_section()
        notes = [f"{n} {terminal(reason)}" for reason, n in sorted(res.get("excluded", {}).items()) if n]
        if notes:
            t.caption = "excluded traces: " + ", ".join(notes)
        out.append(t)
    return out


def format_tables(result: dict[str, Any], width: int = 120) -> str:
    """Plain text of the tables (for logs and files); the CLI may print `tables()` directly instead."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, record=False, color_system=None)
    for t in tables(result):
        console.print(t)
    uns = result.get("unscored") or {}
    if uns.get("rows_without_trace") or uns.get("sources_without_scoring"):
        console.print(f"not scored: {uns.get('rows_without_trace', 0)} rows without a trace; "
                      f"sources without labels/scoring: {terminal(uns.get('sources_without_scoring') or {})}")
    return buf.getvalue()
