"""`edgefuse quantize` on the trained text detector, calibrated on a folder of text images.

Four generated text images, fed through the preprocessing record the exported model carries, give
the gate a map with words on it, and it passes. On the default random inputs the gate was expected
to be INCONCLUSIVE (a text detector's map ~0 on noise); the trained detector is not: its map stays
near 0 (median ~7e-4) but lights up to ~0.97 on ~1.4% of the noise pixels (no word survives the box
decoding), far above the 1e-3 a degenerate output must stay under, so that gate is judged, and
passes. The second test pins that measured behaviour (see bench/text_detector_fp16.py).
"""

from __future__ import annotations

import json

import onnx
import pytest

from edgefuse.cli.main import main
from edgefuse.convert import convert
from edgefuse.model_info import AppInfo, embed
from edgefuse.models import CATALOGUE
from edgefuse.vision.scenes.text import write_text_images
from tests.needs import optional

pytestmark = pytest.mark.torch

optional("torch")
optional("cv2")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from edgefuse.models.dbnet import PREPROCESS

    folder = tmp_path_factory.mktemp("text")
    entry = CATALOGUE["dbnet_text"]
    model = convert(entry.build(), inputs=entry.input_shape, exporter="torchscript")
    path = folder / "dbnet_text.onnx"
    onnx.save(embed(model, AppInfo(task="segment", preprocess=PREPROCESS)), path)
    images = folder / "images"
    write_text_images(images, seed=4000, count=4, size=PREPROCESS.size)
    return path, images


def test_calibrated_on_text_images_the_gate_passes(exported, tmp_path, capsys):
    model, images = exported
    report = tmp_path / "fp16.json"
    code = main(["quantize", str(model), "-o", str(tmp_path / "fp16.onnx"), "--fp16",
                 "--inputs", str(images), "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASSED (every output cosine >= 0.999)" in out and "nearly constant" not in out
    calibration = json.loads(report.read_text())["settings"]["calibration"]
    assert calibration == {"source": str(images), "seed": None, "samples": 4}


def test_on_random_inputs_the_trained_map_is_not_degenerate_so_the_gate_is_judged(
        exported, tmp_path, capsys):
    model, _ = exported
    code = main(["quantize", str(model), "-o", str(tmp_path / "fp16.onnx"), "--fp16"])
    out = capsys.readouterr().out
    assert "nearly constant" not in out and "INCONCLUSIVE" not in out
    assert code == 0 and "PASSED" in out, out
