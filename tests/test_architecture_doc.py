"""docs/architecture.md stays true to the tree: every module under masprism_batch/, kernels/ and pipelines/ is
named there (by its path from the repository root; a package's __init__.py by its folder), and every module
path it names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("masprism_batch", "kernels", "pipelines")


def _modules() -> list[Path]:
    return sorted(p.relative_to(ROOT) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                  if "__pycache__" not in p.parts)


def test_every_module_is_named_in_the_architecture_doc():
    text = DOC.read_text(encoding="utf-8")
    missing = []
    for rel in _modules():
        name = f"{rel.parent.as_posix()}/" if rel.name == "__init__.py" else rel.as_posix()
        if f"`{name}`" not in text and f"`{name} " not in text:
            missing.append(name)
    assert not missing, f"modules not named in docs/architecture.md: {missing}"


def test_every_module_the_doc_names_exists():
    text = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:masprism_batch|kernels|pipelines)/[\w/]*?\.py)", text))
    assert named, "the doc names no module"
    gone = sorted(n for n in named if not (ROOT / n).is_file())
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
