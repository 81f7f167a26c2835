"""Headless Chromium through selenium, for the tests that check what a person sees.

Why the real browser: whether a video plays or a page lays out is the browser's call, and only
the browser can answer it (an MP4 that ffprobe and OpenCV read can still leave Chromium at
``readyState`` 0). Skipped on a contributor's machine without chromium and chromium-driver; in
CI (``CI`` set) their absence is an error (.ci/run installs them).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.needs import optional


def chromium(width: int = 1200, height: int = 800, *, exact_viewport: bool = False) -> Any:
    """A headless Chromium driver (the caller quits it). ``exact_viewport``: the page gets
    exactly ``width`` x ``height`` through DevTools (``Emulation.setDeviceMetricsOverride``):
    ``--window-size`` includes whatever the browser draws around the page, so only the emulated
    metrics tell whether a dashboard fits 1280x720."""
    webdriver = optional("selenium.webdriver")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (binary and driver):
        if os.environ.get("CI"):
            raise RuntimeError("CI must install chromium and chromium-driver (see .ci/run)")
        pytest.skip("chromium and chromium-driver are not installed")
    service = optional("selenium.webdriver.chrome.service")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    arguments = ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={width},{height}", "--autoplay-policy=no-user-gesture-required"]
    if exact_viewport:
        options.page_load_strategy = "eager"  # a page's MJPEG images never finish loading
        arguments += ["--hide-scrollbars", "--force-device-scale-factor=1"]
    for argument in arguments:
        options.add_argument(argument)
    chrome = webdriver.Chrome(service=service.Service(driver), options=options)
    if exact_viewport:
        chrome.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return chrome


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def served_folder(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on a free port of 127.0.0.1; yields the base URL."""
    handler = functools.partial(_QuietFiles, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


PLAY = """
const [url, done] = [arguments[0], arguments[arguments.length - 1]];
const video = document.createElement('video');
video.muted = true;
video.src = url;
document.body.appendChild(video);
const report = (why) => done({why, readyState: video.readyState, currentTime: video.currentTime,
                             width: video.videoWidth, height: video.videoHeight,
                             duration: video.duration,
                             error: video.error && video.error.code});
video.addEventListener('error', () => report('error'));
video.addEventListener('timeupdate', () => { if (video.currentTime > 0) report('playing'); });
video.play().catch((e) => report('play refused: ' + e));
"""


def play(driver: Any, base: str, name: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """Loads ``base + name`` in a <video> on a page of ``base`` (about:blank's opaque origin may
    not load media) and plays it; returns its state once ``currentTime`` moved past 0
    (``why == 'playing'``) or the browser gave up (``why == 'error'``, with its code)."""
    driver.set_script_timeout(timeout_s)
    driver.get(base)
    return driver.execute_async_script(PLAY, base + name)
