"""The one way a speed benchmark writes its rows: tidy (one measurement per row), appended to
`benchmarks/results/<name>.csv`, each row naming the code (`commit`), the day (`date`) and the machine it ran on.

Every result file keeps the columns it was started with (docs and tests read them), so `append_rows` writes a
file's own header order and refuses a row with a column the file does not have, rather than shifting values under
the wrong heading.
"""

from __future__ import annotations

import csv
import os
import platform
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def append_rows(path: Path, rows: list[dict], fields: list[str] | None = None, extra: str = "raise") -> None:
    """Append `rows` to the CSV at `path` (header written once, from `fields` or the first row's keys).

    `extra="ignore"` drops keys that are not columns (rows that carry their case's inputs); by default such a key
    is an error. An existing file's header and line ends win over `fields`, so appended rows line up."""
    path = Path(path)
    if not rows:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    header, end = None, "\r\n"
    if path.exists() and path.stat().st_size:
        with path.open(newline="", encoding="utf-8") as f:
            first = f.readline()
        header = next(csv.reader([first]))
        end = "\r\n" if first.endswith("\r\n") else "\n"
    cols = header or list(fields or rows[0])
    with path.open("a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction=extra, lineterminator=end)
        if header is None:
            w.writeheader()
        w.writerows(rows)


def commit(cwd: Path | None = None) -> str:
    """Short hash of HEAD (of the checkout at `cwd`, default this one); empty outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=cwd or Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def torch_version() -> str:
    try:
        import torch

        return torch.__version__
    except ImportError:
        return "?"


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware() -> str:
    """CPU label of a row: model name, family/model, vCPUs, machine and torch's vector ISA."""
    # Hosts of one pool can share a bare "AMD EPYC" model name yet differ 2.8x in fp32 GEMM rate
    # (measured on two "AVX2" hosts), so the CPU family/model is part of the label.
    ident: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model") and key not in ident:
                ident[key] = val.strip()
            if len(ident) == 3:
                break
    except OSError:
        pass
    name = ident.get("model name", "unknown CPU")
    fam = f"family {ident['cpu family']} model {ident['model']}, " if "cpu family" in ident and "model" in ident else ""
    # the vector ISA torch dispatches to decides GEMM speed (AVX2 vs AVX512 hosts share a model name)
    try:
        import torch

        isa = ", " + torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - old torch or no torch: the label just lacks the ISA
        isa = ""
    return f"{name} ({fam}{os.cpu_count()} vCPU, {platform.machine()}{isa})"


def write_rows(path: Path, rows: list[dict]) -> None:
    """Write `rows` as the whole CSV at `path` (a table regenerated each run, not a log of runs: append_rows)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
