"""Every tiny catalogue model, compiled with the default precision and the FP16 stage's keep list:
the sim's outputs differ from the FP32 host's by no more than the FP16 analysis predicted (the
quantize report, on the same calibration inputs), and its I/O is exactly the manifest's."""

import numpy as np
import onnx
import pytest

from edgefuse import open_session
from edgefuse.acl.compile.compile import compile_model
from edgefuse.fallback.sim_numerics import within_prediction
from edgefuse.manifest import read_manifest
from edgefuse.models import CATALOGUE
from edgefuse.quantize import DEFAULT_SAMPLES
from edgefuse.reference.compare import Gate, compare_outputs
from edgefuse.reference.feeds import feed_set, input_specs
from tests.needs import optional

FAR_BELOW = 0.25  # a measured max abs error under this share of the predicted one

pytestmark = [pytest.mark.torch, pytest.mark.ort]

torch = optional("torch")


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_sim_stays_within_the_fp16_prediction_on_tiny_catalogue_builds(tmp_path, monkeypatch,
                                                                      name):
    import onnx_ir as ir

    from edgefuse.convert import convert
    from edgefuse.models import get_entry
    from edgefuse.optimize import optimize
    from edgefuse.quantize import quantize

    monkeypatch.setenv("PATH", "")
    entry = get_entry(name)
    optimized = optimize(convert(entry.build("tiny"), inputs=entry.tiny_input_shape)).model
    if not isinstance(optimized, onnx.ModelProto):
        optimized = ir.serde.serialize_model(optimized)
    report = quantize(optimized).report  # the FP16 analysis, on seeded calibration inputs
    build = compile_model(optimized, "Ascend310B4", tmp_path / "build",
                          keep_fp32=report.keep).output_dir
    manifest = read_manifest(build)
    assert manifest.extra["precision"]["precision_mode"] == "force_fp16"
    feeds = feed_set(input_specs(optimized), None, seed=0, samples=DEFAULT_SAMPLES)
    with open_session(build, backends="sim", threads=1) as sim, \
            open_session(build, backends="cpu", threads=1) as cpu:
        # the model's own I/O as ONNX Runtime reads it from the ONNX file, not the manifest
        # through the expression SimSession uses
        assert list(sim.inputs) == list(cpu.inputs)
        assert list(sim.outputs) == list(cpu.outputs)
        assert [(s.name, s.shape) for s in sim.inputs] == [
            (spec.name, tuple(spec.shape)) for spec in input_specs(optimized)]
        host = [cpu.run(f) for f in feeds]
        simulated = [sim.run(f) for f in feeds]
    assert all(a.dtype == np.dtype(e.dtype) for s in simulated
               for e, a in zip(manifest.outputs, s.values(), strict=True))
    predicted = {g.name: g.agreement for g in report.gate}
    for measured in compare_outputs(host, simulated, Gate(0.999)):
        largest = max(float(np.abs(h[measured.name]).max()) for h in host)
        assert measured.passed
        assert within_prediction(measured.agreement, predicted[measured.name], largest), (
            f"{name} output '{measured.name}': sim vs cpu {measured.agreement}, FP16 analysis "
            f"predicted {predicted[measured.name]}")
        # ... and not far below it either: a sim that stopped rounding would pass the line
        # above with an error near 0 (the two spellings' roundings differ by some FP16 steps
        # either way, so "far" is a factor, not within_prediction reversed)
        assert measured.agreement.max_abs_error >= FAR_BELOW * predicted[
                measured.name].max_abs_error, (
            f"{name} output '{measured.name}': sim vs cpu {measured.agreement} is far below the "
            f"FP16 analysis' {predicted[measured.name]}")
