"""The `accord ui` page end to end in a real headless Chromium (Debian's `chromium` and
`chromium-driver` packages, driven by selenium; never a downloaded browser).

The walk the issue asks for: pick the H100 preset and a bundled model, set --kv-cache-dtype nvfp4,
see the conflict proof and its verified fixes, apply one with a click, see the command follow.
The screenshot it takes is the one docs/ui.md shows (docs/ui.png).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from accord.resolver.configurator.server import running
from accord.resolver.facts.model import BUILTIN_MODELS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "ui.png"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1050")


def _missing() -> str | None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).is_file():
            return f"{path} is not installed (apt-get install {package}; .ci/run does it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (it is in the [test] extra)"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=_missing() or "")


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def url():
    with running() as base:
        yield base


def _wait_for(driver, test, what: str, timeout: float = 60):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: test(d), message=what)


def _status(driver) -> tuple[str, str]:
    status = driver.find_element("id", "status")
    return status.get_attribute("class"), status.text


def test_conflict_shows_its_proof_and_a_fix_click_updates_the_command(browser, url):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    browser.get(url + "/")
    _wait_for(browser, lambda d: "ok" in _status(d)[0], "the default page resolves")

    Select(browser.find_element("id", "facts")).select_by_value("h100")
    model = browser.find_element("id", "model")
    model.clear()
    model.send_keys(str(BUILTIN_MODELS["llm"]), Keys.TAB)
    _wait_for(browser, lambda d: "--model-path" in d.find_element("id", "command-text").text,
              "the model appears in the command")
    _wait_for(browser, lambda d: "ok" in _status(d)[0], "h100 with the model resolves")

    browser.find_element("id", "search").send_keys("kv-cache-dtype")
    choice = browser.find_element("css selector", '#choices select[data-flag="kv_cache_dtype"]')
    assert "nvfp4" in choice.text, "nvfp4 is offered, marked as excluded on an H100"
    Select(choice).select_by_value("nvfp4")

    _wait_for(browser, lambda d: "conflict" in _status(d)[0], "the conflict is reported")
    proof = browser.find_element("id", "proof")
    _wait_for(browser, lambda d: "kv.fp4.sm" in proof.text, "the proof names the rule")
    assert "--kv-cache-dtype nvfp4" in proof.text and "gpu.sm=90" in proof.text
    fixes = {b.text: b for b in browser.find_elements("css selector", "#fixes button.fix")}
    assert "--kv-cache-dtype auto" in fixes, "the operator's fix (the model's own KV dtype) is offered"
    assert all("kv-cache-dtype" in text and "nvfp4" not in text for text in fixes), \
        "every fix changes only the conflicting flag, away from nvfp4"
    assert "--kv-cache-dtype nvfp4" in browser.find_element("id", "command-text").text
    SCREENSHOT.parent.mkdir(exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))

    fixes["--kv-cache-dtype auto"].click()
    _wait_for(browser, lambda d: "ok" in _status(d)[0], "the fixed command resolves")
    command = browser.find_element("id", "command-text").text
    assert "--kv-cache-dtype auto" in command and "nvfp4" not in command
    assert browser.find_element("id", "conflict").is_displayed() is False
    assert "flag.kv_cache_dtype=auto" in browser.current_url, "the address bar carries the state"


def test_a_shared_link_restores_the_configuration(browser, url):
    browser.get(url + "/#system=llm&facts=b200&flag.kv_cache_dtype=nvfp4")
    _wait_for(browser, lambda d: "ok" in _status(d)[0], "nvfp4 is legal on a B200")
    assert "--facts b200 --kv-cache-dtype nvfp4" in browser.find_element("id", "command-text").text
    assert '"kv_cache_dtype": "nvfp4"' in browser.find_element("id", "json-text").get_attribute("textContent")
