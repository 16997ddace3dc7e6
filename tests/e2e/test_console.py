"""The operator console in a real headless Chromium against a real ``memledger up``: load it,
click through a space to an item, move the as-of slider over the item's drawn history, page
the changes feed, replay a retrieval, and take a screenshot. Content is untrusted text, so a
memory written as markup must show as text and run nothing.

Skipped, saying so, where Chromium and its driver are not installed (``make test-browser``
installs them first, on a machine whose owner allows it)."""

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from tests.e2e.conftest import Running

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
if CHROMIUM is None or DRIVER is None:
    pytest.skip("Chromium and chromedriver are not installed: the console's browser tests "
                "did not run (`make test-browser` installs them and runs them)",
                allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

MARKUP = '<img src=x onerror="document.title=\'pwned\'">Alice <b>works</b> at Acme'


@pytest.fixture
def memledger(fresh_memledger: Running) -> Running:
    """A ``memledger up`` of each test's own: the changes feed is read from its first event."""
    return fresh_memledger


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,1000",
                 f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _post(memledger: Running, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{memledger.url}{path}", json=body, timeout=30)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, Any] = response.json()
    return answer


def _history(memledger: Running) -> tuple[str, int]:
    """A space whose one item was written as markup, then corrected twice (three changes)."""
    _post(memledger, "/v1/spaces", {"space_id": "hr"})
    item = _post(memledger, "/v1/spaces/hr/memories", {
        "kind": "fact", "content": MARKUP, "valid_from": "2020-01-01T00:00:00Z"})
    item_id = item["ids"]["item_id"]
    _post(memledger, f"/v1/spaces/hr/memories/{item_id}/revise", {
        "content": "Alice works at Globex", "valid_from": "2022-01-01T00:00:00Z",
        "reason": "she moved"})
    last = _post(memledger, f"/v1/spaces/hr/memories/{item_id}/revise", {
        "content": "Alice works at Globex", "valid_from": "2021-03-01T00:00:00Z",
        "valid_to": "2022-01-01T00:00:00Z", "reason": "HR: the move was in March 2021"})
    return item_id, last["position"]


def _wait(browser: Any, css: str, count: int | None = None) -> list[Any]:
    def found(_: Any) -> list[Any] | Literal[False]:
        elements = browser.find_elements(By.CSS_SELECTOR, css)
        return elements if elements and (count is None or len(elements) >= count) else False

    result: list[Any] = WebDriverWait(browser, 20).until(found)
    return result


def test_an_operator_walks_an_items_history_across_record_time_with_the_slider(
        memledger: Running, browser: Any, tmp_path: Path) -> None:
    item_id, position = _history(memledger)
    httpx.get(f"{memledger.url}/v1/spaces/hr/items/{item_id}/history",
              params={"min_position": position, "wait_ms": 30_000}, timeout=40).raise_for_status()
    browser.get(f"{memledger.url}/console")
    _wait(browser, "button.space[data-space='hr']")[0].click()
    _wait(browser, f"button.item[data-item='{item_id}']")[0].click()
    rects = _wait(browser, "#history rect.version", count=5)
    assert len(rects) == 5  # the README's Alice: five rectangles over three positions
    now = browser.find_elements(By.CSS_SELECTOR, "#history rect.version.current")
    assert len(now) == 3
    slider = browser.find_element(By.ID, "as-of")
    slider.send_keys(Keys.HOME)  # back to the first position the item was known at
    basis = browser.find_element(By.CSS_SELECTOR, "#history line.basis")
    assert int(basis.get_attribute("data-position")) == int(slider.get_attribute("min"))
    then = browser.find_elements(By.CSS_SELECTOR, "#history rect.version.current")
    assert len(then) == 1
    known = browser.find_elements(By.CSS_SELECTOR, "#as-of-versions li.known")
    assert MARKUP in known[0].text  # shown as the text it is
    assert browser.find_elements(By.CSS_SELECTOR, "#as-of-versions img") == []
    assert browser.title != "pwned"
    shot = tmp_path / "console.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 10_000


def test_an_operator_pages_the_changes_feed_and_replays_a_retrieval(
        memledger: Running, browser: Any) -> None:
    _, position = _history(memledger)
    search = _post(memledger, "/v1/search", {"query": "where does Alice work?", "audit": True,
                                             "min_position": position, "wait_ms": 30_000})
    httpx.get(f"{memledger.url}/v1/retrievals/{search['retrieval_id']}",
              params={"min_position": search["retrieval_position"], "wait_ms": 30_000},
              timeout=30).raise_for_status()
    browser.get(f"{memledger.url}/console")
    browser.find_element(By.CSS_SELECTOR, "button[data-tab='changes']").click()
    size = browser.find_element(By.ID, "changes-limit")
    size.clear()
    size.send_keys("2")
    browser.find_element(By.ID, "changes-first").click()
    first = [row.text for row in _wait(browser, "#changes-rows tr.change")]
    cursor = browser.find_element(By.ID, "changes-cursor").text
    browser.find_element(By.ID, "changes-next").click()
    WebDriverWait(browser, 20).until(
        lambda b: b.find_element(By.ID, "changes-cursor").text != cursor)
    second = [row.text for row in _wait(browser, "#changes-rows tr.change")]
    assert len(first) == 2
    assert "space.created" in first[0]
    assert second != first
    browser.find_element(By.CSS_SELECTOR, "button[data-tab='retrieval']").click()
    browser.find_element(By.ID, "retrieval-id").send_keys(search["retrieval_id"])
    browser.find_element(By.ID, "retrieval-load").click()
    browser.find_element(By.ID, "retrieval-replay").click()
    verdict = _wait(browser, "#replay-verdict")[0]
    assert verdict.text.startswith("replayed:")
