"""The package's rooms import each other in one direction only, drawn from the code's own imports.

A room is a subpackage of masprism_batch (`render`, `stage`, `fit`, ... and the installed `kernels`, `pipelines`)
or a module at the package root (`config`, `schema`, ...). An arrow is any import of one room by another,
including imports inside functions (they are dependencies too, only deferred). The rooms must form no circle, so
the layout reads as the data path (docs/architecture.md), and the number of arrows stays below the 92 counted
before the package was grouped by stage, so a new dependency between rooms is a decision, not a drift.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "masprism_batch"
MAX_ARROWS = 92


def _files() -> dict[str, Path]:
    """module name -> file, with kernels/ and pipelines/ under the names they are installed as."""
    out = {}
    for base, prefix in ((ROOT / PKG, PKG), (ROOT / "kernels", f"{PKG}.kernels"), (ROOT / "pipelines", f"{PKG}.pipelines")):
        for p in base.rglob("*.py"):
            if "__pycache__" in p.parts or (base == ROOT / PKG and p.relative_to(base).parts[0] in ("kernels", "pipelines")):
                continue
            parts = list(p.relative_to(base).with_suffix("").parts)
            out[".".join([prefix, *parts[:-1]] + ([] if parts[-1] == "__init__" else [parts[-1]]))] = p
    return out


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == PKG and len(parts) > 1 else None


def _arrows() -> set[tuple[str, str]]:
    arrows = set()
    files = _files()
    for mod, path in files.items():
        src = _room(mod)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from masprism_batch import x`: an arrow only when x is a module (not __version__)
                targets = [node.module] if node.module != PKG else [
                    f"{PKG}.{a.name}" for a in node.names if f"{PKG}.{a.name}" in files]
            for t in targets:
                dst = _room(t)
                if src and dst and dst != src and dst != "_C":
                    arrows.add((src, dst))
    return arrows


def _circle(arrows: set[tuple[str, str]]) -> list[str] | None:
    graph: dict[str, set[str]] = {}
    for a, b in arrows:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        state[n] = 2
        path.pop()
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_relative_imports_and_every_room_is_found():
    rooms = {_room(m) for m in _files()}
    assert {"render", "stage", "verdict", "fit", "outdir", "method", "model", "kernels", "pipelines"} <= rooms
    relative = [str(p.relative_to(ROOT)) for p in _files().values()
                if any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(ast.parse(p.read_text())))]
    assert not relative, f"relative imports (use the absolute name): {relative}"


def test_rooms_import_in_one_direction():
    arrows = _arrows()
    circle = _circle(arrows)
    assert circle is None, f"rooms import each other in a circle: {' -> '.join(circle)}"
    assert len(arrows) < MAX_ARROWS, f"{len(arrows)} arrows between rooms: {sorted(arrows)}"


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, functions' imports included."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


# the one command that fits offline; every other module is on the run path or reads its outputs
FIT_COMMAND = f"{PKG}.cli.fit"


def test_no_run_path_module_imports_fit():
    """`fit/` is an offline leaf (issue 50): it writes ranker files and may read the verdict package; the run
    (pipelines, stages, the verdict, the commands that attribute) never imports it, so what decides a verdict
    at run time is all in `verdict/`."""
    fit = f"{PKG}.fit"
    importers = sorted(mod for mod, path in _files().items()
                       if _room(mod) != "fit" and any(t == fit or t.startswith(fit + ".") for t in _imports(path)))
    assert importers == [FIT_COMMAND], importers


def test_the_check_finds_a_circle():
    assert _circle({("render", "method"), ("method", "stage"), ("stage", "render")}) is not None
    assert _circle({("stage", "render"), ("stage", "method"), ("method", "render")}) is None
