"""The live view served for real on 127.0.0.1: endpoints over HTTP, then the page in Chromium."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.vision.serve.server import LiveServer
from edgefuse.vision.serve.sink import LiveSink
from edgefuse.vision.serve.state import LiveState
from edgefuse.vision.streams.frames import Frame, FrameResult
from tests.needs import optional
from tests.vision.serve.browser import as_shown, shown_counts
from tests.vision.serve.browser import browser as open_browser

pytestmark = pytest.mark.unit
optional("aiohttp")
optional("prometheus_client")
cv2 = optional("cv2")


def _image(shade: int) -> np.ndarray:
    image = np.full((120, 160, 3), shade, dtype=np.uint8)
    cv2.putText(image, str(shade), (10, 70), cv2.FONT_HERSHEY_SIMPLEX, 1.5, (0, 0, 255), 3)
    return image


def _feed(sink: LiveSink, shade: int, index: int = 0) -> None:
    frame = Frame(index=index, image=_image(shade), time=0.0, clock=0.0)
    sink.write(FrameResult(frame), _image(shade))


@pytest.fixture
def served():
    state = LiveState(["gate", "yard"], stall_s=3600)
    server = LiveServer(state, "127.0.0.1", 0)
    server.start()
    yield state, server
    server.stop()


def _get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_endpoints_answer_from_the_same_state(served):
    state, server = served
    counts = {"lines": {"door": {"in": {"person": 1}, "out": {}}}}
    _feed(LiveSink(state, "gate", counts=lambda: counts, stats=lambda: {"fps": 9.0}), 50)
    status, body = _get(server.url + "api/state")
    assert status == 200 and json.loads(body)["gate"]["counts"] == counts
    status, body = _get(server.url + "metrics")
    assert status == 200 and b'edgefuse_fps{stream="gate"} 9.0' in body
    status, body = _get(server.url + "healthz")
    assert status == 200 and json.loads(body) == {"ok": True, "stalled": []}
    state.source_state("yard", "down")
    status, body = _get(server.url + "healthz")
    assert status == 503 and json.loads(body)["stalled"] == ["yard"]
    assert _get(server.url + "stream/nope.mjpg")[0] == 404


def test_the_mjpeg_stream_delivers_each_new_frame(served):
    state, server = served
    sink = LiveSink(state, "gate")
    _feed(sink, 10)
    with urllib.request.urlopen(server.url + "stream/gate.mjpg", timeout=10) as stream:
        assert stream.headers["Content-Type"].startswith("multipart/x-mixed-replace")
        first = _read_part(stream)
        threading.Thread(target=_feed, args=(sink, 200, 1)).start()
        second = _read_part(stream)
    assert cv2.imdecode(np.frombuffer(first, np.uint8), cv2.IMREAD_COLOR).mean() < 60
    assert cv2.imdecode(np.frombuffer(second, np.uint8), cv2.IMREAD_COLOR).mean() > 150


def _read_part(stream) -> bytes:
    length = None
    while True:
        line = stream.readline().strip()
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        if line == b"" and length is not None:
            return stream.read(length)


def test_a_token_is_required_off_loopback_and_checked():
    with pytest.raises(InputError, match="without a login"):
        LiveServer(LiveState(["a"]), "0.0.0.0", 0)
    state = LiveState(["a"], stall_s=3600)
    server = LiveServer(state, "127.0.0.1", 0, token="s3cret")
    server.start()
    try:
        for path in ("api/state", "api/events", "api/frames", "metrics", "snapshots/a.jpg",
                     "stream/a.mjpg", ""):
            assert _get(server.url + path)[0] == 401, path
        assert _get(server.url + "api/state?token=s3cret")[0] == 200
        assert _get(server.url + "api/state", {"Authorization": "Bearer s3cret"})[0] == 200
        assert _get(server.url + "healthz")[0] == 200
    finally:
        server.stop()


def _outward_address() -> str:
    """An address of this machine other than loopback (the route a LAN client takes), or
    127.0.0.1 where the machine has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.255", 9))  # TEST-NET-1; a UDP connect sends nothing
            address = probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"
    return "127.0.0.1" if address.startswith("127.") or address == "0.0.0.0" else address


def test_off_loopback_metrics_need_the_token_and_only_healthz_is_open():
    """Served on 0.0.0.0 (every interface) with a token and reached from outside loopback:
    /metrics (stream names, counts, rates) answers 401 without the token or with a wrong
    one, in every spelling of the path; only /healthz answers without it."""
    state = LiveState(["gate"], stall_s=3600)
    server = LiveServer(state, "0.0.0.0", 0, token="s3cret")
    server.start()
    base = f"http://{_outward_address()}:{server.port}/"
    try:
        for path in ("metrics", "metrics?token=", "metrics?token=wrong"):
            assert _get(base + path)[0] == 401, path
        for path in ("metrics/", "healthz/../metrics", "%6detrics"):  # 401, or no such page
            assert _get(base + path)[0] in (401, 404), path
        assert _get(base + "metrics", {"Authorization": "Bearer wrong"})[0] == 401
        assert _head(base + "metrics") == 401
        status, body = _get(base + "metrics?token=s3cret")
        assert status == 200 and b"edgefuse_" in body
        assert _get(base + "metrics", {"Authorization": "Bearer s3cret"})[0] == 200
        assert _get(base + "healthz")[0] == 200
    finally:
        server.stop()


def _head(url: str) -> int:
    connection = http.client.HTTPConnection(url.split("/")[2], timeout=10)
    try:
        connection.request("HEAD", "/" + url.split("/", 3)[3])
        return connection.getresponse().status
    finally:
        connection.close()


def test_a_port_in_use_is_a_clear_error(served):
    _, server = served
    with pytest.raises(InputError, match=f"cannot serve the live view on 127.0.0.1:{server.port}"):
        LiveServer(LiveState(["a"]), "127.0.0.1", server.port).start()


def test_the_page_in_a_browser_shows_each_stream_changing_and_its_counts(served, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    state, server = served
    counts = {"gate": {"lines": {"door": {"in": {"person": 3}, "out": {}}}},
              "yard": {"zones": {"bay": {"occupancy": {"car": 2}}}}}
    sinks = {name: LiveSink(state, name, counts=lambda name=name: counts[name])
             for name in ("gate", "yard")}
    for sink in sinks.values():
        _feed(sink, 30)
    browser = open_browser()
    try:
        browser.get(server.url)
        wait = WebDriverWait(browser, 30)
        for name in sinks:
            image = browser.find_element(By.ID, f"image-{name}")
            wait.until(lambda _, image=image: browser.execute_script(
                "return arguments[0].naturalWidth", image) == 160)
            before = image.screenshot_as_png
            _feed(sinks[name], 220, 1)  # a new, brighter frame: the tile must change
            wait.until(lambda _, image=image, before=before: image.screenshot_as_png != before)
            wait.until(lambda _, name=name: shown_counts(browser, name)
                       == as_shown(counts[name]))
        browser.save_screenshot(str(tmp_path / "live-view.png"))
    finally:
        browser.quit()


@pytest.fixture
def with_snapshots(tmp_path):
    """A server whose snapshot folder holds one JPEG, next to a secret outside it."""
    folder = tmp_path / "snapshots"
    (folder / "gate").mkdir(parents=True)
    ok, jpeg = cv2.imencode(".jpg", _image(90))
    (folder / "gate" / "door-1.jpg").write_bytes(jpeg.tobytes())
    (folder / "notes.txt").write_text("not media\n")
    (tmp_path / "secret.jpg").write_bytes(b"SECRET-BYTES")
    (folder / "link.jpg").symlink_to(tmp_path / "secret.jpg")
    state = LiveState(["gate"], stall_s=3600)
    server = LiveServer(state, "127.0.0.1", 0, snapshot_dir=folder)
    server.start()
    yield state, server, folder, jpeg.tobytes()
    server.stop()


def _raw_get(server: LiveServer, path: str) -> tuple[int, bytes]:
    """GET ``path`` exactly as written (urllib and browsers would normalise the dots)."""
    connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_events_come_as_emitted_with_urls_for_snapshots_inside_the_folder(with_snapshots):
    state, server, folder, jpeg = with_snapshots
    crossing = {"type": "line_crossed", "line": "door", "direction": "in", "class": "person",
                "track_id": 7, "stream": "gate", "time": 1.5,
                "snapshot": str(folder / "gate" / "door-1.jpg")}
    state.publish(crossing)
    state.publish({"type": "clip_ready", "stream": "gate", "clip": str(folder / "none.mp4")})
    state.publish({"type": "zone_entered", "zone": "bay", "stream": "gate",
                   "snapshot": str(folder.parent / "secret.jpg")})  # outside: no URL
    status, body = _get(server.url + "api/events")
    answer = json.loads(body)
    assert status == 200 and answer["last"] == 3
    first, clip, outside = answer["events"]
    assert first == {**crossing, "seq": 1, "snapshot_url": "snapshots/gate/door-1.jpg"}
    assert "clip_url" not in clip  # no such file
    assert "snapshot_url" not in outside
    assert _get(server.url + first["snapshot_url"]) == (200, jpeg)
    assert json.loads(_get(server.url + "api/events?after=2")[1])["events"] == [
        {**outside, "seq": 3}]
    assert _get(server.url + "api/events?after=x")[0] == 400


@pytest.mark.parametrize("attack", [
    "/snapshots/../secret.jpg", "/snapshots/%2e%2e/secret.jpg", "/snapshots/..%2fsecret.jpg",
    "/snapshots/gate/../../secret.jpg", "/snapshots/%2e%2e%2f%2e%2e%2fsecret.jpg",
    "/snapshots//{tmp}/secret.jpg", "/snapshots/%2f{tmp}/secret.jpg", "/snapshots/link.jpg",
    "/snapshots/notes.txt", "/snapshots/gate", "/snapshots/gate/door-1.jpg%00.txt",
    "/snapshots/..\\secret.jpg", "/../secret.jpg"])
def test_the_snapshot_route_serves_nothing_outside_its_folder(with_snapshots, attack):
    _, server, folder, _ = with_snapshots
    status, body = _raw_get(server, attack.replace("{tmp}", str(folder.parent).lstrip("/")))
    assert status in (400, 404) and b"SECRET" not in body and b"not media" not in body


def test_without_a_snapshot_folder_nothing_is_served(served, tmp_path):
    state, server = served
    (tmp_path / "a.jpg").write_bytes(b"x")
    state.publish({"type": "line_crossed", "snapshot": str(tmp_path / "a.jpg")})
    assert "snapshot_url" not in json.loads(_get(server.url + "api/events")[1])["events"][0]
    assert _raw_get(server, "/snapshots/a.jpg")[0] == 404


def test_the_page_behind_a_token_shows_frames_and_a_stream_going_down():
    from selenium.webdriver.support.ui import WebDriverWait
    state = LiveState(["gate"], stall_s=3600)
    server = LiveServer(state, "127.0.0.1", 0, token="s3cret")
    server.start()
    browser = open_browser()
    try:
        _feed(LiveSink(state, "gate"), 40)
        browser.get(server.url + "?token=s3cret")
        wait = WebDriverWait(browser, 30)
        wait.until(lambda _: browser.execute_script(
            "return document.getElementById('image-gate').naturalWidth") == 160)
        wait.until(lambda _: browser.find_element("id", "state-gate").text.lower() == "live")
        state.source_state("gate", "down")
        wait.until(lambda _: browser.find_element("id", "state-gate").text.lower()
                   == "reconnecting")
        assert browser.find_element("id", "health").text.lower() == "1 need attention"
        state.source_state("gate", "lost")
        wait.until(lambda _: browser.find_element("id", "state-gate").text.lower() == "lost")
    finally:
        browser.quit()
        server.stop()
