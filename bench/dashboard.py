"""Benchmark the live page's update cost with 9 streams: the server's work per update, the bytes a
page costs per second, and (with Chromium) the browser's main-thread time per second.

Setup: a ``LiveState`` with 9 streams, each fed at ``--fps`` with pre-encoded 1280x720 JPEGs of
the scripted crossings scene (annotated as the app draws it; the app's own encode cost is the
sink's, not the page's), counts of one line and one zone, stats, and an event a second per
stream; the real ``LiveServer`` on 127.0.0.1.

Measured:
- server, per update, in process: building ``/api/state`` (snapshot + JSON), ``/api/events``
  (the latest 50) and ``/metrics``; medians over ``--calls`` calls;
- over HTTP: the round trip of one ``/api/state`` and its size;
- bytes per second a page receives: the frames WebSocket (``/api/frames``, capped at the page's
  frame rate; whole frames, and reduced to 320-pixel tiles as the 9-tile page asks) against 9
  MJPEG streams (``/stream/<name>.mjpg``, every frame), each for
  ``--seconds`` by an aiohttp client, alternated for ``--reps`` repetitions; plus the polls'
  JSON (one ``/api/state`` and one ``/api/events`` a second);
- the server process's CPU (all threads: feeders, server, encoding excluded) with no page open
  and with one headless Chromium showing the page, alternated; the difference is what serving
  the page costs;
- the browser: DevTools ``Performance.getMetrics`` (script, layout, style, task durations)
  over the same window, as milliseconds of main-thread work per second.

    python -m bench.dashboard
    python -m bench.dashboard --seconds 5 --reps 2 --fps 15

Prints a table and writes bench/results/dashboard.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import statistics
import threading
import time
import urllib.request

import cv2

from bench._harness import RESULTS
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.task import Tracked
from edgefuse.vision.analytics.zone import Zone
from edgefuse.vision.scenes.crossings import ScriptedDetector, crossings
from edgefuse.vision.serve import metrics
from edgefuse.vision.serve.server import LiveServer
from edgefuse.vision.serve.state import LiveState
from edgefuse.vision.streams.frames import Frame

STREAMS = 9


def scripted_jpegs(width: int, height: int, quality: int) -> tuple[list[bytes], list[dict]]:
    """The crossings scene at ``width`` x ``height`` as the app would show it: JPEGs and counts."""
    scene = crossings(3, 2, width=width, height=height, speed=width / 50)
    task = Tracked(ScriptedDetector(scene.truth), lines=[LineCounter(**scene.line)],
                   zones=[Zone(**scene.zone)])
    jpegs, counts = [], []
    for index in range(len(scene.truth)):
        image = scene.image(index)
        result = task.postprocess({}, None, Frame(index, image, float(index), 0.0))
        ok, encoded = cv2.imencode(".jpg", task.annotate(image, result),
                                   [cv2.IMWRITE_JPEG_QUALITY, quality])
        jpegs.append(encoded.tobytes())
        counts.append(result.counts)
    return jpegs, counts


class Feeders:
    """A thread per stream putting the next frame, its counts and stats into ``state`` at
    ``fps``, and an event a second."""

    def __init__(self, state: LiveState, jpegs: list[bytes], counts: list[dict],
                 fps: float, width: int) -> None:
        self.state, self.jpegs, self.counts, self.fps = state, jpegs, counts, fps
        self.width = width
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._feed, args=(name, offset), daemon=True)
                        for offset, name in enumerate(state.streams)]

    def _feed(self, name: str, offset: int) -> None:
        period, index = 1.0 / self.fps, offset * 3
        next_at = time.perf_counter()
        while not self.stop.is_set():
            frame = index % len(self.jpegs)
            self.state.frame(name, self.jpegs[frame], counts=self.counts[frame], width=self.width,
                             stats={"fps": self.fps, "latency_p50_ms": 41.0,
                                    "latency_p95_ms": 60.0, "dropped": 0, "reconnects": 0,
                                    "drops": 0})
            if index % round(self.fps) == 0:
                self.state.publish({"type": "line_crossed", "line": "door", "direction": "in",
                                    "class": "circle", "track_id": index, "stream": name,
                                    "time": round(time.time(), 3)})
            index += 1
            next_at += period
            self.stop.wait(max(0.0, next_at - time.perf_counter()))

    def __enter__(self) -> Feeders:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def per_call_us(function, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def server_side(state: LiveState, server: LiveServer, calls: int) -> dict:
    registry = metrics.registry_for(state)
    state_json = json.dumps(state.snapshot()).encode()
    events_json = json.dumps({"events": [server._with_urls(e)  # noqa: SLF001 - the handler's
                                         for e in state.events(0, 50)[1]]}).encode()
    request_ms = []
    for _ in range(max(calls // 10, 20)):
        start = time.perf_counter()
        with urllib.request.urlopen(server.url + "api/state", timeout=10) as response:
            size = len(response.read())
        request_ms.append((time.perf_counter() - start) * 1e3)
    return {
        "state_update_us": per_call_us(lambda: json.dumps(state.snapshot()), calls),
        "events_update_us": per_call_us(lambda: json.dumps(
            [server._with_urls(e) for e in state.events(0, 50)[1]]), calls),  # noqa: SLF001
        "metrics_scrape_us": per_call_us(lambda: metrics.render(registry), calls),
        "state_bytes": len(state_json), "events_bytes": len(events_json),
        "state_http_ms": statistics.median(request_ms), "state_http_bytes": size,
    }


async def _count_websocket(url: str, seconds: float) -> tuple[int, int]:
    """Frame bytes and frames received on the page's WebSocket in ``seconds``."""
    import aiohttp  # noqa: PLC0415 - the serve extra, needed only here

    received = messages = 0
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as socket:
        deadline = time.perf_counter() + seconds
        while (left := deadline - time.perf_counter()) > 0:
            try:
                message = await socket.receive(timeout=left)
            except asyncio.TimeoutError:
                break
            if isinstance(message.data, bytes):  # the frame; its name came as text before it
                received += len(message.data)
                messages += 1
    return received, messages


async def _count_mjpeg(urls: list[str], seconds: float) -> tuple[int, int]:
    import aiohttp  # noqa: PLC0415 - the serve extra, needed only here

    async def one(session, url: str) -> tuple[int, int]:
        received = parts = 0
        deadline = time.perf_counter() + seconds
        async with session.get(url) as response:
            while (left := deadline - time.perf_counter()) > 0:
                try:
                    chunk = await asyncio.wait_for(response.content.readany(), left)
                except asyncio.TimeoutError:
                    break
                received += len(chunk)
                parts += chunk.count(b"Content-Type: image/jpeg")
        return received, parts

    async with aiohttp.ClientSession() as session:
        counted = await asyncio.gather(*(one(session, url) for url in urls))
    return sum(c[0] for c in counted), sum(c[1] for c in counted)


def page_bytes(server: LiveServer, state: LiveState, seconds: float, reps: int) -> dict:
    base = server.url.replace("http://", "ws://")
    websocket, tiles, mjpeg = [], [], []
    for rep in range(reps):
        order = ("websocket", "mjpeg") if rep % 2 == 0 else ("mjpeg", "websocket")
        for kind in order:
            if kind == "websocket":
                got, count = asyncio.run(_count_websocket(base + "api/frames", seconds))
                websocket.append((got / seconds, count / seconds))
                got, count = asyncio.run(_count_websocket(base + "api/frames?width=320",
                                                          seconds))
                tiles.append((got / seconds, count / seconds))
            else:
                got, count = asyncio.run(_count_mjpeg(
                    [f"{server.url}stream/{name}.mjpg" for name in state.streams], seconds))
                mjpeg.append((got / seconds, count / seconds))
    return {
        "websocket_bytes_per_s": statistics.median(b for b, _ in websocket),
        "websocket_frames_per_s": statistics.median(f for _, f in websocket),
        "tiles_bytes_per_s": statistics.median(b for b, _ in tiles),
        "tiles_frames_per_s": statistics.median(f for _, f in tiles),
        "mjpeg_bytes_per_s": statistics.median(b for b, _ in mjpeg),
        "mjpeg_frames_per_s": statistics.median(f for _, f in mjpeg),
    }


def cpu_seconds_per_s(seconds: float, during=None) -> float:
    start_cpu, start = time.process_time(), time.perf_counter()
    if during is None:
        time.sleep(seconds)
    else:
        during(seconds)
    return (time.process_time() - start_cpu) / (time.perf_counter() - start)


def browser_side(server: LiveServer, seconds: float, reps: int) -> dict | None:
    """Chromium showing the page: its main-thread work per second, and the server's CPU with
    and without it (alternated); None without chromium."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        return None
    from selenium import webdriver  # noqa: PLC0415 - the dev extra, needed only here
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,720"):
        options.add_argument(argument)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    idle_cpu, page_cpu, main_ms, updates = [], [], [], []
    try:
        chrome.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": False})
        chrome.execute_cdp_cmd("Performance.enable", {})
        for rep in range(reps):
            order = ("idle", "page") if rep % 2 == 0 else ("page", "idle")
            for kind in order:
                if kind == "idle":
                    chrome.get("about:blank")
                    idle_cpu.append(cpu_seconds_per_s(seconds))
                    continue
                chrome.get(server.url)
                time.sleep(2.0)  # the page connects and loads its first frames
                before = _metrics(chrome)
                page_cpu.append(cpu_seconds_per_s(seconds))
                after = _metrics(chrome)
                main_ms.append({key: (after[key] - before[key]) * 1e3 / seconds
                                for key in ("ScriptDuration", "LayoutDuration",
                                            "RecalcStyleDuration", "TaskDuration")})
                updates.append(int(chrome.execute_script("return document.body.dataset.updates")))
    finally:
        chrome.quit()
    return {
        "server_cpu_idle": statistics.median(idle_cpu),
        "server_cpu_with_page": statistics.median(page_cpu),
        "browser_ms_per_s": {key: statistics.median(m[key] for m in main_ms)
                             for key in main_ms[0]},
        "polls_seen": updates,
    }


def _metrics(chrome) -> dict[str, float]:
    got = chrome.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    return {m["name"]: m["value"] for m in got}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fps", type=float, default=15.0, help="each stream's frame rate")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--quality", type=int, default=80)
    parser.add_argument("--size", default="1280x720")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    jpegs, counts = scripted_jpegs(width, height, args.quality)
    names = [f"cam{i}" for i in range(STREAMS)]
    state = LiveState(names, stall_s=3600)
    server = LiveServer(state, "127.0.0.1", 0)
    server.start()
    try:
        with Feeders(state, jpegs, counts, args.fps, width):
            time.sleep(1.0)  # every stream has frames, counts and events
            server_result = server_side(state, server, args.calls)
            bytes_result = page_bytes(server, state, args.seconds, args.reps)
            browser_result = browser_side(server, args.seconds, args.reps)
    finally:
        server.stop()
    poll_bytes = server_result["state_http_bytes"] + server_result["events_bytes"]
    result = {"streams": STREAMS, "fps": args.fps, "size": [width, height],
              "jpeg_bytes_mean": statistics.mean(len(j) for j in jpegs),
              "page_fps": server.page_fps, "server": server_result, "bytes": bytes_result,
              "poll_bytes_per_s": poll_bytes, "browser": browser_result,
              "machine": platform.platform(), "python": platform.python_version()}
    rows = [
        ("server: /api/state build (snapshot+JSON)", f"{server_result['state_update_us']:.0f} us"),
        ("server: /api/events build (50 events)", f"{server_result['events_update_us']:.0f} us"),
        ("server: /metrics scrape", f"{server_result['metrics_scrape_us']:.0f} us"),
        ("HTTP: /api/state round trip", f"{server_result['state_http_ms']:.2f} ms, "
                                        f"{server_result['state_http_bytes']} B"),
        ("page polls (state + events, 1/s)", f"{poll_bytes / 1e3:.1f} kB/s"),
        ("frames: one WebSocket (page_fps cap)",
         f"{bytes_result['websocket_bytes_per_s'] / 1e6:.2f} MB/s, "
         f"{bytes_result['websocket_frames_per_s']:.0f} frames/s"),
        ("frames: one WebSocket, ?width=320 tiles",
         f"{bytes_result['tiles_bytes_per_s'] / 1e6:.2f} MB/s, "
         f"{bytes_result['tiles_frames_per_s']:.0f} frames/s"),
        ("frames: 9 MJPEG streams (every frame)",
         f"{bytes_result['mjpeg_bytes_per_s'] / 1e6:.2f} MB/s, "
         f"{bytes_result['mjpeg_frames_per_s']:.0f} frames/s"),
    ]
    if browser_result:
        work = browser_result["browser_ms_per_s"]
        rows += [
            ("server CPU, no page / page open",
             f"{browser_result['server_cpu_idle'] * 100:.1f} % / "
             f"{browser_result['server_cpu_with_page'] * 100:.1f} % of a core"),
            ("browser main thread (task total)", f"{work['TaskDuration']:.0f} ms/s"),
            ("  of which script / layout / style",
             f"{work['ScriptDuration']:.0f} / {work['LayoutDuration']:.0f} / "
             f"{work['RecalcStyleDuration']:.0f} ms/s"),
        ]
    print(f"live page, {STREAMS} streams at {args.fps:g} fps, {width}x{height} JPEG q"
          f"{args.quality} (mean {result['jpeg_bytes_mean'] / 1e3:.0f} kB)")
    for label, value in rows:
        print(f"  {label:<42} {value}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "dashboard.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
