"""The DBNet text detector: PaddleOCR's DBFPN and DB head arithmetic, the export, the trained
weights (they load without a network and find the words of generated images), and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from edgefuse.convert import convert
from edgefuse.errors import ModelLoadError
from edgefuse.metrics.text import word_scores
from edgefuse.models import CATALOGUE, dbnet_text
from edgefuse.reference.onnx_runner import run_onnx
from edgefuse.vision.detect.text_boxes import text_boxes
from edgefuse.vision.scenes.text import text_scene
from tests.needs import optional

pytestmark = pytest.mark.torch

torch = optional("torch")
optional("cv2")
ENTRY = CATALOGUE["dbnet_text"]
# Scenes of a seed neither the training pool (0) nor its held-out figures (1000) used.
TEST_SEED = 3000
# Measured with the shipped weights on scenes TEST_SEED 0..7: 23 of 23 words found, no false box
# (recall and precision 1.0); on 300 held-out scenes the training record (weights/dbnet_text.json)
# says recall 0.935, precision 0.981. The bounds leave room for a retrained model, not for a
# broken one (random weights, or a preprocessing that drops the mean/std, find ~no words).
MIN_RECALL, MIN_PRECISION = 0.8, 0.8


@pytest.fixture(scope="module")
def tiny():
    return ENTRY.build("tiny", seed=0)


def test_tiny_output_is_a_probability_map_of_the_input_size(tiny):
    x = torch.randn(2, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = tiny(x)
    assert tuple(y.shape) == (2, 1, 64, 96)
    assert float(y.min()) >= 0.0 and float(y.max()) <= 1.0 and float(y.std()) > 1e-4


def test_the_neck_and_head_compute_paddleocrs_dbfpn_and_db_head(tiny):
    """Recomputed from the module's weights with plain functional calls: lateral 1x1 convs,
    top-down nearest x2 sums, 3x3 convs, upsampling to stride 4, concat p5..p2; then
    conv-BN-ReLU, ConvTranspose-BN-ReLU, ConvTranspose, sigmoid."""
    F = torch.nn.functional
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        c2, c3, c4, c5 = tiny.backbone(x)
        assert [c.shape[-1] for c in (c2, c3, c4, c5)] == [16, 8, 4, 2]  # strides 4..32
        neck = tiny.neck
        in2, in3, in4, in5 = (F.conv2d(c, conv.weight)
                              for c, conv in zip((c2, c3, c4, c5), neck.lateral, strict=True))
        out4 = in4 + F.interpolate(in5, scale_factor=2, mode="nearest")
        out3 = in3 + F.interpolate(out4, scale_factor=2, mode="nearest")
        out2 = in2 + F.interpolate(out3, scale_factor=2, mode="nearest")
        p = [F.conv2d(t, conv.weight, padding=1)
             for t, conv in zip((out2, out3, out4, in5), neck.smooth, strict=True)]
        fuse = torch.cat([F.interpolate(p[3], scale_factor=8, mode="nearest"),
                          F.interpolate(p[2], scale_factor=4, mode="nearest"),
                          F.interpolate(p[1], scale_factor=2, mode="nearest"), p[0]], dim=1)
        head = tiny.head
        h = F.relu(head[1](F.conv2d(fuse, head[0].weight, padding=1)))
        h = F.relu(head[4](F.conv_transpose2d(h, head[3].weight, head[3].bias, stride=2)))
        expected = torch.sigmoid(F.conv_transpose2d(h, head[6].weight, head[6].bias, stride=2))
        torch.testing.assert_close(tiny(x), expected, rtol=1e-5, atol=1e-6)


def test_the_width_multiplier_scales_every_part():
    from edgefuse.models.dbnet import DBNet

    narrow, wide = DBNet(width=0.25), DBNet(width=0.5)
    assert narrow.backbone.out_channels == [8, 8, 24, 80]
    assert wide.backbone.out_channels == [16, 16, 48, 160]
    assert (narrow.neck.out_channels, wide.neck.out_channels) == (32, 64)
    assert sum(p.numel() for p in narrow.parameters()) < sum(p.numel() for p in wide.parameters())


def test_the_export_has_one_output_and_onnx_runtime_agrees_with_torch(tiny):
    model = convert(tiny, inputs=ENTRY.tiny_input_shape, exporter="torchscript")
    assert len(model.graph.output) == 1  # no threshold map, no binary map
    ops = {node.op_type for node in model.graph.node}
    assert {"ConvTranspose", "Resize", "Sigmoid", "Concat"} <= ops
    x = np.random.default_rng(3).standard_normal(ENTRY.tiny_input_shape).astype(np.float32)
    (got,) = run_onnx(model, {model.graph.input[0].name: x}).values()
    with torch.no_grad():
        want = tiny(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_the_shipped_weights_load_offline_and_find_the_words():
    state = torch.random.get_rng_state()
    model = dbnet_text()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert not model.training
    assert not any("thresh" in key for key in model.state_dict())  # training-only, not shipped
    from edgefuse.models.dbnet import PREPROCESS

    scenes = [text_scene(TEST_SEED, index) for index in range(8)]
    inputs = np.concatenate([PREPROCESS(s.image)[0] for s in scenes])
    with torch.no_grad():
        maps = model(torch.from_numpy(inputs)).numpy()
    found = [[box.quad for box in text_boxes(m[0])] for m in maps]
    scores = word_scores(found, [list(s.quads) for s in scenes])
    assert scores["words"] >= 20
    assert scores["recall"] >= MIN_RECALL and scores["precision"] >= MIN_PRECISION, scores


def test_missing_or_mismatched_weights_are_load_errors(tmp_path, monkeypatch):
    from edgefuse.models import _trained

    monkeypatch.setattr(_trained, "WEIGHTS_DIR", tmp_path)
    with pytest.raises(ModelLoadError, match="the trained weights .*dbnet_text.pt' are missing") \
            as info:
        dbnet_text()
    assert info.value.reference == "missing-trained-weights"
    state = ENTRY.build("tiny").state_dict()  # the tiny layout is not the shipped one
    torch.save(state, tmp_path / "dbnet_text.pt")
    with pytest.raises(ModelLoadError, match="do not fit the model's layout") as info:
        dbnet_text()
    assert info.value.reference == "trained-weights-mismatch"
