
import pytest


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
