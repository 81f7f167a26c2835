"""Every JSON Lines record of real app runs validates against the schema the package ships
(``frame_record.schema.json``): detection with tracking, a counting line and a zone on the
trained shapes detector, instance segmentation (polygons and RLE) and semantic segmentation."""

from __future__ import annotations

import json

import jsonschema
import onnx
import pytest

from edgefuse.cli.main import main
from edgefuse.vision.scenes.shapes import SAMPLE_CLIP
from edgefuse.vision.streams.sinks import RECORD_SCHEMA
from tests.needs import optional
from tests.vision.models import channel_logits_model, write_clip

cv2 = optional("cv2")
QUIET = ["--backend", "cpu", "--threads", "1", "--stats-every", "0"]


def _valid_records(path):
    validator = jsonschema.Draft202012Validator(json.loads(RECORD_SCHEMA.read_text()))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        errors = sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path))
        assert not errors, (record.get("frame"), [f"{list(e.absolute_path)}: {e.message}"
                                                  for e in errors[:3]])
    return records


@pytest.mark.unit
def test_the_schema_refuses_the_old_size_and_a_track_without_its_detection():
    validator = jsonschema.Draft202012Validator(json.loads(RECORD_SCHEMA.read_text()))
    record = {"frame": 0, "time": 1.0, "mono": 2.0, "pts": 0.0,
              "size": {"width": 64, "height": 48},
              "timings_ms": {}, "latency_ms": 1.0}
    assert validator.is_valid(record)
    assert not validator.is_valid({**record, "size": [48, 64]})
    track = {"id": 1, "class": "a", "class_id": 0, "score": 0.9, "box": [0, 0, 1, 1]}
    assert not validator.is_valid({**record, "tracks": [track]})
    assert validator.is_valid({**record, "tracks": [{**track, "detection": 0}]})


@pytest.mark.torch
def test_detection_with_tracking_a_line_and_a_zone_writes_valid_records(tmp_path, capsys):
    optional("torch")
    optional("scipy")
    config = tmp_path / "detect.yaml"
    config.write_text(
        "track: true\n"
        "lines: [{name: middle, start: [160, 0], end: [160, 240], margin: 2, anchor: center}]\n"
        "zones: [{name: left, polygon: [[0, 0], [160, 0], [160, 240], [0, 240]]}]\n")
    out = tmp_path / "out.jsonl"
    code = main(["detect", "--config", str(config), "--model", "shapes_yolov8", "--source",
                 str(SAMPLE_CLIP), "--max-frames", "90", "--jsonl", str(out), *QUIET])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    records = _valid_records(out)
    kinds = {e["type"] for r in records for e in r.get("events", [])}
    assert {"line_crossed", "zone_entered"} <= kinds  # the schema saw both kinds of event
    assert all(r["size"] == {"width": 320, "height": 240} for r in records)
    fps = cv2.VideoCapture(str(SAMPLE_CLIP)).get(cv2.CAP_PROP_FPS)
    assert all(r["pts"] == pytest.approx(r["frame"] / fps) for r in records)
    for record in records:
        for track in record["tracks"]:
            taken = record["detections"][track["detection"]]
            assert taken["box"] == track["box"] and taken["class"] == track["class"]
    assert captured.out.rstrip().splitlines()[-1].startswith("counts: middle in ")


@pytest.mark.torch
@pytest.mark.parametrize("mask_format", ["polygon", "rle"])
def test_instance_segmentation_writes_valid_records(tmp_path, capsys, mask_format):
    optional("torch")
    from tests.vision.segment.heads import YoloV8SegLike, export  # noqa: PLC0415 - needs torch

    model = tmp_path / "seg.onnx"
    export(YoloV8SegLike(3), model, outputs=("output0", "output1"))
    write_clip(tmp_path / "clip.mp4", frames=4)
    out = tmp_path / "out.jsonl"
    code = main(["segment", "--model", str(model), "--source", str(tmp_path / "clip.mp4"),
                 "--jsonl", str(out), "--class-names", "a,b,c", "--conf", "0.5",
                 "--mask-format", mask_format, *QUIET])
    assert code == 0, capsys.readouterr().err
    records = _valid_records(out)
    assert len(records) == 4 and all(r["instances"] for r in records)
    assert all(r["pts"] == pytest.approx(r["frame"] / 10.0) for r in records)


@pytest.mark.ort
def test_semantic_segmentation_writes_valid_records(tmp_path, capsys):
    onnx.save(channel_logits_model(), tmp_path / "channels.onnx")
    write_clip(tmp_path / "clip.mp4", frames=3)
    out = tmp_path / "out.jsonl"
    code = main(["segment", "--model", str(tmp_path / "channels.onnx"), "--source",
                 str(tmp_path / "clip.mp4"), "--jsonl", str(out), *QUIET])
    assert code == 0, capsys.readouterr().err
    records = _valid_records(out)
    assert len(records) == 3 and all(r["pixels"] for r in records)
    assert records[0]["size"] == {"width": 64, "height": 48}
