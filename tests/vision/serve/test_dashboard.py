"""The live page as a dashboard, in headless Chromium at 1280x720, fed by a real run: scripted
scenes with known crossings (``edgefuse.vision.scenes.crossings``) through the app's own wiring
(``AnalyticsSetup``: tracker, line, zone, ``LiveSink``, server; ``MultiPipeline``).

Each stream's camera holds its last frame until the test releases it, so the page is looked at
while every stream is live, then again once they ended. Every wait is on the page's DOM or on the
run's own events, with a deadline only as a guard. ``EDGEFUSE_DASHBOARD_SHOTS=DIR`` also writes
the screenshots there as 256-colour PNGs (``EDGEFUSE_DASHBOARD_SHOTS=docs`` remakes docs' PNGs).
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.request
from pathlib import Path

import pytest

from edgefuse.apps.analytics import AnalyticsConfig, AnalyticsSetup
from edgefuse.apps.runner import live_stats
from edgefuse.vision.scenes.crossings import Crossings, ScriptedDetector, crossings
from edgefuse.vision.streams.multi import MultiPipeline, Stream
from edgefuse.vision.streams.sources import IterableSource
from edgefuse.vision.track.byte_tracker import TrackerOptions
from tests.needs import optional
from tests.vision.serve.browser import as_shown, browser, shown_counts

pytestmark = pytest.mark.unit
optional("aiohttp")
optional("prometheus_client")
cv2 = optional("cv2")
DEADLINE_S = 60
VIEWPORT = (1280, 720)
NAMES = ("front-door", "loading-bay", "parking", "lobby", "yard", "gate", "dock", "hall", "roof")


class ScriptedRun:
    """Streams of scripted scenes run as the detection app runs them, served on a free port;
    each camera holds its last frame until ``release``."""

    def __init__(self, scenes: dict[str, Crossings]) -> None:
        self.scenes = scenes
        self.release = threading.Event()
        first = next(iter(scenes.values()))
        config = AnalyticsConfig(track=TrackerOptions(), lines=(first.line,),
                                 zones=(first.zone,), serve=("127.0.0.1", 0))
        self.setup = AnalyticsSetup(config, list(scenes), stall_s=3600)
        running: list[MultiPipeline] = []
        streams = []
        for name, scene in scenes.items():
            task = self.setup.wrap(ScriptedDetector(scene.truth), name,
                                   frame_size=(scene.width, scene.height))
            sinks = self.setup.sinks(name, stats=lambda name=name: live_stats(
                running[0].pipelines[name].stats) if running else {})
            streams.append(Stream(name, IterableSource(self._held(scene), name=name), task,
                                  sinks))
        self.multi = MultiPipeline(streams)
        running.append(self.multi)
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return self.setup.server.url

    def _held(self, scene: Crossings):
        yield from scene.images()
        self.release.wait()  # the camera stays open on its last frame until the test is done

    def _run(self) -> None:
        try:
            self.multi.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.errors.append(exc)

    def __enter__(self) -> ScriptedRun:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        self.thread.join(DEADLINE_S)
        self.setup.close()

    def finish(self) -> None:
        """Let every camera end and wait for the run to return."""
        self.release.set()
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive() and not self.errors, self.errors


def _scenes(count: int) -> dict[str, Crossings]:
    """``count`` streams, each with its own numbers of walkers (so each table differs)."""
    return {NAMES[i]: crossings(rightward=1 + i % 3, leftward=1 + (i // 3) % 2)
            for i in range(count)}


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def _inside_viewport(chrome) -> list[str]:
    """What does not fit the viewport: the page scrolling, or a tile (or its footer) outside."""
    return chrome.execute_script("""
      const bad = [];
      const root = document.documentElement;
      if (root.scrollHeight > innerHeight || root.scrollWidth > innerWidth)
        bad.push("the page scrolls: " + root.scrollWidth + "x" + root.scrollHeight);
      for (const tile of document.querySelectorAll(".tile")) {
        for (const part of [tile, tile.querySelector("footer"), tile.querySelector("img")]) {
          const box = part.getBoundingClientRect();
          if (box.left < 0 || box.top < 0 || box.right > innerWidth || box.bottom > innerHeight
              || box.width < 40 || box.height < 20)
            bad.push(tile.id + " " + part.tagName + " at " + JSON.stringify(box));
        }
      }
      return bad;""")


def _screenshot(chrome, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    chrome.save_screenshot(str(path))
    image = cv2.imread(str(path))
    assert image.shape[:2] == (VIEWPORT[1], VIEWPORT[0])
    shots = os.environ.get("EDGEFUSE_DASHBOARD_SHOTS")
    if shots:  # for the docs: 256 colours keep the PNG small and the text sharp
        image_module = optional("PIL.Image")
        Path(shots).mkdir(parents=True, exist_ok=True)
        image_module.open(path).convert("RGB").quantize(256).save(Path(shots) / name,
                                                                 optimize=True)
    return path


@pytest.mark.parametrize("count", [1, 4, 9])
def test_the_dashboard_fits_the_window_counts_right_and_shows_ended_streams(count, tmp_path):
    from selenium.webdriver.support.ui import WebDriverWait
    scenes = _scenes(count)
    chrome = browser(*VIEWPORT)
    try:
        with ScriptedRun(scenes) as run:
            chrome.get(run.url)
            wait = WebDriverWait(chrome, DEADLINE_S)
            for name, scene in scenes.items():  # every camera on its last frame: final counts
                wait.until(lambda _, name=name, scene=scene: shown_counts(chrome, name)
                           == as_shown(scene.expected))
            wait.until(lambda _: chrome.execute_script(
                "return [...document.querySelectorAll('.tile img')].every("
                "i => i.naturalWidth > 0) && [...document.querySelectorAll('.badge[id^=state-]')]"
                ".every(b => b.textContent === 'live')"))
            crossings_made = sum(sum(scene.expected["lines"]["door"]["in"].values())
                                 + sum(scene.expected["lines"]["door"]["out"].values())
                                 for scene in scenes.values())
            events = json.loads(_get(run.url + "api/events?limit=100"))
            assert len([e for e in events["events"] if e["type"] == "line_crossed"]) \
                == crossings_made
            wait.until(lambda _: chrome.execute_script(  # the newest event is on top
                "const top = document.querySelector('#events li');"
                "return top && Number(top.dataset.seq)") == events["last"])
            assert _inside_viewport(chrome) == []
            _screenshot(chrome, tmp_path, f"dashboard-{count}.png")
            live = _get(run.url + "metrics")
            assert all(f'edgefuse_stream_up{{stream="{name}"}} 1.0' in live for name in scenes)

            run.finish()
            for name in scenes:
                wait.until(lambda _, name=name: chrome.find_element(
                    "id", f"state-{name}").text.lower() == "ended")
                assert chrome.find_element("id", f"fps-{name}").text == "- fps"
            state = json.loads(_get(run.url + "api/state"))
            assert {view["state"] for view in state.values()} == {"ended"}
            ended = _get(run.url + "metrics")
            health = _get(run.url + "healthz")
    finally:
        chrome.quit()
    for name, scene in scenes.items():
        assert state[name]["counts"] == scene.expected
        assert f'edgefuse_stream_up{{stream="{name}"}} 0.0' in ended
        assert f'edgefuse_stream_state{{state="ended",stream="{name}"}} 1.0' in ended
    assert not re.search(r"^edgefuse_(fps|latency_ms)\{", ended, re.MULTILINE)
    assert json.loads(health) == {"ok": True, "stalled": []}  # ended is done, not unhealthy
