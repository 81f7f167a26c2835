"""The model catalogue: tiny variants' shapes and decodes, seeded weights, reference naming.

Full-size architectures are only instantiated on the meta device (no memory, no compute): enough to
check their state_dict keys, shapes and parameter counts against the published implementations.
Decoded detections are checked against numpy re-implementations of each reference's decode, fed
with the raw head outputs captured by hooks.
"""

import subprocess
import sys

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.models import CATALOGUE, get_entry
from tests.needs import optional

pytestmark = pytest.mark.torch

torch = optional("torch")

NAMES = sorted(CATALOGUE)


@pytest.fixture(scope="module")
def tiny_models():
    return {name: CATALOGUE[name].build("tiny", seed=0) for name in NAMES}


@pytest.fixture(scope="module")
def tiny_outputs(tiny_models):
    outputs = {}
    for name, model in tiny_models.items():
        example = torch.randn(*CATALOGUE[name].tiny_input_shape, generator=_generator(7))
        with torch.no_grad():
            outputs[name] = model(example)
    return outputs


def _generator(seed: int):
    return torch.Generator().manual_seed(seed)


def _full_on_meta(name: str):
    """The full-size architecture, without weights: for keys, shapes and parameter counts."""
    module_name, _, function = CATALOGUE[name].builder.partition(":")
    factory = getattr(__import__(module_name, fromlist=[function]), function)
    with torch.device("meta"):
        return factory("full")


# --- catalogue entries --------------------------------------------------------------------------


def test_catalogue_names_and_factories(tiny_models):
    """Also after every family module was imported: a submodule named like a factory would
    replace the factory on the package (``edgefuse.models:yolov3`` would name a module)."""
    import inspect

    import edgefuse.models as models

    assert NAMES == sorted(
        [
            "resnet50",
            "mobilenetv2",
            "deeplabv3plus_mobilenetv2",
            "deeplabv3plus_resnet50",
            "yolov3",
            "yolov5s",
            "yolov8n",
            "shapes_yolov8",
            "shapes_deeplabv3plus",
            "dbnet_text",
        ]
    )
    for name, entry in CATALOGUE.items():
        assert entry.name == name
        assert entry.task in ("classify", "detect", "segment")
        assert inspect.isfunction(getattr(models, name)), f"no factory edgefuse.models:{name}"


@pytest.mark.parametrize(
    ("name", "full_out", "tiny_out"),
    [
        ("resnet50", (1, 1000), (1, 1000)),
        ("mobilenetv2", (1, 1000), (1, 1000)),
        ("deeplabv3plus_mobilenetv2", (1, 21, 512, 512), (1, 21, 128, 128)),
        ("deeplabv3plus_resnet50", (1, 21, 512, 512), (1, 21, 128, 128)),
        ("yolov3", (1, 10647, 85), (1, 3 * (3 * 3 + 6 * 6 + 12 * 12), 85)),
        ("yolov5s", (1, 25200, 85), (1, 3 * (12 * 12 + 6 * 6 + 3 * 3), 85)),
        ("yolov8n", (1, 84, 8400), (1, 84, 12 * 12 + 6 * 6 + 3 * 3)),
        ("shapes_yolov8", (1, 10, 1344), (1, 10, 12 * 12 + 6 * 6 + 3 * 3)),
        ("shapes_deeplabv3plus", (1, 7, 256, 256), (1, 7, 128, 128)),
        ("dbnet_text", (1, 1, 160, 160), (1, 1, 64, 64)),
    ],
)
def test_declared_output_shapes(name, full_out, tiny_out):
    entry = CATALOGUE[name]
    assert entry.shapes("full")[1] == full_out
    assert entry.shapes("tiny")[1] == tiny_out


def test_unknown_model_names_the_catalogue():
    with pytest.raises(InputError, match="unknown model 'resnet51'") as info:
        get_entry("resnet51")
    assert info.value.reference == "unknown-model"
    for name in NAMES:
        assert name in info.value.hint


def test_unknown_variant_is_an_input_error():
    with pytest.raises(InputError, match="unknown model variant 'small'") as info:
        get_entry("resnet50").build("small")
    assert info.value.reference == "unknown-variant"
    assert "full, tiny" in info.value.hint


def test_importing_the_catalogue_does_not_import_torch():
    code = "import sys, edgefuse.models; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


# --- tiny variants: forward, weights ------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_tiny_forward_shape_and_sanity(name, tiny_models, tiny_outputs):
    entry, model, output = CATALOGUE[name], tiny_models[name], tiny_outputs[name]
    assert not model.training
    assert tuple(output.shape) == entry.tiny_output_shape
    assert torch.isfinite(output).all()
    assert output.std() > 1e-3
    if entry.task in ("classify", "segment"):
        assert output.abs().max() < 100  # logits of unit scale, not a blow-up


@pytest.mark.parametrize("name", NAMES)
def test_every_batchnorm_has_nontrivial_statistics(name, tiny_models):
    norms = [m for m in tiny_models[name].modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert norms
    for bn in norms:
        assert bn.running_mean.abs().min() > 0
        assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var), atol=0.05)
        assert bn.running_var.min() >= 0.5 and bn.running_var.max() <= 2.0
        assert not torch.allclose(bn.weight, torch.ones_like(bn.weight), atol=0.05)
        assert bn.bias.abs().min() > 0


def test_weights_depend_on_the_seed_only(tiny_models):
    entry = CATALOGUE["yolov5s"]
    rng_before = torch.random.get_rng_state()
    again = entry.build("tiny", seed=0).state_dict()
    other = entry.build("tiny", seed=1).state_dict()
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    reference = tiny_models["yolov5s"].state_dict()
    assert reference.keys() == again.keys()
    assert all(torch.equal(reference[key], again[key]) for key in reference)
    assert not torch.equal(reference["model.0.conv.weight"], other["model.0.conv.weight"])
    assert torch.equal(reference["model.24.anchors"], other["model.24.anchors"])


@pytest.mark.parametrize("name", ["resnet50", "deeplabv3plus_mobilenetv2", "yolov3", "yolov8n"])
def test_builds_are_reproducible(name, tiny_models):
    rebuilt = CATALOGUE[name].build("tiny", seed=0).state_dict()
    for key, value in tiny_models[name].state_dict().items():
        assert torch.equal(value, rebuilt[key]), key


def test_yolov8_dfl_bins_stay_fixed(tiny_models):
    weight = tiny_models["yolov8n"].state_dict()["model.22.dfl.conv.weight"]
    assert torch.equal(weight.flatten(), torch.arange(16, dtype=torch.float32))


# --- full-size architectures against the references ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("resnet50", 25_557_032),  # torchvision
        ("mobilenetv2", 3_504_872),  # torchvision
        ("yolov3", 61_949_149),  # ultralytics/yolov3
        ("yolov5s", 7_235_389),  # ultralytics/yolov5 v6+
        ("yolov8n", 3_157_200),  # ultralytics
    ],
)
def test_full_parameter_counts_match_the_references(name, parameters):
    assert sum(p.numel() for p in _full_on_meta(name).parameters()) == parameters


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "resnet50",
            {
                "conv1.weight": (64, 3, 7, 7),
                "layer1.0.downsample.0.weight": (256, 64, 1, 1),
                "layer1.0.downsample.1.running_var": (256,),
                "layer2.0.conv2.weight": (128, 128, 3, 3),
                "layer3.5.bn3.num_batches_tracked": (),
                "layer4.2.conv3.weight": (2048, 512, 1, 1),
                "fc.weight": (1000, 2048),
                "fc.bias": (1000,),
            },
        ),
        (
            "mobilenetv2",
            {
                "features.0.0.weight": (32, 3, 3, 3),
                "features.1.conv.0.0.weight": (32, 1, 3, 3),
                "features.1.conv.1.weight": (16, 32, 1, 1),
                "features.1.conv.2.running_var": (16,),
                "features.2.conv.0.0.weight": (96, 16, 1, 1),
                "features.2.conv.1.0.weight": (96, 1, 3, 3),
                "features.17.conv.3.running_mean": (320,),
                "features.18.0.weight": (1280, 320, 1, 1),
                "features.18.1.weight": (1280,),
                "classifier.1.weight": (1000, 1280),
            },
        ),
        (
            "deeplabv3plus_mobilenetv2",
            {
                "backbone.low_level_features.0.0.weight": (32, 3, 3, 3),
                "backbone.low_level_features.3.conv.3.running_var": (24,),
                "backbone.high_level_features.0.conv.0.0.weight": (144, 24, 1, 1),
                "backbone.high_level_features.13.conv.2.weight": (320, 960, 1, 1),
                "classifier.project.0.weight": (48, 24, 1, 1),
                "classifier.aspp.convs.0.0.weight": (256, 320, 1, 1),
                "classifier.aspp.convs.3.0.weight": (256, 320, 3, 3),
                "classifier.aspp.convs.4.1.weight": (256, 320, 1, 1),
                "classifier.aspp.project.0.weight": (256, 1280, 1, 1),
                "classifier.classifier.0.weight": (256, 304, 3, 3),
                "classifier.classifier.3.bias": (21,),
            },
        ),
        (
            "deeplabv3plus_resnet50",
            {
                "backbone.conv1.weight": (64, 3, 7, 7),
                "backbone.layer4.2.bn3.running_var": (2048,),
                "classifier.project.0.weight": (48, 256, 1, 1),
                "classifier.aspp.convs.1.0.weight": (256, 2048, 3, 3),
                "classifier.aspp.convs.4.2.running_mean": (256,),
                "classifier.classifier.3.weight": (21, 256, 1, 1),
            },
        ),
        (
            "yolov3",
            {
                "module_list.0.Conv2d.weight": (32, 3, 3, 3),
                "module_list.0.BatchNorm2d.running_var": (32,),
                "module_list.75.Conv2d.weight": (512, 1024, 1, 1),
                "module_list.81.Conv2d.bias": (255,),
                "module_list.87.Conv2d.weight": (256, 768, 1, 1),
                "module_list.93.Conv2d.weight": (255, 512, 1, 1),
                "module_list.99.Conv2d.weight": (128, 384, 1, 1),
                "module_list.105.Conv2d.weight": (255, 256, 1, 1),
            },
        ),
        (
            "yolov5s",
            {
                "model.0.conv.weight": (32, 3, 6, 6),
                "model.2.m.0.cv1.conv.weight": (32, 32, 1, 1),
                "model.8.cv3.bn.running_var": (512,),
                "model.9.cv2.conv.weight": (512, 1024, 1, 1),
                "model.23.m.0.cv2.conv.weight": (256, 256, 3, 3),
                "model.24.m.0.weight": (255, 128, 1, 1),
                "model.24.m.2.bias": (255,),
                "model.24.anchors": (3, 3, 2),
            },
        ),
        (
            "yolov8n",
            {
                "model.0.conv.weight": (16, 3, 3, 3),
                "model.2.m.0.cv1.conv.weight": (16, 16, 3, 3),
                "model.9.cv1.conv.weight": (128, 256, 1, 1),
                "model.21.m.0.cv2.bn.running_mean": (128,),
                "model.22.cv2.0.0.conv.weight": (64, 64, 3, 3),
                "model.22.cv2.2.2.weight": (64, 64, 1, 1),
                "model.22.cv3.1.0.conv.weight": (80, 128, 3, 3),
                "model.22.cv3.2.2.bias": (80,),
                "model.22.dfl.conv.weight": (1, 16, 1, 1),
            },
        ),
    ],
)
def test_full_state_dict_names_and_shapes_follow_the_reference(name, expected):
    state = _full_on_meta(name).state_dict()
    for key, shape in expected.items():
        assert key in state, key
        assert tuple(state[key].shape) == shape, key


def test_yolov3_layer_indices_follow_yolov3_cfg():
    from edgefuse.models.darknet import Route, Shortcut, YOLOLayer

    layers = _full_on_meta("yolov3").module_list
    assert len(layers) == 107
    assert [i for i, m in enumerate(layers) if isinstance(m, YOLOLayer)] == [82, 94, 106]
    assert [m.sources for m in layers if isinstance(m, Route)] == [[79], [85, 61], [91], [97, 36]]
    assert isinstance(layers[4], Shortcut) and layers[4].source == 1
    assert [layers[i].stride for i in (82, 94, 106)] == [32, 16, 8]


def test_yolov5_anchors_are_saved_in_grid_units(tiny_models):
    built = tiny_models["yolov5s"].state_dict()["model.24.anchors"]
    pixels = np.array(
        [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]],
        dtype=np.float32,
    ).reshape(3, 3, 2)
    np.testing.assert_allclose(built.numpy(), pixels / np.array([8, 16, 32]).reshape(3, 1, 1))


def test_output_stride_16_dilates_the_last_stage():
    resnet = _full_on_meta("deeplabv3plus_resnet50").backbone
    assert resnet.layer4[0].conv2.stride == (1, 1) and resnet.layer4[0].conv2.dilation == (1, 1)
    assert resnet.layer4[0].downsample[0].stride == (1, 1)
    assert resnet.layer4[1].conv2.dilation == (2, 2)
    mobile = _full_on_meta("deeplabv3plus_mobilenetv2").backbone.high_level_features
    depthwise = [block.conv[1][0] for block in mobile]
    # VainF: the first block of a dilated stage keeps the previous dilation
    assert [conv.dilation[0] for conv in depthwise] == [1] * 11 + [2] * 3
    assert [conv.stride[0] for conv in depthwise] == [2, 1, 1, 2] + [1] * 10


# --- detection decodes against numpy ----------------------------------------------------------


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _capture(modules, model, shape):
    """The outputs of ``modules`` (in the order given) and the model's, for one seeded input."""
    raw = {}

    def keep(module, _inputs, output):
        raw[module] = output.numpy()

    handles = [module.register_forward_hook(keep) for module in modules]
    example = torch.randn(*shape, generator=_generator(11))
    with torch.no_grad():
        decoded = model(example).numpy()
    for handle in handles:
        handle.remove()
    return [raw[module] for module in modules], decoded


def _anchor_decode(raw, anchors_px, strides):
    """ultralytics' YOLOv3/v5 decode: (2s - 0.5 + grid) * stride, (2s)^2 * anchor; row order."""
    rows = []
    for p, anchors, stride in zip(raw, anchors_px, strides, strict=True):
        _, channels, ny, nx = p.shape
        s = _sigmoid(p.reshape(len(anchors), channels // len(anchors), ny, nx))
        for a, (aw, ah) in enumerate(anchors):
            for y in range(ny):
                for x in range(nx):
                    v = s[a, :, y, x]
                    cx, cy = (2 * v[0] - 0.5 + x) * stride, (2 * v[1] - 0.5 + y) * stride
                    w, h = (2 * v[2]) ** 2 * aw, (2 * v[3]) ** 2 * ah
                    rows.append(np.concatenate([[cx, cy, w, h], v[4:]]))
    return np.stack(rows)[None]


def test_yolov5_decode_matches_numpy(tiny_models):
    model = tiny_models["yolov5s"]
    detect = model.model[-1]
    raw, decoded = _capture(detect.m, model, CATALOGUE["yolov5s"].tiny_input_shape)
    anchors = [
        [(10, 13), (16, 30), (33, 23)],
        [(30, 61), (62, 45), (59, 119)],
        [(116, 90), (156, 198), (373, 326)],
    ]
    np.testing.assert_allclose(decoded, _anchor_decode(raw, anchors, (8, 16, 32)), atol=1e-3)
    _assert_plausible_boxes(decoded[0], scores=decoded[0, :, 4:], size=96, max_stride=32)


def test_yolov3_decode_matches_numpy(tiny_models):
    from edgefuse.models.darknet import YOLOLayer

    model = tiny_models["yolov3"]
    layers = list(model.module_list)
    heads = [layers[i - 1] for i, m in enumerate(layers) if isinstance(m, YOLOLayer)]
    raw, decoded = _capture(heads, model, CATALOGUE["yolov3"].tiny_input_shape)
    anchors = [
        [(116, 90), (156, 198), (373, 326)],
        [(30, 61), (62, 45), (59, 119)],
        [(10, 13), (16, 30), (33, 23)],
    ]
    np.testing.assert_allclose(decoded, _anchor_decode(raw, anchors, (32, 16, 8)), atol=1e-3)
    _assert_plausible_boxes(decoded[0], scores=decoded[0, :, 4:], size=96, max_stride=32)


def test_yolov8_decode_matches_numpy(tiny_models):
    model = tiny_models["yolov8n"]
    detect = model.model[-1]
    heads = [branch[-1] for branch in detect.cv2] + [branch[-1] for branch in detect.cv3]
    raw, decoded = _capture(heads, model, CATALOGUE["yolov8n"].tiny_input_shape)
    boxes_raw, classes_raw = raw[:3], raw[3:]
    columns = []
    for box, cls, stride in zip(boxes_raw, classes_raw, (8, 16, 32), strict=True):
        _, _, ny, nx = box.shape
        bins = box[0].reshape(4, 16, ny, nx)
        prob = np.exp(bins - bins.max(1, keepdims=True))
        prob /= prob.sum(1, keepdims=True)
        left, top, right, bottom = (prob * np.arange(16).reshape(1, 16, 1, 1)).sum(1)
        gx, gy = np.meshgrid(np.arange(nx) + 0.5, np.arange(ny) + 0.5)
        cx, cy = gx + (right - left) / 2, gy + (bottom - top) / 2
        w, h = left + right, top + bottom
        xywh = np.stack([cx, cy, w, h]) * stride
        columns.append(np.concatenate([xywh, _sigmoid(cls[0])]).reshape(84, ny * nx))
    np.testing.assert_allclose(decoded, np.concatenate(columns, 1)[None], atol=1e-3)
    rows = decoded[0].T
    _assert_plausible_boxes(rows, scores=rows[:, 4:], size=96, max_stride=32, reach=8)


def _assert_plausible_boxes(rows, *, scores, size, max_stride, reach=1):
    """Centres within the decode's reach of the image, positive sizes, scores not all equal."""
    margin = reach * max_stride
    assert rows[:, :2].min() > -margin and rows[:, :2].max() < size + margin
    assert rows[:, 2:4].min() > 0 and rows[:, 2:4].max() < 4 * 373
    assert scores.min() >= 0 and scores.max() <= 1
    assert scores.std() > 1e-4
