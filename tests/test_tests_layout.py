"""tests/ mirrors the code: a test file sits in the folder named after the code it tests.

The rule: a room is what tests/test_layers.py calls one (a subpackage of masprism_batch, a module at the package
root, the installed `kernels` and `pipelines`) or `benchmarks`. A test file `tests/<folder>/test_*.py` imports
code of the room `<folder>` (`tests/config/` holds `config.py` and `config_checks.py`: a folder takes the rooms
`<folder>` and `<folder>_*`), itself, through a helper module of tests/ it imports, or in the code or paths it
hands a child process (`masprism_batch.<room>`, `benchmarks/...`, `<helper>.py` in a string). A test named after a
module of exactly one room (`test_<module>.py` or `test_<room>_<module>.py`) sits in that room's folder; an op's
tests (`test_<op>.py` for `kernels/<op>.py`) may also sit in tests/signals/, which runs every backend. End-to-end tests
(whole runs through the CLI) sit in tests/e2e/, and the top of tests/ holds only the tests of the tree as a whole
named in TREE_TESTS (docs, layering, this layout, the seed fixture). Helper modules (conftest.py and modules not
named test_*) are exempt: they serve the tests that import them.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PKG = "masprism_batch"
TREE_TESTS = {"test_architecture_doc.py", "test_layers.py", "test_readme.py", "test_seed_fixture.py",
              "test_tests_layout.py"}
OWN_FOLDERS = {"e2e"}  # end-to-end tests: whole runs through the CLI, whatever rooms they cross
_IN_STRING = re.compile(r"\bmasprism_batch[./](\w+)|(?<!tests/)\b(kernels|pipelines|benchmarks)/|\b(\w+)\.py\b")


def _rooms() -> dict[str, list[str]]:
    """room -> its module names (file stems)."""
    rooms: dict[str, list[str]] = {}
    for p in (ROOT / PKG).iterdir():
        if p.is_dir() and (p / "__init__.py").is_file():
            rooms[p.name] = [q.stem for q in p.rglob("*.py") if q.stem != "__init__"]
        elif p.suffix == ".py" and p.stem != "__init__":
            rooms[p.stem] = [p.stem]
    for top in ("kernels", "pipelines", "benchmarks"):
        rooms[top] = [q.stem for q in (ROOT / top).rglob("*.py") if q.stem != "__init__"]
    return rooms


def _helpers() -> dict[str, Path]:
    """Helper modules of tests/ by the name tests import them as."""
    return {p.stem: p for p in TESTS.rglob("*.py")
            if not p.name.startswith("test_") and p.name != "conftest.py" and "__pycache__" not in p.parts}


def _imported_rooms(path: Path, helpers: dict[str, Path], rooms: dict[str, list[str]], seen=None) -> set[str]:
    seen = seen if seen is not None else set()
    seen.add(path)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a child's code, a script's path
            for pkg_room, top, helper in _IN_STRING.findall(node.value):
                names.append(f"{PKG}.{pkg_room}" if pkg_room else top or helper)
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == PKG and len(parts) > 1 and parts[1] in rooms:
                out.add(parts[1])
            elif parts[0] in ("kernels", "pipelines", "benchmarks"):
                out.add(parts[0])
            elif len(parts) == 1 and name in helpers and helpers[name] not in seen:
                out |= _imported_rooms(helpers[name], helpers, rooms, seen)
    return out


def _misplaced() -> list[str]:
    rooms, helpers = _rooms(), _helpers()
    owner: dict[str, set[str]] = {}  # module stem -> the rooms holding a module of that name
    for room, stems in rooms.items():
        for stem in stems:
            owner.setdefault(stem, set()).add(room)
            owner.setdefault(f"{room}_{stem}", set()).add(room)
    ops = set(rooms["kernels"])
    bad = []
    for path in sorted(TESTS.rglob("test_*.py")):
        rel = path.relative_to(TESTS)
        if len(rel.parts) == 1:
            if rel.name not in TREE_TESTS:
                bad.append(f"{rel}: a test at the top of tests/ is not a test of the whole tree (TREE_TESTS)")
            continue
        folder = rel.parts[0]
        if folder in OWN_FOLDERS:
            continue
        covered = {r for r in rooms if r == folder or r.startswith(f"{folder}_")}
        if not covered:
            bad.append(f"{rel}: tests/{folder}/ is named after no room of the code")
            continue
        if not _imported_rooms(path, helpers, rooms) & covered:
            bad.append(f"{rel}: imports nothing of {sorted(covered)}, the code its folder is named after")
        stem = path.stem.removeprefix("test_")
        named = owner.get(stem, set())
        if len(named) == 1 and not named & covered and not (stem in ops and folder == "signals"):
            bad.append(f"{rel}: named after a module of {named.pop()}/, so it belongs in tests/ of that room")
    return bad


def test_every_test_file_sits_in_the_folder_of_the_code_it_tests():
    bad = _misplaced()
    assert not bad, "test files outside the folder of the code they test:\n" + "\n".join(bad)


def test_the_rule_sees_a_misplaced_file(tmp_path, monkeypatch):
    """The check itself: a verdict test in tests/method/ and a render test at the top of tests/ are both named."""
    fake = tmp_path / "tests"
    (fake / "method").mkdir(parents=True)
    (fake / "method" / "test_rankfile.py").write_text("from masprism_batch.method import ranker\n")
    (fake / "test_windows.py").write_text("from masprism_batch.render import windows\n")
    (fake / "render").mkdir()
    (fake / "render" / "test_batching.py").write_text("from masprism_batch.config import load_config\n")
    monkeypatch.setitem(globals(), "TESTS", fake)
    bad = _misplaced()
    assert any(b.startswith("method/test_rankfile.py: named after a module of verdict/") for b in bad), bad
    assert any(b.startswith("test_windows.py: a test at the top") for b in bad), bad
    assert any(b.startswith("render/test_batching.py: imports nothing of ['render']") for b in bad), bad
