"""`edgefuse demo`: the README's first command, on the first frames of the clip so the suite
stays fast (the multi-camera step runs its own short clips). Its claims are checked here without
the demo's own scoring: the optimized model against the export on ONNX Runtime, the JSON Lines
boxes against the clip's labels by a plain IoU match, the frames in the videos, each camera's
counts against true crossings taken from the generator's labels."""

import contextlib
import io
import json
import re
from collections import Counter

import numpy as np
import onnx
import pytest

from edgefuse import model_info
from edgefuse.cli.main import main
from edgefuse.demo.multi_camera import CAMERAS, SCENE_SEED
from edgefuse.demo.multi_camera import FPS as CAMERA_FPS
from edgefuse.demo.multi_camera import FRAMES as CAMERA_FRAMES
from edgefuse.demo.multi_camera import SIZE as CAMERA_SIZE
from edgefuse.models import shapes
from edgefuse.reference.feeds import input_specs, random_feeds
from edgefuse.reference.onnx_runner import run_onnx
from edgefuse.runtime import open_session
from edgefuse.vision.scenes.shapes import CLASSES, SAMPLE_CLIP, SceneGenerator
from tests.acl.models import put_fake_atc_on_path
from tests.browser import chromium, play, served_folder
from tests.needs import optional

pytestmark = [pytest.mark.torch, pytest.mark.ort]

FRAMES = 8


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    optional("torch")
    cv2 = optional("cv2")
    workdir = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["demo", "--workdir", str(workdir), "--max-frames", str(FRAMES),
                     "--threads", "1"])
    return code, printed.getvalue(), workdir, cv2


def test_demo_passes_its_gates_and_prints_the_summary(demo):
    code, printed, _, _ = demo
    assert code == 0
    assert printed.count("PASSED") >= 4  # parity and FP16 for both models
    for metric in ("AP50", "mIoU"):  # FP32 -> FP16 -> INT8, the INT8 figure marked
        assert re.search(rf"{metric} [01]\.\d{{3}} -> [01]\.\d{{3}} -> [01]\.\d{{3}} "
                         r"\(host prediction\)", printed), printed
    assert "compile.sh (no ATC here)" in printed
    floors = [float(f) for f in re.findall(r"(\d+\.\d{3}) ms per frame(?! \(host)", printed)]
    int8_floors = [float(f) for f in re.findall(r"(\d+\.\d{3}) ms per frame \(host "
                                                r"prediction\)", printed)]
    assert len(floors) == len(int8_floors) == 2 and all(f > 0 for f in floors), printed
    # at most twice the FP16 peak, and one byte a value: lower, never below half (0.001: rounding)
    assert all(f / 2 - 0.001 <= i < f for f, i in zip(floors, int8_floors, strict=True)), printed
    assert "(host prediction): an INT8 figure no board has confirmed" in printed
    # no board here: both apps ran their FP16 builds on the simulated board, and said so
    assert len(re.findall(r"\d+ \(\d+\) on sim", printed)) == 2, printed
    assert "WARNING" not in printed


def test_the_detector_is_built_with_the_yolo_head_and_agrees_with_the_host_decode(demo):
    _, printed, workdir, _ = demo
    build = workdir / "shapes_yolov8" / "build"
    manifest = json.loads((build / "manifest.json").read_text())
    assert manifest["soc"] == "Ascend310B4"
    assert manifest["custom_ops"]["required"] is True
    assert [op["onnx"] for op in manifest["custom_ops"]["ops"]] == ["edgefuse::YoloHead"]
    assert [o["name"] for o in manifest["outputs"]] == ["boxes", "scores", "classes",
                                                        "num_detections"]
    app = model_info.from_onnx(onnx.load(build / manifest["model"]))
    assert app.postprocess.layout == "yolo_head"
    first = json.loads((workdir / "detect.jsonl").read_text().splitlines()[0])
    assert first["layout"] == "yolo_head"  # the app read the op's rows, it decoded nothing
    segmenter = json.loads((workdir / "shapes_deeplabv3plus" / "build" / "manifest.json")
                           .read_text())
    assert segmenter["custom_ops"]["required"] is False
    assert re.search(rf"YoloHead build vs host decode \*\s+{FRAMES}/{FRAMES} frames, worst IoU "
                     r"0\.9\d\d\s+n/a", printed), printed


def test_the_int8_emulation_quantizes_every_conv_per_channel_and_stays_near_fp32(demo):
    """The INT8 row's model: each Conv reads INT8 weights (one scale per output channel) and an
    8-bit activation, and on a frame of the clip it stays near FP32 without being FP32."""
    cv2 = demo[3]
    for name in ("shapes_yolov8", "shapes_deeplabv3plus"):
        folder = demo[2] / name
        fp32 = onnx.load(folder / "opt.onnx")
        emulated = onnx.load(folder / "int8" / "host_int8.qdq.onnx")
        made = {o for node in emulated.graph.node for o in node.output}
        weights = {i.name: i for i in emulated.graph.initializer}
        dequantized = {n.output[0]: n for n in emulated.graph.node
                       if n.op_type == "DequantizeLinear"}
        convs = [n for n in emulated.graph.node if n.op_type == "Conv"]
        assert len(convs) == sum(n.op_type == "Conv" for n in fp32.graph.node)
        for conv in convs:
            data, weight = (dequantized[i] for i in conv.input[:2])
            assert data.input[0] in made  # the activation went through QuantizeLinear
            int8 = onnx.numpy_helper.to_array(weights[weight.input[0]])
            scales = onnx.numpy_helper.to_array(weights[weight.input[1]])
            assert int8.dtype == np.int8 and scales.shape == (int8.shape[0],), conv.name
        capture = cv2.VideoCapture(str(SAMPLE_CLIP))
        frame = capture.read()[1]
        capture.release()
        info = model_info.from_onnx(fp32)
        feeds = {"input": info.preprocess(frame)[0]}
        expected = next(iter(run_onnx(fp32, feeds).values())).ravel()
        actual = next(iter(run_onnx(emulated, feeds).values())).ravel()
        cosine = float(expected @ actual / np.linalg.norm(expected) / np.linalg.norm(actual))
        assert 0.99 < cosine < 1 - 1e-7, (name, cosine)


def test_the_int8_calibration_folders_compile_as_the_demo_says(demo, tmp_path, monkeypatch):
    """`edgefuse compile ... --int8 <model>/int8`, as the INT8 step prints it, through the ATC
    stand-in, which checks the compression config, the .bin files and the shapes."""
    put_fake_atc_on_path(monkeypatch)
    for name in ("shapes_yolov8", "shapes_deeplabv3plus"):
        folder = demo[2] / name
        assert main(["compile", str(folder / "opt.onnx"), "--soc", "Ascend310B4", "-o",
                     str(tmp_path / name), "--int8", str(folder / "int8")]) == 0, name
        assert (tmp_path / name / "model.om").is_file()


def test_optimize_folds_every_batchnorm_of_the_export_and_keeps_its_outputs(demo):
    _, _, workdir, _ = demo
    exported = onnx.load(workdir / "shapes_yolov8" / "export.onnx")
    optimized = onnx.load(workdir / "shapes_yolov8" / "opt.onnx")
    assert Counter(n.op_type for n in exported.graph.node)["BatchNormalization"] > 0
    assert "BatchNormalization" not in {n.op_type for n in optimized.graph.node}
    feeds = random_feeds(input_specs(exported), seed=11)
    expected = next(iter(run_onnx(exported, feeds).values()))
    actual = next(iter(run_onnx(optimized, feeds).values()))
    np.testing.assert_allclose(actual, expected, rtol=1e-3, atol=1e-3)


def test_the_detection_log_finds_the_labelled_objects_of_the_clip(demo):
    _, _, workdir, _ = demo
    records = [json.loads(line) for line in (workdir / "detect.jsonl").read_text().splitlines()]
    assert [r["frame"] for r in records] == list(range(FRAMES))
    clip = json.loads(shapes.RECORD_FILE.read_text())["clip"]
    scenes = SceneGenerator(clip["scene_seed"], tuple(clip["size"])).clip(
        clip["clip_index"], FRAMES, clip["fps"])
    found = total = 0
    for scene, frame in zip(scenes, records, strict=True):
        for box, cls in zip(scene.boxes, scene.classes, strict=True):
            total += 1
            found += any(d["class"] == CLASSES[cls] and _iou(box, d["box"]) >= 0.5
                         for d in frame["detections"])
    assert total > 0 and found / total >= 0.8


def test_the_annotated_videos_hold_every_frame(demo):
    _, _, workdir, cv2 = demo
    for name in ("detect.mp4", "segment.mp4"):
        capture = cv2.VideoCapture(str(workdir / name))
        assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == FRAMES
        capture.release()
    segments = [json.loads(line) for line in (workdir / "segment.jsonl").read_text().splitlines()]
    assert len(segments) == FRAMES and all(len(r["pixels"]) > 1 for r in segments)


def test_the_demos_videos_play_in_a_browser(demo):
    """Each video the demo writes is one Chromium plays (readyState >= 2, time advancing)."""
    _, _, workdir, _ = demo
    names = sorted(path.relative_to(workdir).as_posix() for path in workdir.rglob("*.mp4"))
    assert {"detect.mp4", "segment.mp4"} <= set(names) and len(names) >= 2 + len(CAMERAS)
    driver = chromium()
    try:
        with served_folder(workdir) as url:
            states = {name: play(driver, url, name) for name in names}
    finally:
        driver.quit()
    assert all(s["why"] == "playing" and s["readyState"] >= 2 for s in states.values()), states


def test_each_camera_counts_the_true_crossings_of_its_own_line(demo):
    _, printed, workdir, _ = demo
    truths = []
    for camera in CAMERAS:
        records = [json.loads(line)
                   for line in (workdir / f"{camera.name}.jsonl").read_text().splitlines()]
        assert [r["frame"] for r in records] == list(range(CAMERA_FRAMES))
        assert {r["stream"] for r in records} == {camera.name}
        assert [r["pts"] for r in records] == pytest.approx(
            [index / CAMERA_FPS for index in range(CAMERA_FRAMES)], abs=1e-6)  # rounded to 1 µs
        counts = records[-1]["counts"]["lines"]["line"]
        truth = _true_crossings(camera)
        assert {way: sum(counts[way].values()) for way in ("in", "out")} == truth, camera
        truths.append(truth)
    assert len({tuple(t.values()) for t in truths}) == len(CAMERAS)  # a mix-up would show
    row = next(line for line in printed.splitlines() if line.startswith("line in / out"))
    cells = re.findall(r"(\d+) / (\d+) \((\d+) / (\d+)\)", row)
    assert [tuple(int(v) for v in cell) for cell in cells] == [
        (t["in"], t["out"], t["in"], t["out"]) for t in truths]


def test_the_table_scores_each_cameras_tracking(demo):
    _, printed, _, _ = demo
    row = next(line for line in printed.splitlines() if line.startswith("tracking vs truth"))
    scores = [float(v) for v in re.findall(r"(-?\d\.\d{3})", row)]
    assert len(scores) == 2 * len(CAMERAS) and all(0.5 < s <= 1.0 for s in scores), row
    switches = next(line for line in printed.splitlines() if line.startswith("ID switches"))
    assert len(re.findall(r"\b\d+\b", switches)) == len(CAMERAS), switches


def test_the_cameras_ran_as_batches_on_the_detectors_batch_gears(demo):
    _, printed, workdir, _ = demo
    detector = json.loads((workdir / "shapes_yolov8" / "build" / "manifest.json").read_text())
    assert detector["gears"]["dynamic_batch"] == [1, 2, 4]
    assert detector["gears"]["dims"] == {"input": [0]}
    segmenter = json.loads((workdir / "shapes_deeplabv3plus" / "build" / "manifest.json")
                           .read_text())
    assert segmenter["gears"] is None
    row = next(line for line in printed.splitlines() if line.startswith("batches:"))
    sizes = {int(size): int(count) for count, size in re.findall(r"(\d+) of size (\d+)", row)}
    assert sum(size * count for size, count in sizes.items()) == len(CAMERAS) * CAMERA_FRAMES
    assert sizes.get(len(CAMERAS), 0) > 0, row  # one frame of each camera in one batch
    assert "batch gears [1, 2, 4]" in row


def test_a_batch_between_gears_gives_each_frame_its_own_detections(demo):
    """Three frames (gear 4's batch) through the YoloHead build at once: each frame's rows are
    the ones it gets alone (an NMS that mixes frames, or a row shifted, shows here)."""
    _, _, workdir, _ = demo
    scenes = SceneGenerator(SCENE_SEED, shapes.DETECTOR_INPUT).clip(1, 3, CAMERA_FPS)
    frames = np.stack([s.image.transpose(2, 0, 1) / np.float32(255) for s in scenes])
    with open_session(workdir / "shapes_yolov8" / "build", backends="sim") as session:
        batched = session.run({"input": frames})
        alone = [session.run({"input": frame[None]}) for frame in frames]
    assert {name: array.shape[0] for name, array in batched.items()} == dict.fromkeys(batched, 3)
    assert all(result["num_detections"][0] > 0 for result in alone)
    for index, result in enumerate(alone):
        for name, array in result.items():
            np.testing.assert_array_equal(batched[name][index:index + 1], array)


def test_the_camera_videos_play_every_frame(demo):
    _, _, workdir, cv2 = demo
    for camera in CAMERAS:
        capture = cv2.VideoCapture(str(workdir / f"{camera.name}.mp4"))
        assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == CAMERA_FRAMES
        shapes_read = []
        while (frame := capture.read()[1]) is not None:
            shapes_read.append(frame.shape)
        capture.release()
        assert shapes_read == [(*CAMERA_SIZE, 3)] * CAMERA_FRAMES


def _true_crossings(camera) -> dict[str, int]:
    """The generator's labels: each identity's bottom-centre path against the camera's segment,
    by orientation tests (``in``: ending right of start -> end, y down)."""
    scenes = SceneGenerator(SCENE_SEED, CAMERA_SIZE).clip(camera.clip_index, CAMERA_FRAMES,
                                                          CAMERA_FPS)
    last, counts = {}, {"in": 0, "out": 0}
    a, b = np.array(camera.start), np.array(camera.end)
    for scene in scenes:
        for object_id, box in zip(scene.ids, scene.boxes, strict=True):
            p = np.array([(box[0] + box[2]) / 2, box[3]], np.float64)
            if _orient(a, b, p) == 0:  # on the line: the side it was on still holds
                continue
            q = last.get(int(object_id))
            last[int(object_id)] = p
            if q is not None and _orient(a, b, q) * _orient(a, b, p) < 0 \
                    and _orient(q, p, a) * _orient(q, p, b) <= 0:
                counts["in" if _orient(a, b, p) > 0 else "out"] += 1
    return counts


def _orient(a, b, c) -> float:
    return float((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]))


def _iou(a, b) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
