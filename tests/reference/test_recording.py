"""The recording file (``edgefuse run --record``, a bundle's golden): what loading refuses, and
which gate a recording's numerics choose. Hand-written arrays and metas, no model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgefuse.errors import InputError
from edgefuse.goldens import default_gate
from edgefuse.reference.recording import FORMAT, load_recording, make_recording

pytestmark = pytest.mark.unit

X = np.arange(6, dtype=np.float32).reshape(1, 6)


def _saved(tmp_path, outputs=None, backend="cpu"):
    outputs = outputs if outputs is not None else {"y": X * 2}
    path = tmp_path / "rec.npz"
    make_recording([({"x": X}, outputs), ({"x": X + 1}, outputs)], {"backend": backend}).save(path)
    return path


def _rewrite(path, change):
    """Apply ``change`` to the .npz entries (dict name -> array) and write them back."""
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    change(arrays)
    np.savez(path, **arrays)


def test_a_saved_recording_loads_with_its_samples_in_order(tmp_path):
    recording = load_recording(_saved(tmp_path))
    assert recording.meta["format"] == "edgefuse-recording/1" == FORMAT
    assert recording.meta["inputs"] == ["x"] and recording.meta["outputs"] == ["y"]
    np.testing.assert_array_equal(recording.inputs[1]["x"], X + 1)
    np.testing.assert_array_equal(recording.outputs[0]["y"], X * 2)


@pytest.mark.parametrize("entry, renamed", [("output/1/y", "output/1/z"),
                                            ("input/0/x", "input/0/w")])
def test_sample_names_that_disagree_with_the_meta_are_refused(tmp_path, entry, renamed):
    path = _saved(tmp_path)
    _rewrite(path, lambda arrays: arrays.update({renamed: arrays.pop(entry)}))
    sample = entry.split("/")[1]
    with pytest.raises(InputError, match=rf"is not an edgefuse recording: sample {sample} does "
                                         r"not hold the inputs \['x'\] and outputs \['y'\]"):
        load_recording(path)


def test_a_sample_missing_an_output_is_refused(tmp_path):
    path = _saved(tmp_path)
    _rewrite(path, lambda arrays: arrays.pop("output/1/y"))
    with pytest.raises(InputError, match="sample 1 does not hold"):
        load_recording(path)


@pytest.mark.parametrize("found", ["edgefuse-recording/2", "edgefuse-golden/1", None])
def test_another_format_is_refused_naming_both(tmp_path, found):
    path = _saved(tmp_path)

    def change(arrays):
        meta = json.loads(str(arrays["meta"]))
        meta["format"] = found
        arrays["meta"] = np.array(json.dumps(meta))

    _rewrite(path, change)
    with pytest.raises(InputError, match=rf"its format is {found!r}, this edgefuse reads "
                                         r"'edgefuse-recording/1'"):
        load_recording(path)


def test_float16_outputs_recorded_on_cpu_take_the_fp16_gate(tmp_path):
    """A cpu run of an FP16 model: the backend has FP32 numerics, the outputs do not."""
    fp16 = load_recording(_saved(tmp_path, {"y": (X * 2).astype(np.float16)}))
    assert fp16.backend == "cpu" and fp16.outputs[0]["y"].dtype == np.float16
    assert fp16.board_numerics
    assert default_gate(fp16, "cpu").min_cosine == 0.999
    fp32 = make_recording([({"x": X}, {"y": X * 2})], {"backend": "cpu"})
    assert not fp32.board_numerics and default_gate(fp32, "cpu").min_cosine == 0.99999
    assert default_gate(fp32, "sim").min_cosine == 0.999


@pytest.mark.parametrize("twin", [None, '{"format": "something/1"}', "not json", b"\xff\xfe"])
def test_an_npz_of_inputs_is_not_a_recording_whatever_json_lies_next_to_it(tmp_path, twin):
    np.savez(tmp_path / "inputs.npz", x=X)
    if isinstance(twin, bytes):
        (tmp_path / "inputs.json").write_bytes(twin)
    elif twin is not None:
        (tmp_path / "inputs.json").write_text(twin)
    with pytest.raises(InputError, match=r"inputs.npz' is not an edgefuse recording: it has no "
                                         r"'meta' entry"):
        load_recording(tmp_path / "inputs.npz")


def test_an_old_bundle_golden_pair_reads_as_a_one_sample_recording(tmp_path):
    """golden.npz (input/<name>, output/<name>) + golden.json, as bundles were built before."""
    np.savez(tmp_path / "golden.npz", **{"input/x": X, "output/y": X * 2})
    (tmp_path / "golden.json").write_text(json.dumps({
        "format": "edgefuse-golden/1", "backend": "sim", "soc": "Ascend310B4", "build": "ab" * 32,
        "edgefuse_version": "0.1.0", "seed": 4,
        "inputs": {"x": {"shape": [1, 6], "dtype": "float32"}},
        "outputs": {"y": {"shape": [1, 6], "dtype": "float32"}}}))
    recording = load_recording(tmp_path / "golden.npz")
    assert recording.meta["format"] == FORMAT
    assert recording.meta["converted_from"] == "edgefuse-golden/1"
    assert (recording.backend, recording.soc, recording.build_sha256) == (
        "sim", "Ascend310B4", "ab" * 32)
    assert recording.meta["seed"] == 4 and recording.board_numerics
    np.testing.assert_array_equal(recording.inputs[0]["x"], X)
    np.testing.assert_array_equal(recording.outputs[0]["y"], X * 2)
    assert recording.describe().startswith("1 sample(s) recorded on sim (Ascend310B4), build "
                                           "abababababab")
