"""The YoloHead paths on the board's terms: the decomposition compiles for every chip (its NMS
thresholds rendered as constants), survives CANN's -1-padded NMS output, which sim reproduces,
and a custom-op build drops the candidates past the kernel's cap on sim as on the board."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from onnx import TensorProto, numpy_helper

from edgefuse import open_session
from edgefuse.acl.compile.compile import compile_model
from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD, candidate_capacity
from edgefuse.fallback.sim_device_ops import pad_nms_like_cann
from edgefuse.optimize.append_yolo_head import YoloHeadOptions, append_yolo_head
from edgefuse.reference.onnx_runner import run_onnx
from tests.model_builders import save

pytestmark = pytest.mark.ort

CLASSES = 2


@pytest.fixture(autouse=True)
def no_atc(monkeypatch):
    monkeypatch.setenv("PATH", "")  # compile writes the build; there is no OM here


def raw_yolov8(boxes: int) -> onnx.ModelProto:
    """predictions [1, 4 + CLASSES, boxes] straight through: the head's input is the feed."""
    graph = oh.make_graph(
        [oh.make_node("Identity", ["x"], ["predictions"])], "raw",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4 + CLASSES, boxes])],
        [oh.make_tensor_value_info("predictions", TensorProto.FLOAT, [1, 4 + CLASSES, boxes])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=9)


def head_model(boxes: int, **options) -> onnx.ModelProto:
    return append_yolo_head(raw_yolov8(boxes), YoloHeadOptions(layout="yolov8", **options))


def overlapping_predictions(boxes: int, seed: int = 0) -> np.ndarray:
    """Boxes in a few clusters, so NMS suppresses and several classes keep boxes."""
    rng = np.random.default_rng(seed)
    centres = rng.choice([20.0, 60.0, 100.0], size=(2, boxes)) + rng.uniform(-3, 3, (2, boxes))
    sizes = rng.uniform(10, 30, (2, boxes))
    scores = rng.uniform(0, 1, (CLASSES, boxes))
    return np.concatenate([centres, sizes, scores])[None].astype(np.float32)


def nms_inputs(node: onnx.NodeProto, model: onnx.ModelProto) -> list[np.ndarray | None]:
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for other in model.graph.node:
        if other.op_type == "Constant" and other.attribute[0].name == "value":
            constants[other.output[0]] = numpy_helper.to_array(other.attribute[0].t)
    return [constants.get(name) for name in node.input[2:5]]


# ---- item 1: --no-custom-ops works for YoloHead --------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend310", "Ascend310B4", "Ascend910A"])
@pytest.mark.parametrize(("max_per_class", "limit"), [(0, 20), (7, 7)])
def test_the_decomposition_compiles_with_constant_nms_thresholds(tmp_path, soc, max_per_class,
                                                                limit):
    """Before: compile refused its own fallback ([nms-constant-thresholds]) for every chip."""
    source = save(head_model(64, max_detections=20, max_per_class=max_per_class,
                             iou_threshold=0.5, score_threshold=0.3), tmp_path / "head.onnx")
    result = compile_model(source, soc, tmp_path / "build", custom_ops=False)
    assert result.op_support.ok and result.decomposed == {"YoloHead": 1}
    prepared = onnx.load(tmp_path / "build" / "model.onnx")
    (nms,) = [n for n in prepared.graph.node if n.op_type == "NonMaxSuppression"]
    limit_value, iou, score = nms_inputs(nms, prepared)
    assert int(limit_value) == limit
    assert float(iou) == pytest.approx(0.5) and float(score) == pytest.approx(0.3)


def test_sim_returns_nms_rows_as_cann_pads_them(tmp_path):
    """CANN's NMS output: max_output_boxes_per_class * B * C rows, the unused ones -1."""
    graph = oh.make_graph(
        [oh.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "score"],
                      ["selected"], center_point_box=1)],
        "nms",
        [oh.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 6, 4]),
         oh.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, 6])],
        [oh.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])],
        [numpy_helper.from_array(np.array([3], np.int64), "limit"),
         numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
         numpy_helper.from_array(np.array([0.2], np.float32), "score")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 11)], ir_version=7)
    centres = np.array([[10, 10], [30, 10], [50, 10], [10, 30], [30, 30], [50, 30]], np.float32)
    feeds = {"boxes": np.concatenate([centres, np.full((6, 2), 8, np.float32)], axis=1)[None],
             "scores": np.array([[[0.9, 0.1, 0.8, 0.1, 0.1, 0.1],
                                  [0.1, 0.7, 0.1, 0.1, 0.1, 0.1]]], np.float32)}
    exact = run_onnx(model, feeds)["selected"]
    padded = run_onnx(pad_nms_like_cann(model), feeds)["selected"]
    assert padded.shape == (3 * 1 * 2, 3) and len(exact) == 3
    np.testing.assert_array_equal(padded[: len(exact)], exact)
    assert (padded[len(exact):] == -1).all()
    build = tmp_path / "build"
    compile_model(save(model, tmp_path / "nms.onnx"), "Ascend310B4", build,
                  precision="must_keep_origin_dtype")
    with open_session(build, backends="sim") as session:
        np.testing.assert_array_equal(session.run(feeds)["selected"], padded)


@pytest.mark.parametrize("max_per_class", [0, 2])
def test_the_decomposition_on_sim_ignores_the_padded_rows(tmp_path, max_per_class):
    """sim pads the decomposition's NMS as CANN does; the -1 rows go to a dummy slot, so the
    result is still the op's numpy reference. Gathered as indices (the decomposition before),
    each -1 row read the last box's score into a spare column and returned a box that does not
    exist; the last box scores highest here so that it shows."""
    model = head_model(64, max_detections=16, max_per_class=max_per_class, score_threshold=0.9)
    build = tmp_path / "build"
    compile_model(save(model, tmp_path / "head.onnx"), "Ascend310B4", build, custom_ops=False,
                  precision="must_keep_origin_dtype")
    x = overlapping_predictions(64)
    x[0, 4:] *= 0.8
    x[0, 4, [5, 20, 40]] = 0.95
    x[0, 5, 63] = 0.97
    expected = YOLO_HEAD.reference([x], num_classes=CLASSES, max_detections=16,
                                   max_per_class=max_per_class, score_threshold=0.9)
    with open_session(build, backends="sim") as session:
        got = session.run({"x": x})
    assert 2 <= got["num_detections"][0] <= 4  # far fewer rows than NMS's 16 x 2 padded ones
    for name, want in zip(("boxes", "scores", "classes", "num_detections"), expected,
                          strict=True):
        np.testing.assert_array_equal(got[name], want, err_msg=name)


# ---- item 2: the kernel's candidate cap ------------------------------------------------------


BOXES_PAST_CAP = 3200


def capped_reference(x: np.ndarray, capacity: int, **attrs) -> list:
    """The reference on the candidates the kernel keeps: the first ``capacity`` boxes (in box
    order) whose best score passes the threshold; the rest get zero scores."""
    best = x[0, 4:].max(axis=0)
    rank = np.cumsum(best > attrs["score_threshold"])
    kept = x.copy()
    kept[0, 4:, rank > capacity] = 0
    return YOLO_HEAD.reference([kept], num_classes=CLASSES, **attrs)


def test_sim_drops_the_candidates_past_the_kernel_cap_and_compile_warns(tmp_path, caplog):
    attrs = {"max_detections": 16, "score_threshold": 0.001}
    capacity = candidate_capacity("ascend310b", {"num_classes": CLASSES, **attrs})
    assert capacity == 2944  # the kernel's formula for the 310B's 248 KiB of UB, max_detections=16
    model = head_model(BOXES_PAST_CAP, max_detections=16, score_threshold=0.001)
    build = tmp_path / "build"
    with caplog.at_level(logging.WARNING):
        compile_model(save(model, tmp_path / "head.onnx"), "Ascend310B4", build,
                      precision="must_keep_origin_dtype")
    assert "score_threshold 0.001 with 3200 boxes" in caplog.text and "2944" in caplog.text
    record = json.loads((build / "manifest.json").read_text())["custom_ops"]
    assert len(record["warnings"]) == 1
    # the best boxes come last: the kernel never sees them, ONNX Runtime does
    x = overlapping_predictions(BOXES_PAST_CAP)
    x[0, 4:, :] *= 0.5
    x[0, 4, -50:] = 0.99
    with open_session(build, backends="sim") as sim:
        on_sim = sim.run({"x": x})
    on_cpu = run_onnx(model, {"x": x})  # ONNX Runtime on the host: every candidate
    expected = capped_reference(x, capacity, **attrs)
    for name, want in zip(("boxes", "scores", "classes", "num_detections"), expected,
                          strict=True):
        np.testing.assert_array_equal(on_sim[name], want, err_msg=name)
    assert on_cpu["scores"][0, 0] == np.float32(0.99) > on_sim["scores"][0, 0]


def test_no_warning_at_predict_thresholds_or_without_the_kernel(tmp_path, caplog):
    model = head_model(BOXES_PAST_CAP, max_detections=16, score_threshold=0.25)
    with caplog.at_level(logging.WARNING):
        compile_model(save(model, tmp_path / "head.onnx"), "Ascend310B4", tmp_path / "a")
        low = head_model(BOXES_PAST_CAP, max_detections=16, score_threshold=0.001)
        compile_model(save(low, tmp_path / "low.onnx"), "Ascend310B4", tmp_path / "b",
                      custom_ops=False)  # CANN's NonMaxSuppression has no such cap
    assert "candidates" not in caplog.text


@pytest.mark.parametrize(("options", "warned"), [
    ({"max_detections": 1000}, "up to 1000 boxes per class (max_detections)"),
    ({"max_detections": 1000, "max_per_class": 701}, "up to 701 boxes per class (max_per_class)"),
    ({"max_detections": 1000, "max_per_class": 700}, None),
    ({"max_detections": 700}, None),
])
def test_a_decomposed_head_asking_cann_nms_for_more_than_700_is_warned(tmp_path, caplog, options,
                                                                       warned):
    """Issue 30 §4: CANN's NonMaxSuppression documents max_output_boxes_per_class <= 700."""
    model = head_model(BOXES_PAST_CAP, score_threshold=0.25, **options)
    with caplog.at_level(logging.WARNING):
        compile_model(save(model, tmp_path / "head.onnx"), "Ascend310B4", tmp_path / "build",
                      custom_ops=False)
    record = json.loads((tmp_path / "build" / "manifest.json").read_text())["custom_ops"]
    if warned is None:
        assert "above the 700" not in caplog.text and "warnings" not in record
    else:
        assert warned in caplog.text and "above the 700 CANN documents" in caplog.text
        assert [w for w in record["warnings"] if warned in w]
