import hashlib
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch


def _import_hf_kernels_first() -> None:
    """transformers >= 5 depends on HF's `kernels` package and imports it while building a model; the repository
    root on sys.path (pytest's pythonpath ".", `python -m pytest`'s cwd) would hand it this project's top-level
    kernels/ folder instead ("cannot import name 'CUDAProperties' from 'kernels'"). Nothing of the project
    imports a top-level `kernels` (it is installed as masprism_batch.kernels), so HF's is imported once with the
    root off the path and stays in sys.modules."""
    import sys

    root = Path(__file__).resolve().parents[1]
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != root]
    try:
        import kernels  # noqa: F401  (HF's, where installed)
    except ImportError:  # not installed (older transformers): nothing can shadow it
        sys.modules.pop("kernels", None)
    finally:
        sys.path[:] = saved


_import_hf_kernels_first()

# fixtures of a helper module more than one folder uses: `synth` (synthetic labelled logs; tests/fit, tests/method)
pytest_plugins = ["fit_synth"]

SHARED_DATA = Path(os.environ.get("MASPRISM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
SEED_ENV = "MASPRISM_TEST_SEED"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real labelled data not present at {SHARED_DATA} (set MASPRISM_SHARED_DATA)")
    return SHARED_DATA


def pytest_configure(config):
    # One base per session, fresh unless given: every test's seed derives from it, and helpers and subprocesses
    # (the Triton interpreter runs, CLI children) read the same variable, so one number replays a whole run.
    if not os.environ.get(SEED_ENV):
        os.environ[SEED_ENV] = str(random.SystemRandom().randrange(2**31))


def derive_seed(key: str) -> int:
    """The seed of `key` (a test or a module) under this session's MASPRISM_TEST_SEED."""
    digest = hashlib.sha256(f"{os.environ[SEED_ENV]}:{key}".encode()).digest()
    return int.from_bytes(digest[:4], "little") >> 1


@pytest.fixture(autouse=True)
def seed(request) -> int:
    """Every test's seed, different per test and per run (fixed by MASPRISM_TEST_SEED); `random`, numpy and
    torch are seeded with it and a failing test's report names the value that replays it. Tests draw through
    `rng` / `np_rng` or hand `seed` on (torch generators, builders)."""
    s = derive_seed(f"{request.node.path.name}::{request.node.name}")  # the same under any rootdir
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)
    request.node.user_properties.append(("seed", s))
    return s


@pytest.fixture(scope="module")
def module_seed(request) -> int:
    """The seed of a module-scoped fixture's random inputs (a model built once for several tests)."""
    return derive_seed(request.node.path.name)


@pytest.fixture
def rng(seed) -> random.Random:
    return random.Random(seed)


@pytest.fixture
def np_rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    seeds = [v for k, v in item.user_properties if k == "seed"]
    if rep.failed:
        why = f" (this test's seed: {seeds[-1]})" if seeds else ""
        rep.sections.append(("seed", f"{SEED_ENV}={os.environ.get(SEED_ENV)} reproduces this run's random inputs{why}"))


def pytest_collection_modifyitems(config, items):
    # The markers follow from what a test needs, so a new test is marked without anyone remembering to:
    # `data` = reads ../shared/data (the shared_data fixture), `kernel` = a Triton backend case of an op test.
    for item in items:
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.data)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend") == "triton":
            item.add_marker(pytest.mark.kernel)


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


# fixtures more than one test folder uses

@pytest.fixture
def small_cfg():
    """A pipeline config sized for the fakes' corpora (tests/pipelines, tests/outdir)."""
    from masprism_batch.config import BatchConfig, EngineConfig, PipelineConfig

    def make(per_shard: int = 8, budget: int = 300, commit_seconds: float | None = None) -> PipelineConfig:
        # the budget bounds the packs too (engine.pack_tokens: else 2,048 on a CPU), as the tests size them
        engine = {"traces_per_shard": per_shard, "pack_tokens": budget} | (
            {} if commit_seconds is None else {"commit_seconds": commit_seconds})
        return PipelineConfig(batch=BatchConfig(token_budget=budget), engine=EngineConfig(**engine))

    return make


def _browser_skip_reason() -> str | None:
    import shutil

    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium not installed (pip install -e '.[dev]')"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "no chromium binary (Debian: apt-get install chromium chromium-driver; .ci/run does this)"
    if not shutil.which("chromedriver"):
        return "no chromedriver (Debian: apt-get install chromium-driver)"
    return None


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by selenium with the system chromedriver (no driver download)."""
    import shutil

    reason = _browser_skip_reason()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1600", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        drv = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)
    except Exception as exc:  # noqa: BLE001 - a broken local browser install is a skip, not a failure
        pytest.skip(f"headless chromium failed to start: {exc}")
    drv.set_page_load_timeout(30)
    yield drv
    drv.quit()
