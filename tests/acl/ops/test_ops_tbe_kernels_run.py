"""The TBE kernels' build code runs end to end against a stand-in ``tbe`` (see fake_tbe.py).

Shapes are the ones the kernels are for: a YOLOv8n/YOLOv5s head at 640x640, MobileNet-sized
depthwise layers, plus the sizes that end between two 32-byte blocks (channel and box counts that
are not multiples of 16, detections that are). Each build must reach ``BuildCCE``/``tbe.build``
with every TIK call matching the API's parameter lists, every access inside its tensor and the
unified buffer of an Ascend310B-sized chip; inputs a kernel or a chip does not support must be
refused by name at build time, as ATC would report them.
"""

from __future__ import annotations

import importlib.resources
import importlib.util

import pytest

from edgefuse.acl.ops.depthwise_conv.spec import DEPTHWISE_CONV
from edgefuse.acl.ops.swish.spec import SWISH
from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD, candidate_capacity
from tests.acl.ops import fake_tbe

pytestmark = pytest.mark.standin


@pytest.fixture
def records(monkeypatch):
    return fake_tbe.install(monkeypatch)


def yolo_head_outputs(batch, detections, dtype="float16"):
    return (tensor((batch, detections, 4), dtype), tensor((batch, detections), dtype),
            tensor((batch, detections), "int32"), tensor((batch,), "int32"))


def kernel(spec):
    """The kernel's entry, loaded from the package data with the fake tbe in place; each call
    builds it twice (``fake_tbe.run``) and returns the second build's result."""
    with importlib.resources.as_file(
        importlib.resources.files(spec.package) / spec.kernel_path
    ) as path:
        module_spec = importlib.util.spec_from_file_location(f"kernel_{spec.kernel_name}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    entry = getattr(module, spec.kernel_name)
    return lambda *args, **kwargs: fake_tbe.run(entry, *args, **kwargs)


def tensor(shape, dtype="float16", fmt="ND"):
    return {"shape": tuple(shape), "dtype": dtype, "format": fmt}


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_swish_builds_one_elementwise_kernel(records, dtype):
    x = tensor((1, 4, 80, 80, 16), dtype, "NC1HWC0")
    kernel(SWISH)(x, dict(x), alpha=1.0)
    assert records["dsl"]["name"] == "edgefuse_swish"
    assert len(records["dsl"]["tensor_list"]) == 2


@pytest.mark.parametrize("soc", ["Ascend310", "Ascend310B4", "Ascend310P3", "Ascend910A"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_swish_uses_float32_exp_only_where_the_chip_has_it(monkeypatch, soc, dtype):
    """Ascend310 has float16 vexp only: float32 inputs take their exponent in float16 there."""
    records = fake_tbe.install(monkeypatch, soc)
    x = tensor((1, 2, 40, 40, 16), dtype, "NC1HWC0")
    kernel(SWISH)(x, dict(x), alpha=1.0)
    assert records["dsl"]["name"] == "edgefuse_swish"


@pytest.mark.parametrize("bias", [True, False])
def test_depthwise_conv_builds_for_a_mobilenet_layer(records, bias):
    tik = kernel(DEPTHWISE_CONV)(
        tensor((1, 2, 112, 112, 16), fmt="NC1HWC0"),
        tensor((32, 1, 3, 3), fmt="NCHW"),
        tensor((32,)) if bias else None,
        tensor((1, 2, 56, 56, 16), fmt="NC1HWC0"),
        32,
        strides=(2, 2),
        pads=(1, 1, 1, 1),
    )
    assert tik.built == ("edgefuse_depthwise_conv2d", 3 if bias else 2, 1)
    assert 0 < tik.peak <= fake_tbe.SOC_SPEC["UB_SIZE"]


@pytest.mark.parametrize("channels", [8, 24, 40])
def test_depthwise_conv_reads_exactly_its_weights_and_bias(records, channels):
    """channels x 9 taps and the bias end inside a 32-byte block: no read may pass them."""
    c1 = (channels + 15) // 16
    tik = kernel(DEPTHWISE_CONV)(
        tensor((1, c1, 20, 20, 16), fmt="NC1HWC0"), tensor((channels, 1, 3, 3), fmt="NCHW"),
        tensor((channels,)), tensor((1, c1, 20, 20, 16), fmt="NC1HWC0"), channels,
        pads=(1, 1, 1, 1),
    )
    assert tik.built == ("edgefuse_depthwise_conv2d", 3, 1)


def test_depthwise_conv_refuses_rows_wider_than_the_unified_buffer(records):
    with pytest.raises(RuntimeError, match="column tiling is not implemented"):
        kernel(DEPTHWISE_CONV)(
            tensor((1, 1, 8, 2000, 16), fmt="NC1HWC0"), tensor((16, 1, 5, 5), fmt="NCHW"),
            None, tensor((1, 1, 8, 2000, 16), fmt="NC1HWC0"), 16, pads=(2, 2, 2, 2),
        )


def test_depthwise_conv_refuses_an_output_shape_that_does_not_match(records):
    with pytest.raises(RuntimeError, match="y shape"):
        kernel(DEPTHWISE_CONV)(
            tensor((1, 1, 8, 8, 16), fmt="NC1HWC0"), tensor((16, 1, 3, 3), fmt="NCHW"),
            None, tensor((1, 1, 8, 8, 16), fmt="NC1HWC0"), 16,
        )


@pytest.mark.parametrize(
    ("shape", "objectness", "dtype"),
    [((1, 84, 8400), 0, "float16"), ((1, 85, 25200), 1, "float32"), ((2, 7, 100), 0, "float16")],
    ids=["yolov8n-640", "yolov5s-640", "batch-2"],
)
def test_yolo_head_builds_for_real_head_sizes(records, shape, objectness, dtype):
    batch, detections = shape[0], 300
    tik = kernel(YOLO_HEAD)(
        tensor(shape, dtype),
        tensor((batch, detections, 4), dtype),
        tensor((batch, detections), dtype),
        tensor((batch, detections), "int32"),
        tensor((batch,), "int32"),
        shape[1] - 4 - objectness,
        objectness=objectness,
        max_detections=detections,
    )
    assert tik.built == ("edgefuse_yolo_head", 1, 4)
    assert tik.peak <= fake_tbe.SOC_SPEC["UB_SIZE"]


@pytest.mark.parametrize(
    ("batch", "boxes", "detections", "dtype"),
    [(1, 100, 300, "float32"), (9, 37, 16, "float16"), (8, 16, 64, "float32"),
     (3, 1000, 100, "float16")],
    ids=["rows-end-mid-block", "shortest-rows", "num-detections-one-block", "tile-tail"],
)
def test_yolo_head_moves_exactly_its_rows(records, batch, boxes, detections, dtype):
    """No read past the predictions, no write past an output, whatever the sizes."""
    tik = kernel(YOLO_HEAD)(
        tensor((batch, 6, boxes), dtype), *yolo_head_outputs(batch, detections, dtype), 2,
        max_detections=detections,
    )
    assert tik.built == ("edgefuse_yolo_head", 1, 4)


@pytest.mark.parametrize("soc", ["Ascend310B4", "Ascend310P3", "Ascend910B3"])
def test_yolo_head_builds_on_the_chips_with_its_instructions(monkeypatch, soc):
    fake_tbe.install(monkeypatch, soc)
    tik = kernel(YOLO_HEAD)(tensor((1, 84, 400), "float32"), *yolo_head_outputs(1, 100, "float32"),
                            80, max_detections=100)
    assert tik.built == ("edgefuse_yolo_head", 1, 4)


@pytest.mark.parametrize("soc", ["Ascend310", "Ascend910A"])
def test_yolo_head_refuses_chips_without_vec_sel_mode_2(monkeypatch, soc):
    fake_tbe.install(monkeypatch, soc)
    short = soc.removesuffix("A")
    with pytest.raises(RuntimeError, match=f"vec_sel mode 2 .* which {short} does not have"):
        kernel(YOLO_HEAD)(tensor((1, 84, 400)), *yolo_head_outputs(1, 100), 80,
                          max_detections=100)


def test_yolo_head_refuses_rows_shorter_than_a_block(records):
    with pytest.raises(RuntimeError, match="at least 16 boxes and max_detections >= 16"):
        kernel(YOLO_HEAD)(tensor((1, 84, 400)), *yolo_head_outputs(1, 10), 80, max_detections=10)
    with pytest.raises(RuntimeError, match="got 8 boxes"):
        kernel(YOLO_HEAD)(tensor((1, 84, 8)), *yolo_head_outputs(1, 100), 80, max_detections=100)


def test_yolo_head_refuses_multi_label_and_a_wrong_row_count(records):
    entry = kernel(YOLO_HEAD)
    outputs = [tensor((1, 10, 4)), tensor((1, 10)), tensor((1, 10), "int32"), tensor((1,), "int32")]
    with pytest.raises(RuntimeError, match="multi_label=1 is not implemented"):
        entry(tensor((1, 84, 100)), *outputs, 80, max_detections=10, multi_label=1)
    with pytest.raises(RuntimeError, match=r"must be \[B, 4 \+ 1 \+ 80, N\]"):
        entry(tensor((1, 84, 100)), *outputs, 80, objectness=1, max_detections=10)


def kernel_module(spec):
    with importlib.resources.as_file(
        importlib.resources.files(spec.package) / spec.kernel_path
    ) as path:
        module_spec = importlib.util.spec_from_file_location(f"kernel_{spec.kernel_name}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("boxes", "classes", "detections"),
                         [(8400, 80, 300), (25200, 80, 100), (3200, 2, 16)])
def test_the_host_mirror_of_the_yolo_head_cap_is_the_kernels(records, boxes, classes,
                                                             detections):
    """sim and compile's warning use candidate_capacity; it must be the kernel's _capacity."""
    module = kernel_module(YOLO_HEAD)
    attrs = {"num_classes": classes, "objectness": 0, "score_threshold": 0.001,
             "iou_threshold": 0.45, "max_detections": detections, "max_per_class": 0}
    kernel_cap = module.YoloHead(tensor((1, 4 + classes, boxes)), attrs).capacity
    mirrored = candidate_capacity("ascend310b", attrs, boxes,
                                  ub_bytes=fake_tbe.SOC_SPEC["UB_SIZE"])
    assert mirrored == kernel_cap < boxes


@pytest.mark.parametrize("soc", ["Ascend310", "Ascend910A", "Ascend310B4"])
def test_depthwise_conv_reads_a_bias_shorter_than_a_block_as_the_chip_allows(monkeypatch, soc):
    """8 channels of bias are 16 bytes: element by element where a Scalar reads GM, else the
    covering block through a scratch block (the stand-in refuses the read past the end on the
    chips that have the element-wise way)."""
    fake_tbe.install(monkeypatch, soc)
    tik = kernel(DEPTHWISE_CONV)(
        tensor((1, 1, 12, 12, 16), fmt="NC1HWC0"), tensor((8, 1, 1, 1), fmt="NCHW"),
        tensor((8,)), tensor((1, 1, 12, 12, 16), fmt="NC1HWC0"), 8,
    )
    assert tik.built == ("edgefuse_depthwise_conv2d", 3, 1)


@pytest.mark.parametrize("detections", [4080, 4081, 5000])
def test_yolo_head_narrows_float16_rows_past_255_repeats(records, detections):
    """Issue 30 §4: the box rows are 4 * max_detections elements, one vec_conv repeat per 64;
    past max_detections 4080 they need more than vec_conv's 255 repeats in one instruction."""
    tik = kernel(YOLO_HEAD)(
        tensor((1, 6, 1000), "float16"), *yolo_head_outputs(1, detections, "float16"), 2,
        max_detections=detections,
    )
    assert tik.built == ("edgefuse_yolo_head", 1, 4)
