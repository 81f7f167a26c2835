"""`edgefuse detect` over several streams at once: one batched session, each stream's tracker,
counts, JSON Lines and video its own, and a stream that is lost reported while the others go
on. The reference for every stream is the same clip run alone."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request

import numpy as np
import onnx
import pytest

from edgefuse.apps import runner
from edgefuse.apps.analytics import AnalyticsConfig, AnalyticsSetup
from edgefuse.apps.models import catalogue_info
from edgefuse.cli.main import main
from edgefuse.errors import InputError, Ref
from edgefuse.model_info import embed
from edgefuse.models.catalogue import CATALOGUE
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from edgefuse.vision.streams.sinks import JsonlSink
from edgefuse.vision.streams.sources import LiveSource, Reconnect
from tests.needs import optional
from tests.vision.events.broker import free_port
from tests.vision.models import write_clip

pytestmark = pytest.mark.ort
cv2 = optional("cv2")
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]
LINE = "lines:\n  - {name: middle, start: [160, 0], end: [160, 240], margin: 2, anchor: center}\n"


@pytest.fixture(scope="module")
def batched_detector(tmp_path_factory):
    """The trained shapes detector exported with a dynamic batch dimension (the catalogue's
    conversion fixes it at 1), its app info embedded."""
    torch = optional("torch")
    entry = CATALOGUE["shapes_yolov8"]
    shape, _ = entry.shapes("full")
    path = tmp_path_factory.mktemp("model") / "shapes_batch.onnx"
    torch.onnx.export(entry.build("full").eval(), (torch.zeros(*shape),), str(path),
                      dynamo=False, input_names=["images"], output_names=["boxes"],
                      dynamic_axes={"images": {0: "batch"}, "boxes": {0: "batch"}},
                      opset_version=17)
    onnx.save(embed(onnx.load(path), catalogue_info(entry, "full")), path)
    return path


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Two different clips of moving shapes that cross x = 160: the sample clip's frames 0-49
    and 50-89."""
    folder = tmp_path_factory.mktemp("clips")
    capture = cv2.VideoCapture(str(SAMPLE_CLIP))
    frames = [capture.read()[1] for _ in range(90)]
    capture.release()
    paths = []
    for name, part in (("a", frames[:50]), ("b", frames[50:])):
        path = folder / f"{name}.mp4"
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 25.0, (320, 240))
        for frame in part:
            writer.write(frame)
        writer.release()
        paths.append(path)
    return paths


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _tracks(records):
    return [[(t["id"], t["class"]) for t in r["tracks"]] for r in records]


def _events(records):
    return [{k: v for k, v in e.items() if k not in ("time", "mono")} for r in records
            for e in r.get("events", [])]


@pytest.mark.torch
def test_two_streams_batch_and_each_matches_its_clip_run_alone(batched_detector, clips,
                                                                tmp_path, capsys):
    config = tmp_path / "cams.yaml"
    config.write_text("track: true\nbatch_wait_ms: 10000\n" + LINE + "sources:\n"
                      f"  - {{name: left, source: '{clips[0]}'}}\n"
                      f"  - {{name: right, url: '{clips[1]}'}}\n")
    (tmp_path / "videos").mkdir()
    code = main(["detect", "--config", str(config), "--model", str(batched_detector),
                 "--jsonl", str(tmp_path / "{name}.jsonl"), "--save", str(tmp_path / "videos"),
                 *QUIET])
    out, err = capsys.readouterr()
    assert code == 0, err
    # the long wait makes every batch wait for both streams while both run: batches of 2
    batches = dict((int(size), int(count)) for count, size in
                   re.findall(r"(\d+) of size (\d+)", out))
    assert batches.get(2, 0) >= 40, out
    assert "batch up to 2 (dynamic batch)" in err
    assert (tmp_path / "videos/left.mp4").is_file() and (tmp_path / "videos/right.mp4").is_file()

    for name, clip, frames in (("left", clips[0], 50), ("right", clips[1], 40)):
        together = _records(tmp_path / f"{name}.jsonl")
        assert [r["frame"] for r in together] == list(range(frames))
        assert {r["stream"] for r in together} == {name}
        alone_config = tmp_path / "alone.yaml"
        alone_config.write_text("track: true\n" + LINE)
        alone_path = tmp_path / f"alone_{name}.jsonl"
        assert main(["detect", "--config", str(alone_config), "--model", str(batched_detector),
                     "--source", str(clip), "--jsonl", str(alone_path), *QUIET]) == 0
        alone = _records(alone_path)
        # a tracker shared by the streams would number the IDs across both: the IDs differ
        assert _tracks(together) == _tracks(alone)
        assert together[-1]["counts"] == alone[-1]["counts"]
        events = _events(together)
        assert events and events == [{**e, "stream": name} for e in _events(alone)]


def test_two_streams_with_one_name_exit_2_before_anything_is_written(detector_onnx, tmp_path,
                                                                     capsys):
    config = tmp_path / "cams.yaml"
    config.write_text("sources:\n  - {name: cam, source: a.mp4}\n  - {name: cam, source: b.mp4}\n")
    out = tmp_path / "out"
    out.mkdir()
    code = main(["detect", "--config", str(config), "--model", str(detector_onnx),
                 "--jsonl", str(out / "{name}.jsonl"), *QUIET])
    assert code == 2
    assert "two streams are named 'cam'" in capsys.readouterr().err
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("name", ["a/b", "cam 1", "{name}"])
def test_a_stream_name_that_cannot_name_files_exits_2(detector_onnx, tmp_path, capsys, name):
    config = tmp_path / "cams.yaml"
    config.write_text(f"sources:\n  - {{name: '{name}', source: a.mp4}}\n")
    assert main(["detect", "--config", str(config), "--model", str(detector_onnx),
                 *QUIET]) == 2
    assert "cannot be used" in capsys.readouterr().err


def test_one_output_file_for_several_streams_exits_2_with_the_placeholder_hint(
        detector_onnx, tmp_path, capsys):
    write_clip(tmp_path / "a.mp4")
    code = main(["detect", "--model", str(detector_onnx), "--source", str(tmp_path / "a.mp4"),
                 "--source", str(tmp_path / "a.mp4"), "--jsonl", str(tmp_path / "out.jsonl"),
                 *QUIET])
    err = capsys.readouterr().err
    assert code == 2
    assert "names one file for 2 streams" in err and "{name}" in err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_stream_output_over_another_streams_source_exits_2(detector_onnx, tmp_path, capsys):
    write_clip(tmp_path / "a.mp4")
    write_clip(tmp_path / "stream1.mp4")
    code = main(["detect", "--model", str(detector_onnx), "--source", str(tmp_path / "a.mp4"),
                 "--source", str(tmp_path / "stream1.mp4"), "--save", str(tmp_path), *QUIET])
    assert code == 2
    assert "would destroy it" in capsys.readouterr().err


@pytest.mark.parametrize("spec", [
    "zones:\n  - {name: bay, polygon: [[0, 0], [70, 0], [70, 40], [0, 40]]}\n",
    "lines:\n  - {name: door, start: [0, 20], end: [65, 20]}\n"])
def test_a_zone_or_line_outside_the_streams_frame_exits_2_and_writes_nothing(
        detector_onnx, tmp_path, capsys, spec):
    write_clip(tmp_path / "a.mp4")  # 64 x 48
    config = tmp_path / "cams.yaml"
    config.write_text(spec)
    code = main(["detect", "--config", str(config), "--model", str(detector_onnx), "--source",
                 str(tmp_path / "a.mp4"), "--jsonl", str(tmp_path / "out.jsonl"), *QUIET])
    assert code == 2
    assert "outside the 64x48 frame" in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


class FramesThenDrop:
    """A camera that gives ``count`` frames, then drops."""

    def __init__(self, count: int) -> None:
        self.left = count

    def read(self):
        if self.left == 0:
            return False, None
        self.left -= 1
        return True, np.full((48, 64, 3), 90, np.uint8)

    def release(self) -> None:
        pass


def dropping_camera(name: str, *, frames: int) -> LiveSource:
    """A live camera that gives ``frames`` frames, drops, and never comes back (one attempt)."""
    devices = [FramesThenDrop(frames)]

    def opener():
        if devices:
            return devices.pop()
        raise InputError("the camera is gone", reference=Ref.BAD_SOURCE)

    return LiveSource(name, opener, reconnect=Reconnect(attempts=1, backoff_s=0.0))


def test_a_lost_stream_is_reported_and_the_other_finishes(detector_onnx, tmp_path, capsys,
                                                          monkeypatch):
    """The scripted camera drops after three frames and its one reconnect attempt fails: it is
    lost (events in its JSON Lines), the clip's stream runs to its end, and the run exits 0."""
    real = runner.open_source

    def opening(spec, **options):
        return (dropping_camera(spec, frames=3) if spec == "scripted-camera"
                else real(spec, **options))

    monkeypatch.setattr(runner, "open_source", opening)
    write_clip(tmp_path / "a.mp4")
    out = tmp_path / "out"
    out.mkdir()
    code = main(["detect", "--model", str(detector_onnx), "--source", str(tmp_path / "a.mp4"),
                 "--source", "scripted-camera", "--jsonl", str(out), *QUIET])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert re.search(r"^lost stream1: .*lost the stream 'scripted-camera'", stdout, re.M), stdout
    assert "stream events: stream1 stream_down 1, stream1 stream_lost 1" in stdout
    assert [r["frame"] for r in _records(out / "stream0.jsonl")] == list(range(12))
    events = [e for r in _records(out / "stream1.jsonl") for e in r.get("events", [])]
    assert [e["type"] for e in events] == ["stream_down", "stream_lost"]
    assert {e["stream"] for e in events} == {"stream1"}


def test_every_stream_lost_exits_with_the_loss(detector_onnx, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "open_source",
                        lambda spec, **options: dropping_camera(spec, frames=2))
    code = main(["detect", "--model", str(detector_onnx), "--source", "cam-a", "--source",
                 "cam-b", *QUIET])
    assert code == 2
    assert "error[source-lost]" in capsys.readouterr().err


@pytest.mark.parametrize(("verb", "text", "message"), [
    ("detect", "source: a.mp4\nsources: [b.mp4]\n", "both 'source' and 'sources'"),
    ("segment", "sources:\n  - {source: a.mp4, lines: [{name: l, start: [0, 0], end: [5, 5]}]}\n",
     "sets lines or zones, which this app does not count"),
])
def test_streams_the_app_cannot_run_exit_2_before_the_model_opens(tmp_path, capsys, verb, text,
                                                                 message):
    config = tmp_path / "cams.yaml"
    config.write_text(text)
    assert main([verb, "--config", str(config), "--model", "absent.onnx", *QUIET]) == 2
    assert message in capsys.readouterr().err


class Recorded:
    """A publisher that keeps what it is given."""

    def __init__(self, into: list) -> None:
        self.publish, self.close = into.append, lambda: None


def test_stream_states_are_published_journalled_counted_and_turn_health(tmp_path):
    """``stream_state`` as a source's down/up/lost reach it: each publisher and the stream's
    JSON Lines get the event, it is counted, and /healthz answers 503 while a stream is down."""
    optional("aiohttp")

    def health(url):
        try:
            with urllib.request.urlopen(url + "healthz", timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    setup = AnalyticsSetup(AnalyticsConfig(serve=("127.0.0.1", 0)), ["gate", "dock"])
    published = []
    setup.publishers.append(Recorded(published))
    journal = JsonlSink(tmp_path / "dock.jsonl", stream="dock")
    try:
        assert health(setup.server.url) == 200
        setup.stream_state("dock", "down", "the stream dropped", journal)
        assert health(setup.server.url) == 503
        setup.stream_state("dock", "up", "reconnected (attempt 1)", journal)
        assert health(setup.server.url) == 200
    finally:
        journal.close()
        setup.close()
    assert [(e["type"], e["stream"]) for e in published] == [("stream_down", "dock"),
                                                             ("stream_up", "dock")]
    records = _records(tmp_path / "dock.jsonl")
    assert [r["events"] for r in records] == [[e] for e in published]
    assert setup.stream_events == {("dock", "stream_down"): 1, ("dock", "stream_up"): 1}


def test_when_a_later_streams_sinks_fail_the_earlier_streams_outputs_are_discarded(
        detector_onnx, tmp_path, capsys, monkeypatch):
    for name in ("a", "b"):
        write_clip(tmp_path / f"{name}.mp4")
    made = runner.stream_sinks

    def second_fails(config, plan, *args):
        if plan.name == "stream1":
            raise InputError("cannot write the second camera's video",
                             reference=Ref.BAD_OUTPUT_PATH)
        return made(config, plan, *args)

    monkeypatch.setattr(runner, "stream_sinks", second_fails)
    out = tmp_path / "out"
    out.mkdir()
    code = main(["detect", "--model", str(detector_onnx), "--source", str(tmp_path / "a.mp4"),
                 "--source", str(tmp_path / "b.mp4"), "--jsonl", str(out / "{name}.jsonl"),
                 *QUIET])
    assert code == 2
    assert "cannot write the second camera's video" in capsys.readouterr().err
    assert list(out.iterdir()) == []  # stream0's staged JSON Lines removed, not committed empty


def test_a_run_that_fails_at_its_first_frame_leaves_no_empty_output(detector_onnx, tmp_path,
                                                                   monkeypatch, capsys):
    write_clip(tmp_path / "a.mp4")
    out = tmp_path / "out"
    out.mkdir()

    def first_frame_fails(self, outputs, geometry, frame=None):
        raise InputError("the zone lies outside the frame", reference=Ref.BAD_CONFIG)

    monkeypatch.setattr("edgefuse.vision.analytics.task.Tracked.postprocess", first_frame_fails)
    code = main(["detect", "--model", str(detector_onnx), "--source", str(tmp_path / "a.mp4"),
                 "--track", "--jsonl", str(out / "a.jsonl"), "--save", str(out / "a.mp4"),
                 *QUIET])
    assert code == 2
    assert "the zone lies outside the frame" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_a_live_view_port_in_use_exits_2_and_writes_nothing(detector_onnx, tmp_path, capsys):
    optional("aiohttp")
    write_clip(tmp_path / "a.mp4")
    out = tmp_path / "out"
    out.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["detect", "--model", str(detector_onnx), "--source", str(tmp_path / "a.mp4"),
                     "--serve", f"127.0.0.1:{port}", "--jsonl", str(out / "a.jsonl"), *QUIET])
    assert code == 2
    assert f"127.0.0.1:{port}" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_a_broker_that_refuses_exits_2_and_writes_nothing(detector_onnx, tmp_path, capsys):
    optional("paho.mqtt.client")
    write_clip(tmp_path / "a.mp4")
    out = tmp_path / "out"
    out.mkdir()
    config = tmp_path / "cams.yaml"  # a port nobody listens on
    config.write_text(f"events: {{mqtt: {{host: 127.0.0.1, port: {free_port()}}}}}\n")
    code = main(["detect", "--config", str(config), "--model", str(detector_onnx), "--source",
                 str(tmp_path / "a.mp4"), "--jsonl", str(out / "a.jsonl"), *QUIET])
    assert code == 2
    assert "cannot connect to the MQTT broker" in capsys.readouterr().err
    assert list(out.iterdir()) == []
