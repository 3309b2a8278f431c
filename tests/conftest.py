import os
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("MASPRISM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real labelled data not present at {SHARED_DATA} (set MASPRISM_SHARED_DATA)")
    return SHARED_DATA


# Deselected tests are otherwise only a count in pytest's last line ("11 deselected"): name why (issue 35).
_DESELECTED: list = []


def pytest_deselected(items):
    _DESELECTED.extend(items)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _DESELECTED:
        return
    from collections import Counter

    markers = {m.split(":", 1)[0].strip(): m.split(":", 1)[1].strip() for m in config.getini("markers") if ":" in m}
    expr = config.getoption("markexpr") or ""
    named = {n for n in markers if n in expr.replace("(", " ").replace(")", " ").split()}  # what -m selects on
    why = Counter(next((m.name for m in item.iter_markers() if m.name in named), "-k / node selection")
                  for item in _DESELECTED)
    terminalreporter.section("deselected")
    for name, n in why.most_common():
        detail = f"marked {name}: {markers[name]}" if name in markers else "not matched by -k or the node ids given"
        terminalreporter.write_line(f"{n} deselected by -m {expr!r}: {detail}" if name in markers else
                                    f"{n} deselected: {detail}")
