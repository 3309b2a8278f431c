import os
from pathlib import Path

import pytest

SHARED_DATA = Path(os.environ.get("MASPRISM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real labelled data not present at {SHARED_DATA} (set MASPRISM_SHARED_DATA)")
    return SHARED_DATA
