"""End to end: `streamlit run app/main.py` on a free local port (with the repository's
.streamlit/config.toml: no Deploy button), every page opened in headless Chromium, a
screenshot of each under the test's tmp_path, no error on any page and no "missing
ScriptRunContext" in the server log; the What-if scenario downloaded as YAML, a quick sizing
run end to end, the Search results folder switched; and a long What-if run stopped from the
browser."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app" / "main.py"
STREAMLIT = Path(sys.executable).parent / "streamlit"
START_TIMEOUT_S = 60.0
RUN_TIMEOUT_MS = 120_000
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
SKELETONS = '[data-testid^="stSkeleton"], [data-testid="stAppSkeleton"]'
LOADED = f"() => !document.querySelector('{SKELETONS}')"

pytestmark = pytest.mark.slow


def chromium() -> str | None:
    found = shutil.which("chromium")
    if found:
        return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The dashboard served on 127.0.0.1; its output goes to tmp_path/server.log."""
    if not STREAMLIT.is_file():
        pytest.skip(f"streamlit is not installed in {STREAMLIT.parent} (the app extra)")
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    env = {**os.environ, "PLAN_DASHBOARD_CACHE": str(tmp_path / "runs")}
    proc = subprocess.Popen(
        [str(STREAMLIT), "run", str(APP), "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port),
         "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(
                    f"streamlit did not come up on {url}:\n"
                    + (tmp_path / "server.log").read_text()[-3000:]
                )
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    executable = chromium()
    if executable is None:
        pytest.skip(
            "no chromium at `which chromium` or /usr/bin/chromium (apt-get install chromium)"
        )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1800})
            yield page
        finally:
            browser.close()


def settle(page: Any, expect: str) -> None:
    """Wait until ``expect`` shows, the script is not running any more and every element
    has loaded (Streamlit draws a skeleton while an element's code loads)."""
    page.get_by_text(expect).first.wait_for(timeout=RUN_TIMEOUT_MS)
    page.wait_for_selector(IDLE, timeout=RUN_TIMEOUT_MS)
    page.wait_for_function(LOADED, timeout=RUN_TIMEOUT_MS)
    page.wait_for_timeout(500)  # charts finish drawing


def check(page: Any, name: str, shots: Path) -> None:
    page.screenshot(path=shots / f"{name}.png", full_page=True)
    text = page.inner_text("body")
    assert page.locator('[data-testid="stException"]').count() == 0, f"{name}: {text[:2000]}"
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0, f"{name}: {text}"
    assert "Traceback" not in text, f"{name}: {text[:2000]}"
    assert "Error" not in text, f"{name}: {text[:2000]}"
    # .streamlit/config.toml: client.toolbarMode = "minimal"
    assert page.locator('[data-testid="stAppDeployButton"]').count() == 0, name


# a widget changed while the page still reruns from the previous change can be drawn again
# and lose the change: each helper checks that it took, and does it again if not
TRIES = 3


def choose(page: Any, key: str, option: str) -> None:
    """Pick ``option`` in the selectbox or multiselect keyed ``key``."""
    for _ in range(TRIES):
        page.wait_for_selector(IDLE, timeout=RUN_TIMEOUT_MS)
        box_input = page.locator(f".st-key-{key} input")
        box_input.click()
        # the dropdown draws only the options in view: type to filter, so a long list (every
        # card, every device) still shows the wanted one
        box_input.fill(option)
        page.get_by_role("option", name=option, exact=True).first.click()
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)
        page.wait_for_selector(IDLE, timeout=RUN_TIMEOUT_MS)
        box = page.locator(f".st-key-{key}")
        if option in box.inner_text() + box.locator("input").first.input_value():
            return
    raise AssertionError(f"{key}: {option!r} was not chosen after {TRIES} tries")


def _same(shown: str, value: str) -> bool:
    """A field shows ``value`` (a number input shows ``20`` as ``20.00``)."""
    try:
        return float(shown.replace(",", "")) == float(value)
    except ValueError:
        return shown == value


def fill(page: Any, key: str, value: str) -> None:
    for _ in range(TRIES):
        page.wait_for_selector(IDLE, timeout=RUN_TIMEOUT_MS)
        field = page.locator(f".st-key-{key} input")
        field.fill(value)
        field.press("Enter")
        page.wait_for_timeout(300)
        page.wait_for_selector(IDLE, timeout=RUN_TIMEOUT_MS)
        if _same(field.input_value(), value):
            return
    raise AssertionError(f"{key}: {value!r} was not taken after {TRIES} tries")


def test_every_page_in_chromium(server: str, browser_page: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from simulator.cli import app as plan
    from simulator.specs import Scenario
    from simulator.specs.loading import parse

    page = browser_page
    shots = tmp_path / "screenshots"
    shots.mkdir()
    # a small search output for the Search results page, and a second folder with its own
    # space (another SLO)
    out = tmp_path / "search"
    space = ROOT / "tests" / "app" / "tiny_search.yaml"
    result = CliRunner().invoke(plan, ["search", str(space), "--out", str(out)])
    assert result.exit_code == 0, result.output
    other = tmp_path / "other"
    shutil.copytree(out, other)
    data = yaml.safe_load((other / "space.yaml").read_text())
    (other / "space.yaml").write_text(yaml.safe_dump({**data, "slo": {"ttft_s_p90": 9.0}}))

    page.goto(server)  # What-if is the default page
    settle(page, "Throughput (tok/s/GPU)")
    check(page, "what-if", shots)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download scenario YAML").click()
    exported = Path(download.value.path()).read_text()
    scenario = parse(Scenario, yaml.safe_load(exported), download.value.suggested_filename)
    assert (scenario.model, scenario.device, scenario.serving.tp) == ("kimi-k3", "mi355x", 8)

    page.goto(f"{server}/memory")
    settle(page, "Fits on (model alone)")
    check(page, "memory", shots)

    page.goto(f"{server}/compare")
    settle(page, "Press Compare")
    page.get_by_role("button", name="Compare", exact=True).click()
    settle(page, "tokens per USD")
    check(page, "compare", shots)

    page.goto(f"{server}/sizing")
    settle(page, "Press Size")
    choose(page, "sizing_model", "llama-3.3-70b")
    fill(page, "sizing_users", "8")
    fill(page, "sizing_slo_interactivity", "20")
    choose(page, "sizing_devices", "h200")
    choose(page, "sizing_seeds", "1")
    settle(page, "--devices h200 --seeds 1 --quick")  # the plan size command of the inputs
    start = time.monotonic()
    page.get_by_role("button", name="Size", exact=True).click()
    settle(page, "Buy 1 node of 8x H200")
    sizing_s = time.monotonic() - start
    check(page, "sizing", shots)
    assert "vllm serve meta-llama/Llama-3.3-70B-Instruct" in page.inner_text("body")
    assert sizing_s < 120, f"the sizing took {sizing_s:.0f} s"

    page.goto(f"{server}/search-results?dir={out}&space={space}")
    settle(page, "Runs shown")
    check(page, "search-results", shots)
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 1
    assert page.locator(".st-key-search_space input").input_value() == str(space)
    fill(page, "search_folder", str(other))  # the space box follows the folder
    settle(page, str(other.resolve()))
    check(page, "search-results-other", shots)
    assert page.locator(".st-key-search_space input").input_value() == str(other / "space.yaml")
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 1

    page.goto(f"{server}/calibration")
    settle(page, "Calibration")
    check(page, "calibration", shots)
    log = (tmp_path / "server.log").read_text()
    assert "missing ScriptRunContext" not in log, log[-3000:]


def test_a_long_run_stops(server: str, browser_page: Any, tmp_path: Path) -> None:
    page = browser_page
    page.goto(server)
    settle(page, "Throughput (tok/s/GPU)")
    for key, value in (("whatif_users", "128"), ("whatif_minutes", "240")):  # then ~15 s
        page.wait_for_selector(IDLE, timeout=RUN_TIMEOUT_MS)  # one run at a time
        field = page.locator(f".st-key-{key} input")
        field.fill(value)
        field.press("Enter")
        page.wait_for_timeout(300)
    stop = page.get_by_role("button", name="Stop", exact=True)
    stop.wait_for(timeout=RUN_TIMEOUT_MS)
    page.get_by_text("simulated", exact=False).first.wait_for(timeout=RUN_TIMEOUT_MS)
    start = time.monotonic()
    stop.click()
    page.get_by_text("Stopped.").wait_for(timeout=RUN_TIMEOUT_MS)
    page.wait_for_selector(IDLE, timeout=RUN_TIMEOUT_MS)
    stopped_s = time.monotonic() - start
    page.screenshot(path=tmp_path / "stopped.png", full_page=True)
    assert stopped_s < 8, f"the run took {stopped_s:.1f} s to stop"
    assert page.get_by_role("button", name="Run", exact=True).count() == 1
    assert page.get_by_text("Throughput (tok/s/GPU)").count() == 0  # nothing of it is shown
