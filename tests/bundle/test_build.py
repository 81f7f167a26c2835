"""Building a bundle: its layout and manifest, byte-reproducibility, the cache, gates, shards.

The small spec (tests/bundle/models.py) holds two ONNX-file models, so these run on ONNX Runtime
without PyTorch in a few seconds; one build is shared (conftest.small_build).
"""

from __future__ import annotations

import json
import shutil
import tarfile
import zipfile

import numpy as np
import onnx
import pytest

from edgefuse.bundle import stages
from edgefuse.bundle.archive import write_bundle_manifest
from edgefuse.bundle.builder import build
from edgefuse.bundle.bundle_check import verify_bundle
from edgefuse.bundle.cache import Cache
from edgefuse.bundle.golden import check_golden
from edgefuse.cli.main import main
from edgefuse.errors import EdgefuseError
from edgefuse.manifest import file_sha256
from edgefuse.reference.onnx_runner import run_onnx
from edgefuse.reference.recording import load_recording, make_recording
from edgefuse.runtime import open_session
from edgefuse.testing import assert_replays
from tests.bundle.models import silu_head, write_spec
from tests.bundle.wheelhouse import fill_wheelhouse

pytestmark = pytest.mark.ort


def _manifest(bundle):
    return json.loads((bundle / "MANIFEST.json").read_text())


def test_the_bundle_has_every_part_a_board_needs(small_build):
    bundle = small_build.bundle
    for relative in ("MANIFEST.json", "install.sh", "minirc_install_hook.sh", "spec.json",
                     "app/config.yaml", "wheels/edgefuse-0.1.0-py3-none-any.whl",
                     "requirements.lock",
                     "systemd/edgefuse-small.service", "env/edgefuse-small.env"):
        assert (bundle / relative).is_file(), relative
    for model in ("seg", "cls"):
        folder = bundle / "models" / model
        for name in ("model.onnx", "compile.sh", "manifest.json", "metadata.json", "golden.npz",
                     "reports/optimize.json", "reports/fp16.json"):
            assert (folder / name).is_file(), f"{model}/{name}"
    manifest = _manifest(bundle)
    assert manifest["bundle"]["id"] == "small-1.0.0"
    assert manifest["tools"]["onnxruntime"] and manifest["tools"]["edgefuse"] == "0.1.0"
    seg = manifest["models"]["seg"]
    assert seg["compiled"] == "onnx+compile.sh" and seg["om"] is None  # no ATC here
    assert seg["atc"]["argv"][0] == "atc" and "--soc_version=Ascend310B4" in seg["atc"]["argv"]
    assert seg["parity"]["fp16"]["outputs"][0]["cosine"] > 0.999
    assert seg["parity"]["optimize"]["outputs"][0]["cosine"] > 0.99999
    files = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == files - {"MANIFEST.json"}
    assert all(manifest["files"][n] == file_sha256(bundle / n) for n in manifest["files"])
    metadata = json.loads((bundle / "models/seg/metadata.json").read_text())
    assert metadata["classes"] == ["bg", "a", "b", "c"] and metadata["task"] == "segment"
    assert metadata["inputs"][0]["shape"] == [1, 3, 16, 16]
    build_manifest = json.loads((bundle / "models/seg/manifest.json").read_text())
    assert build_manifest["app"]["classes"] == ["bg", "a", "b", "c"]


def test_the_golden_recording_is_what_the_board_computes(small_build):
    """Recorded on the simulated board: the model's outputs to FP16 accuracy, FP16 values."""
    folder = small_build.bundle / "models" / "cls"
    golden = load_recording(folder / "golden.npz")  # the format `edgefuse run --record` writes
    [sample] = golden.samples
    recorded = sample.outputs["scores"]
    expected = run_onnx(onnx.load(str(folder / "model.onnx")), sample.inputs)["scores"]
    np.testing.assert_allclose(recorded, expected, rtol=2e-3, atol=1e-4)
    assert not np.array_equal(recorded, expected)
    np.testing.assert_array_equal(recorded, recorded.astype(np.float16).astype(recorded.dtype))
    assert golden.meta["format"] == "edgefuse-recording/1" and golden.meta["seed"] == 0
    assert golden.backend == "sim" and golden.soc == "Ascend310B4"
    assert golden.meta["build"] == {"path": ".", "soc": "Ascend310B4",
                                    "manifest_sha256": file_sha256(folder / "manifest.json")}
    assert golden.meta["created_by"] == "edgefuse build"
    assert json.loads((folder / "metadata.json").read_text())["golden"] == {
        "npz": "golden.npz", "format": "edgefuse-recording/1", "backend": "sim",
        "inputs": "seeded random (seed 0)"}


def test_the_service_files_run_the_app_from_the_installed_bundle(small_build):
    bundle = small_build.bundle
    unit = (bundle / "systemd/edgefuse-small.service").read_text()
    assert "ExecStart=/opt/edgefuse/small/current/.venv/bin/edgefuse segment --config " \
           "/opt/edgefuse/small/current/app/config.yaml" in unit
    assert "User=HwHiAiUser" in unit and "Restart=always" in unit
    assert "WantedBy=multi-user.target" in unit
    # The app notifies systemd and stops within stop_bound_s (10 + 5 + 5 + 1 + 5 s by default).
    assert "Type=notify" in unit and "NotifyAccess=main" in unit and "WatchdogSec=30" in unit
    assert "TimeoutStopSec=26\n" in unit
    env = (bundle / "env/edgefuse-small.env").read_text()
    assert "ASCEND_OPP_PATH=/usr/local/Ascend/ascend-toolkit/latest/opp" in env
    assert "EDGEFUSE_LOG=info" in env and "ASCEND_CUSTOM_OPP_PATH" not in env
    config = (bundle / "app/config.yaml").read_text()
    assert "model: models/seg" in config and "source: 0" in config


def test_no_generated_file_names_the_build_host(small_build):
    host_paths = [str(small_build.spec_dir), str(small_build.cache),
                  str(small_build.outcome.output_dir)]
    for path in small_build.bundle.rglob("*"):
        if path.is_file() and path.suffix not in (".onnx", ".npz", ".whl"):
            text = path.read_text(errors="replace")
            assert not any(host in text for host in host_paths), path


def test_the_archive_is_sorted_stamped_and_owned_by_nobody(small_build):
    with tarfile.open(small_build.archive) as archive:
        members = archive.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) and names[0] == "small-1.0.0"
    assert {m.mtime for m in members} == {1767225600}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert {m.mode for m in members} <= {0o644, 0o755}


def test_two_clean_builds_in_other_folders_give_the_same_archive(small_build, tmp_path):
    spec = write_spec(tmp_path / "elsewhere")  # other folder, other cache, same content
    other = build(spec, tmp_path / "out", cache_dir=tmp_path / "cache", progress=False)
    assert other.rebuilt == ["seg", "cls"]
    assert other.archive_sha256 == small_build.outcome.archive_sha256
    assert file_sha256(other.archive) == file_sha256(small_build.archive)


def test_an_unchanged_rebuild_takes_everything_from_the_cache(small_build, tmp_path):
    again = build(small_build.spec_dir / "spec.yaml", tmp_path / "out",
                  cache_dir=small_build.cache, progress=False)
    assert again.rebuilt == []
    assert again.archive_sha256 == small_build.outcome.archive_sha256
    log = json.loads((tmp_path / "out" / "build-log.json").read_text())
    assert all(s["cached"] for stages_ in log["models"].values() for s in stages_.values())


def test_changing_one_models_options_rebuilds_that_model_only(small_build, tmp_path):
    spec_dir = tmp_path / "spec"
    shutil.copytree(small_build.spec_dir, spec_dir)
    spec = spec_dir / "spec.yaml"
    spec.write_text(spec.read_text().replace("verify: {samples: 1}\n",
                                             "verify: {samples: 1, seed: 7}\n"))
    changed = build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False)
    assert changed.rebuilt == ["cls"]
    assert changed.models["cls"]["convert"]["cached"]  # upstream of the option: reused
    assert not changed.models["cls"]["optimize"]["cached"]
    assert changed.archive_sha256 != small_build.outcome.archive_sha256


def test_a_gate_that_fails_names_the_model_and_stores_nothing(small_build, tmp_path):
    spec = write_spec(tmp_path / "spec", fp16_gate=1.0)  # FP16 never reaches cosine 1 exactly
    cache = tmp_path / "cache"
    with pytest.raises(EdgefuseError, match=r"1 model\(s\) failed to build: seg") as caught:
        build(spec, tmp_path / "out", cache_dir=cache, progress=False)
    assert caught.value.exit_code == 1
    assert "model 'seg' failed the fp16 gate" in caught.value.render()
    assert "output 'logits'" in caught.value.render()
    assert not (tmp_path / "out").exists()
    assert not list((cache / "fp16").rglob("entry.json")) or all(
        "seg" not in p.read_text() for p in (cache / "fp16").rglob("entry.json"))
    assert not list(tmp_path.glob(".out.partial-*"))
    assert main(["build", str(spec), "-o", str(tmp_path / "out2"), "--cache", str(cache),
                 "--no-progress"]) == 1


def test_an_interrupted_build_leaves_no_bundle_and_no_entry(small_build, tmp_path, monkeypatch):
    spec = write_spec(tmp_path / "spec", version="2.0.0")
    cache = tmp_path / "cache"

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(stages, "_golden", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build(spec, tmp_path / "out", cache_dir=cache, progress=False)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))
    assert not (cache / "golden").exists() or not list((cache / "golden").rglob("entry.json"))
    assert not list(cache.rglob(".tmp-*"))
    monkeypatch.undo()
    done = build(spec, tmp_path / "out", cache_dir=cache, progress=False)
    assert done.models["seg"]["convert"]["cached"] and not done.models["seg"]["golden"]["cached"]


def test_a_damaged_cache_entry_is_rebuilt_not_used(small_build, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(small_build.cache, cache)
    victim = next((cache / "compile").rglob("model.onnx"))
    victim.write_bytes(victim.read_bytes()[:-10])
    again = build(small_build.spec_dir / "spec.yaml", tmp_path / "out", cache_dir=cache,
                  progress=False)
    assert len(again.rebuilt) == 1
    assert again.archive_sha256 == small_build.outcome.archive_sha256


def test_shards_fill_the_cache_and_the_final_run_only_assembles(small_build, tmp_path):
    spec = small_build.spec_dir / "spec.yaml"
    cache = tmp_path / "cache"
    first = build(spec, None, cache_dir=cache, shard="1/2", progress=False)
    second = build(spec, None, cache_dir=cache, shard="2/2", progress=False)
    assert (list(first.models), list(second.models)) == (["seg"], ["cls"])
    assert first.archive is None
    final = build(spec, tmp_path / "out", cache_dir=cache, progress=False)
    assert final.rebuilt == []
    assert final.archive_sha256 == small_build.outcome.archive_sha256
    with pytest.raises(EdgefuseError, match=r"--shard '3/2' is not K/N"):
        build(spec, None, cache_dir=cache, shard="3/2", progress=False)


def test_parallel_jobs_build_the_same_archive(small_build, tmp_path):
    parallel = build(small_build.spec_dir / "spec.yaml", tmp_path / "out", jobs=2,
                     cache_dir=tmp_path / "cache", progress=False)
    assert parallel.rebuilt == ["seg", "cls"]
    assert parallel.archive_sha256 == small_build.outcome.archive_sha256


def test_parallel_jobs_start_no_worker_for_what_the_cache_holds(small_build, tmp_path,
                                                                 monkeypatch):
    import edgefuse.bundle.builder as builder

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker pool was started for a fully cached build")

    monkeypatch.setattr(builder.concurrent.futures, "ProcessPoolExecutor", no_pool)
    again = build(small_build.spec_dir / "spec.yaml", tmp_path / "out", jobs=2,
                  cache_dir=small_build.cache, progress=False)
    assert again.rebuilt == [] and again.archive_sha256 == small_build.outcome.archive_sha256
    spec_dir = tmp_path / "spec"
    shutil.copytree(small_build.spec_dir, spec_dir)
    spec = spec_dir / "spec.yaml"
    spec.write_text(spec.read_text().replace("verify: {samples: 1}\n",
                                             "verify: {samples: 1, seed: 8}\n"))
    changed = build(spec, tmp_path / "out2", jobs=2, cache_dir=small_build.cache, progress=False)
    assert changed.rebuilt == ["cls"]  # the one model with work, built in this process


def test_no_cache_rebuilds_every_stage(small_build, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(small_build.cache, cache)
    fresh = build(small_build.spec_dir / "spec.yaml", tmp_path / "out", cache_dir=cache,
                  use_cache=False, progress=False)
    assert fresh.rebuilt == ["seg", "cls"]
    assert fresh.archive_sha256 == small_build.outcome.archive_sha256
    assert Cache(cache).get("wheel", "0" * 64) is None


def test_an_existing_output_folder_is_kept_unless_forced(small_build, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    spec = small_build.spec_dir / "spec.yaml"
    with pytest.raises(EdgefuseError, match=r"exists and is not empty"):
        build(spec, out, cache_dir=small_build.cache, progress=False)
    assert (out / "keep.txt").exists()
    build(spec, out, cache_dir=small_build.cache, force=True, progress=False)
    assert not (out / "keep.txt").exists() and (out / "small-1.0.0.tar.gz").is_file()


def test_the_wheel_is_installable_metadata_and_the_package(small_build):
    wheel = small_build.bundle / "wheels/edgefuse-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read("edgefuse-0.1.0.dist-info/METADATA").decode()
        record = archive.read("edgefuse-0.1.0.dist-info/RECORD").decode()
        assert archive.testzip() is None
        times = {info.date_time for info in archive.infolist()}
    assert "edgefuse/__init__.py" in names and "edgefuse/bundle/templates/install.sh" in names
    assert not any("__pycache__" in n for n in names)
    assert "Requires-Dist: jsonschema" in metadata and "Name: edgefuse" in metadata
    assert "edgefuse/__init__.py,sha256=" in record
    assert times == {(1980, 1, 1, 0, 0, 0)}


def test_bundle_verify_runs_each_model_against_its_golden(small_build):
    report = verify_bundle(small_build.archive, backends=("cpu",))
    assert report.passed and set(report.models) == {"seg", "cls"}
    assert all(o.cosine > 0.99999 for check in report.models.values() for o in check.outputs)
    assert main(["bundle", "verify", str(small_build.bundle), "--backend", "cpu"]) == 0


def test_bundle_verify_fails_a_model_that_no_longer_matches_its_golden(small_build, tmp_path,
                                                                       capsys):
    bundle = tmp_path / "bundle"
    shutil.copytree(small_build.bundle, bundle)
    golden = bundle / "models/cls/golden.npz"
    with np.load(golden) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["output/0/scores"] = -arrays["output/0/scores"]
    np.savez(golden, **arrays)
    _resign(bundle)  # so that only the numbers disagree
    assert main(["bundle", "verify", str(bundle), "--backend", "cpu"]) == 1
    assert "error[golden-mismatch]: cls" in capsys.readouterr().err


def _resign(bundle):
    """Rewrite MANIFEST.json with the digests of the files as they are now."""
    manifest = bundle / "MANIFEST.json"
    data = json.loads(manifest.read_text())
    files = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    data["files"] = {name: file_sha256(bundle / name) for name in sorted(files - {"MANIFEST.json"})}
    record = {k: v for k, v in data.items() if k not in ("format", "manifest_sha256", "files")}
    manifest.unlink()
    write_bundle_manifest(bundle, record)
    return data["files"]


def _as_legacy_golden(golden, *, backend="sim"):
    """Rewrite a golden.npz as bundles before the recording format carried it: input/<name>,
    output/<name> and a golden.json twin (edgefuse-golden/1), written out here by hand."""
    recording = load_recording(golden)
    [sample] = recording.samples
    np.savez(golden, **{f"input/{k}": v for k, v in sample.inputs.items()},
             **{f"output/{k}": v for k, v in sample.outputs.items()})
    golden.with_suffix(".json").write_text(json.dumps({
        "format": "edgefuse-golden/1", "backend": backend, "soc": "Ascend310B4",
        "build": file_sha256(golden.parent / "manifest.json"), "edgefuse_version": "0.1.0",
        "seed": 0,
        "inputs": {k: {"shape": list(v.shape), "dtype": v.dtype.name}
                   for k, v in sample.inputs.items()},
        "outputs": {k: {"shape": list(v.shape), "dtype": v.dtype.name}
                    for k, v in sample.outputs.items()}}, indent=2))
    return sample


def test_a_bundle_with_the_old_golden_pair_still_verifies(small_build, tmp_path):
    bundle = tmp_path / "bundle"
    shutil.copytree(small_build.bundle, bundle)
    samples = {name: _as_legacy_golden(bundle / f"models/{name}/golden.npz")
               for name in ("seg", "cls")}
    assert "models/cls/golden.json" in _resign(bundle)
    report = verify_bundle(bundle, backends=("cpu",))
    assert report.passed and {c.recorded_on for c in report.models.values()} == {"sim"}
    legacy = load_recording(bundle / "models/cls/golden.npz")
    assert legacy.backend == "sim" and legacy.meta["converted_from"] == "edgefuse-golden/1"
    assert legacy.build_sha256 == file_sha256(bundle / "models/cls/manifest.json")
    np.testing.assert_array_equal(legacy.outputs[0]["scores"], samples["cls"].outputs["scores"])


def test_an_old_golden_whose_arrays_disagree_with_its_twin_is_refused(small_build, tmp_path):
    folder = tmp_path / "cls"
    shutil.copytree(small_build.bundle / "models/cls", folder)
    _as_legacy_golden(folder / "golden.npz")
    with np.load(folder / "golden.npz") as data:
        arrays = {k.replace("output/scores", "output/logits"): data[k] for k in data.files}
    np.savez(folder / "golden.npz", **arrays)
    with pytest.raises(EdgefuseError, match="does not hold the inputs .* its edgefuse-golden/1"):
        load_recording(folder / "golden.npz")


OPS_SPEC = """\
apiVersion: edgefuse/v1
bundle: {name: ops}
target: {soc: Ascend310B4}
models:
  - name: silu
    source: models/silu.onnx
    optimize: {target: soc}
    precision: {keep_fp32: none}
    verify: {samples: 1}
app: {kind: segmentation, model: silu, source: 0}  # a service without a source fails
python: {wheels: wheelhouse}
"""


def _ops_spec(folder):
    (folder / "models").mkdir(parents=True)
    onnx.save_model(silu_head(), str(folder / "models/silu.onnx"))
    fill_wheelhouse(folder / "wheelhouse")
    (folder / "spec.yaml").write_text(OPS_SPEC)
    return folder / "spec.yaml"


def test_a_model_with_custom_ops_brings_the_op_package_and_its_environment(tmp_path):
    outcome = build(_ops_spec(tmp_path / "a"), tmp_path / "out", cache_dir=tmp_path / "c",
                    progress=False)
    bundle = outcome.bundle_dir
    manifest = _manifest(bundle)
    assert manifest["models"]["silu"]["custom_ops"] == {"Swish": 1}
    assert manifest["custom_ops"]["package"] == "opp/" and (bundle / "opp/build.sh").is_file()
    assert "ASCEND_CUSTOM_OPP_PATH=/opt/edgefuse/ops/current/.opp/vendors/edgefuse" in (
        bundle / "env/edgefuse-ops.env").read_text()
    assert "OPP_VENDOR=edgefuse" in (bundle / "install.sh").read_text()
    # the prepared ONNX speaks ATC's spelling; hosts check the golden through host.onnx
    assert manifest["models"]["silu"]["host_onnx"] == "models/silu/host.onnx"
    assert verify_bundle(outcome.archive, backends=("cpu",)).passed
    other = build(_ops_spec(tmp_path / "b"), tmp_path / "out2", cache_dir=tmp_path / "c2",
                  progress=False)
    assert other.archive_sha256 == outcome.archive_sha256


def test_changing_a_models_opset_misses_the_convert_cache(small_build, tmp_path):
    spec_dir = tmp_path / "spec"
    shutil.copytree(small_build.spec_dir, spec_dir)
    spec = spec_dir / "spec.yaml"
    spec.write_text(spec.read_text().replace("source: models/cls.onnx\n",
                                             "source: models/cls.onnx\n    opset: 17\n"))
    changed = build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False)
    assert not changed.models["cls"]["convert"]["cached"]
    assert changed.models["seg"]["convert"]["cached"]


def _with_cosine(array, cosine, seed=0):
    """``array`` plus noise orthogonal to it, scaled so that the cosine to ``array`` is
    ``cosine``: 1 / sqrt(1 + r^2) for a noise of relative norm r."""
    flat = array.astype(np.float64).reshape(-1)
    noise = np.random.default_rng(seed).standard_normal(flat.size)
    noise -= flat * (noise @ flat) / (flat @ flat)
    noise *= np.sqrt(1 / cosine**2 - 1) * np.linalg.norm(flat) / np.linalg.norm(noise)
    return (flat + noise).reshape(array.shape).astype(array.dtype)


def test_a_golden_at_cosine_0_9995_fails_its_own_backend_and_passes_another(small_build,
                                                                           tmp_path):
    """The golden was recorded on sim: replayed on sim it must reproduce to 0.99999; on cpu it
    is held to the model's FP16 gate, 0.999."""
    folder = tmp_path / "cls"
    shutil.copytree(small_build.bundle / "models/cls", folder)
    golden = load_recording(folder / "golden.npz")
    moved = [(s.inputs, {n: _with_cosine(a, 0.9995) for n, a in s.outputs.items()})
             for s in golden.samples]
    make_recording(moved, golden.meta).save(folder / "golden.npz")
    same = check_golden(folder, folder / "golden.npz", ("sim",), 0.999)
    assert same.recorded_on == same.backend == "sim" and same.min_cosine == 0.99999
    assert not same.passed and 0.999 < same.outputs[0].cosine < 0.9996
    other = check_golden(folder, folder / "golden.npz", ("cpu",), 0.999)
    assert other.backend == "cpu" and other.min_cosine == 0.999
    assert other.passed and 0.999 < other.outputs[0].cosine < 0.9996


def test_a_bundles_golden_replays_with_verify_against_and_the_pytest_kit(small_build, capsys):
    """One format: the golden `build` records is what `verify --against` and assert_replays
    read; the build it names is the bundle's (no "another build" note)."""
    folder = small_build.bundle / "models/seg"
    golden = folder / "golden.npz"
    assert main(["verify", "--against", str(golden), str(folder), "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("against: 1 sample(s) recorded on sim (Ascend310B4), build ")
    assert "note:" not in out
    with open_session(folder, backends="sim") as session:
        assert_replays(session, golden)


def test_a_renamed_calibration_file_misses_the_cache(small_build, tmp_path):
    """A folder's key is its file names and contents: the same bytes under another name are
    another folder (a content-only digest would hit the cache)."""
    spec_dir = tmp_path / "spec"
    shutil.copytree(small_build.spec_dir, spec_dir)
    calibration = spec_dir / "calib"
    calibration.mkdir()
    rng = np.random.default_rng(0)
    for name in ("a.npz", "b.npz"):
        np.savez(calibration / name, input=rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    spec = spec_dir / "spec.yaml"
    spec.write_text(spec.read_text().replace("verify: {samples: 1}\n",
                                             "verify: {samples: 1, calibration: calib}\n"))
    cache = tmp_path / "cache"
    first = build(spec, tmp_path / "out", cache_dir=cache, progress=False)
    assert not first.models["cls"]["optimize"]["cached"]
    (calibration / "b.npz").rename(calibration / "c.npz")
    again = build(spec, tmp_path / "out2", cache_dir=cache, progress=False)
    assert again.models["cls"]["convert"]["cached"] and again.models["seg"]["optimize"]["cached"]
    assert not again.models["cls"]["optimize"]["cached"]
