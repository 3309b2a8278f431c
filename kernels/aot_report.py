"""What the ahead-of-time compile found (`kernels/aot.py`): the problem check a CI run fails on, and the tables
of shared memory, registers and spills per kernel, target and dtype (docs/gpu.md quotes the compact one)."""

from __future__ import annotations


def problems(row: dict) -> list[str]:
    """What makes a compiled row unfit for its target (empty = fine)."""
    if "error" in row:
        return [f"does not compile: {row['error'][:400]}"]
    out = []
    if row["shared"] > row["smem_limit"]:
        out.append(f"shared memory {row['shared']:,} B > {row['target']} limit {row['smem_limit']:,} B")
    if row["dtype"] != "fp32" and row["spill"] > 0:
        out.append(f"{row['spill']} B of register spills in {row['dtype']}")
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| kernel | variant | target | dtype | blocks (constexpr) | warps/stages | shared mem (B) | regs | spill (B) |",
             "|---|---|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kernel']} | {r['label']} | {r['target']} | {r['dtype']} | | | error | | |")
            continue
        lines.append(f"| {r['kernel']} | {r['label']} | {r['target']} | {r['dtype']} | "
                     f"{','.join(str(v) for v in r['blocks'].values())} | {r['num_warps']}/{r['num_stages']} | "
                     f"{r['shared']:,} | {r['regs']} | {r['spill']} |")
    return "\n".join(lines)


def compact_markdown(rows: list[dict], order: list[str]) -> str:
    """One line per kernel variant: shared memory (B) / registers / spill (B) per target x {bf16, fp32}
    (fp16 is reported where it differs from bf16); kernels in `order` (aot.KERNELS)."""
    by = {(r["kernel"], r["label"], r["target"], r["dtype"]): r for r in rows if "error" not in r}
    cols = [("sm_80", "bf16"), ("sm_90", "bf16"), ("sm_80", "fp32"), ("sm_90", "fp32")]
    keys = sorted({(k, lab) for k, lab, _, _ in by}, key=lambda x: (order.index(x[0]), x[1]))
    lines = ["| kernel | shapes | bf16 tiles (constexpr), warps/stages sm_80 · sm_90 | sm_80 bf16 | sm_90 bf16 | "
             "sm_80 fp32 | sm_90 fp32 |", "|---|---|---|---:|---:|---:|---:|"]
    diff16 = []
    for k, lab in keys:
        cells = []
        for t, d in cols:
            r = by.get((k, lab, t, d))
            cells.append(f"{r['shared']:,} / {r['regs']} / {r['spill']}" if r else "")
            h = by.get((k, lab, t, "fp16"))
            if d == "bf16" and r and h and (h["shared"], h["regs"], h["spill"]) != (r["shared"], r["regs"], r["spill"]):
                diff16.append(f"{k} {lab} {t} fp16: {h['shared']:,} / {h['regs']} / {h['spill']}")
        b80, b90 = by.get((k, lab, "sm_80", "bf16")), by.get((k, lab, "sm_90", "bf16"))
        cfg = (f"{','.join(str(v) for v in b80['blocks'].values())}; {b80['num_warps']}/{b80['num_stages']} · "
               f"{b90['num_warps']}/{b90['num_stages']}") if b80 and b90 else ""
        lines.append(f"| `{k}` | {lab} | {cfg} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("fp16: " + ("; ".join(diff16) if diff16 else "identical to bf16 in every row."))
    return "\n".join(lines)
