"""Catalogue models (tiny variants, one per task) through convert -> quantize -> task parity."""

import pytest

from edgefuse.quantize import quantize
from edgefuse.verify import verify
from tests.needs import optional

pytestmark = [pytest.mark.torch, pytest.mark.ort]

torch = optional("torch")

CASES = [("resnet50", "top1"), ("deeplabv3plus_mobilenetv2", "mean_iou"), ("yolov5s", "AP50")]


@pytest.mark.parametrize(("name", "metric"), CASES)
def test_tiny_catalogue_model_quantizes_within_the_gates(name, metric):
    from edgefuse.convert import convert
    from edgefuse.models import get_entry

    entry = get_entry(name)
    fp32 = convert(entry.build("tiny"), inputs=entry.tiny_input_shape)
    result = quantize(fp32, keep_io_types=True)
    assert result.passed and min(g.cosine for g in result.report.gate) >= 0.999
    # every remaining node is FP16 unless the report says why not
    kept = set(result.report.keep_fp32["nodes"])
    assert kept == set(result.report.decisions)
    parity = verify(fp32, result.model, task=entry.task, samples=2, seed=100, gt_conf=0.1)
    assert parity.emulated_fp16
    assert min(o.cosine for o in parity.outputs) >= 0.999
    assert parity.task.metrics[metric] >= 0.98
