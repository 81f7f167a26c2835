"""Headless Chromium for the live-view tests, with a viewport of a given size.

Why the viewport is set through DevTools (``Emulation.setDeviceMetricsOverride``) rather than
``--window-size``: the window size includes whatever the browser draws around the page, so only
the emulated metrics give the page exactly the 1280x720 a dashboard must fit.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.needs import optional


def browser(width: int = 1280, height: int = 720):
    """A Chrome WebDriver on Debian's chromium and chromium-driver (skipped without them, except
    in CI, where .ci/run installs them)."""
    webdriver = optional("selenium.webdriver")
    service = optional("selenium.webdriver.chrome.service")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        if os.environ.get("CI"):
            raise RuntimeError("CI must install chromium and chromium-driver (see .ci/run)")
        pytest.skip("chromium and chromium-driver are not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    options.page_load_strategy = "eager"  # the MJPEG images never finish loading
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
                     f"--window-size={width},{height}"):
        options.add_argument(argument)
    chrome = webdriver.Chrome(service=service.Service(driver), options=options)
    chrome.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return chrome


_READ_COUNTS = """
const table = document.getElementById("counts-" + arguments[0]);
const shown = {lines: {}, zones: {}};
for (const row of table.querySelectorAll("tr[data-kind]")) {
  const kind = row.dataset.kind + "s";
  const item = shown[kind][row.dataset.name] = shown[kind][row.dataset.name] || {};
  for (const cell of row.querySelectorAll("td[data-field]")) {
    const field = item[cell.dataset.field] = item[cell.dataset.field] || {};
    const value = Number(cell.textContent);
    if (row.dataset.class && value) field[row.dataset.class] = value;
  }
}
return shown;
"""


def shown_counts(chrome, stream: str) -> dict:
    """The stream's counts table as the page shows it: ``{"lines": {line: {"in": {class: n},
    "out": ...}}, "zones": {zone: {"now": ..., "entered": ...}}}`` (zeros left out)."""
    return chrome.execute_script(_READ_COUNTS, stream)


def as_shown(counts: dict) -> dict:
    """``Tracked.counts`` in the form ``shown_counts`` reads, for comparison."""
    def nonzero(per_class: dict) -> dict:
        return {cls: n for cls, n in per_class.items() if n}

    return {"lines": {name: {"in": nonzero(totals.get("in", {})),
                             "out": nonzero(totals.get("out", {}))}
                      for name, totals in counts.get("lines", {}).items()},
            "zones": {name: {"now": nonzero(totals.get("occupancy", {})),
                             "entered": nonzero(totals.get("entries", {}))}
                      for name, totals in counts.get("zones", {}).items()}}
