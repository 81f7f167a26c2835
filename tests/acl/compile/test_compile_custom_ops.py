"""A model with edgefuse custom ops: the op package it needs is recorded in the manifest, checked
before ATC runs (by compile here and by compile.sh on the CANN host), named in the instructions,
and --no-custom-ops compiles it without the package, decomposed, with the same outputs."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import onnx
import pytest

from edgefuse.acl.compile.compile import compile_model
from edgefuse.acl.ops.registry import ALL_OPS
from edgefuse.acl.ops.spec import register_onnx_schemas
from edgefuse.acl.ops.swish.spec import SWISH
from edgefuse.acl.ops.yolo_head.spec import YOLO_HEAD
from edgefuse.cli.main import main
from edgefuse.errors import InputError, ToolError
from edgefuse.reference.onnx_runner import run_onnx
from tests.acl.models import FAKES, hide_atc, make_model, node, put_fake_atc_on_path

pytestmark = [pytest.mark.ort, pytest.mark.standin]

SOC = "Ascend310B4"
OPP_VARIABLES = ("ASCEND_CUSTOM_OPP_PATH", "ASCEND_OPP_PATH", "EDGEFUSE_SKIP_CUSTOM_OP_CHECK")


def swish_model() -> onnx.ModelProto:
    """x -> Conv -> edgefuse::Swish -> y, as optimize --target Ascend310B4 leaves a SiLU."""
    register_onnx_schemas(ALL_OPS)
    rng = np.random.default_rng(0)
    return make_model(
        [node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         SWISH.make_node(["c"], ["y"])],
        {"x": [1, 3, 8, 8]},
        ["y"],
        {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
         "b": rng.standard_normal(4).astype(np.float32)},
        opset=13,
        extra_opsets={"edgefuse": 1},
    )


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "swish.onnx"
    onnx.save(swish_model(), path)
    return path


@pytest.fixture
def clean_env(monkeypatch):
    for name in OPP_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def op_package(root, vendor="edgefuse", ops=("EdgefuseSwish",), short_soc="ascend310b"):
    """A vendor directory as the installer leaves it, with op-info for ``short_soc`` naming
    ``ops``."""
    config = root / "vendors" / vendor / "op_impl" / "ai_core" / "tbe" / "config" / short_soc
    config.mkdir(parents=True)
    info = {op: {"input0": {"name": "x"}} for op in ops}
    (config / f"aic-{short_soc}-ops-info.json").write_text(json.dumps(info))
    return root / "vendors" / vendor


# ---- the dependency is recorded and explained ------------------------------------------------


def test_the_manifest_records_the_op_package_the_model_needs(monkeypatch, tmp_path, model_path,
                                                             capsys, clean_env):
    hide_atc(monkeypatch)
    out = tmp_path / "build"
    assert main(["compile", str(model_path), "--soc", SOC, "-o", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "needs edgefuse's op package for Swish x1" in stdout
    assert f"edgefuse ops build --soc {SOC} --ops Swish -o OPP_DIR" in stdout
    assert "--no-custom-ops" in stdout and "ATC fails with E19010 unless" in stdout
    record = json.loads((out / "manifest.json").read_text())["custom_ops"]
    assert record["required"] is True and record["soc"] == SOC
    assert record["ops"] == [{"onnx": "edgefuse::Swish", "ascend_type": "EdgefuseSwish",
                              "nodes": 1}]
    assert record["cann"] == {"targets": "CANN 6.0 up to, not including, 8.5", "min": "6.0",
                              "below": "8.5"}
    assert record["build"] == f"edgefuse ops build --soc {SOC} --ops Swish -o OPP_DIR"
    assert "install.sh" in record["install"] and "--no-custom-ops" in record["without"]
    script = (out / "compile.sh").read_text()
    assert script.index("edgefuse_check_custom_ops\n") < script.index("atc \\")


def test_a_model_without_custom_ops_needs_no_package(monkeypatch, tmp_path, clean_env):
    hide_atc(monkeypatch)
    path = tmp_path / "plain.onnx"
    onnx.save(make_model([node("Relu", ["x"], ["y"])], {"x": [1, 4]}, ["y"]), path)
    result = compile_model(path, SOC, tmp_path / "build")
    assert result.manifest.extra["custom_ops"] == {"required": False}
    assert "edgefuse_check_custom_ops" not in (tmp_path / "build" / "compile.sh").read_text()


# ---- compile.sh checks for the package before atc --------------------------------------------


def run_script(build, tmp_path, **env):
    argv_file = tmp_path / "atc_argv.json"
    environ = {key: value for key, value in os.environ.items() if key not in OPP_VARIABLES}
    environ.update(PATH=f"{FAKES}{os.pathsep}{environ['PATH']}", FAKE_ATC_MODE="success",
                   FAKE_ATC_ARGV=str(argv_file), **env)
    done = subprocess.run(["bash", str(build / "compile.sh")], capture_output=True, text=True,
                          env=environ)
    return done, argv_file.exists()


@pytest.fixture
def build(monkeypatch, tmp_path, model_path, clean_env):
    hide_atc(monkeypatch)
    compile_model(model_path, SOC, tmp_path / "build")
    return tmp_path / "build"


def test_compile_sh_stops_before_atc_without_the_package(build, tmp_path):
    done, atc_ran = run_script(build, tmp_path, ASCEND_CUSTOM_OPP_PATH=str(tmp_path / "nothing"))
    assert done.returncode == 2 and not atc_ran
    assert "uses edgefuse custom ops (Swish)" in done.stderr and "E19010" in done.stderr
    assert f"1. edgefuse ops build --soc {SOC} --ops Swish -o OPP_DIR" in done.stderr
    assert "--no-custom-ops" in done.stderr


def test_compile_sh_finds_the_package_through_ascend_custom_opp_path(build, tmp_path):
    vendor = op_package(tmp_path / "opp")
    done, atc_ran = run_script(build, tmp_path,
                               ASCEND_CUSTOM_OPP_PATH=f"{tmp_path / 'other'}:{vendor}")
    assert done.returncode == 0 and atc_ran, done.stderr
    assert f"edgefuse custom ops: found in {vendor}" in done.stdout
    assert (build / "model.om").exists()


def test_compile_sh_finds_the_package_through_vendors_config_ini(build, tmp_path):
    opp = tmp_path / "toolkit" / "opp"
    op_package(opp, vendor="my_ops")
    (opp / "vendors" / "config.ini").write_text("load_priority=customize, my_ops\n")
    done, atc_ran = run_script(build, tmp_path, ASCEND_OPP_PATH=str(opp))
    assert done.returncode == 0 and atc_ran, done.stderr


def test_compile_sh_wants_every_op_the_model_uses(build, tmp_path):
    vendor = op_package(tmp_path / "opp", ops=("EdgefuseYoloHead",))
    done, atc_ran = run_script(build, tmp_path, ASCEND_CUSTOM_OPP_PATH=str(vendor))
    assert done.returncode == 2 and not atc_ran
    done, atc_ran = run_script(build, tmp_path, EDGEFUSE_SKIP_CUSTOM_OP_CHECK="1")
    assert done.returncode == 0 and atc_ran


def test_compile_sh_wants_the_package_built_for_the_chip(build, tmp_path):
    vendor = op_package(tmp_path / "opp", short_soc="ascend310p")
    # the op type elsewhere under op_impl (a kernel file, a proto) does not count either
    kernel = vendor / "op_impl" / "ai_core" / "tbe" / "edgefuse_impl" / "edgefuse_swish.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("# EdgefuseSwish\n")
    done, atc_ran = run_script(build, tmp_path, ASCEND_CUSTOM_OPP_PATH=str(vendor))
    assert done.returncode == 2 and not atc_ran
    assert "aic-ascend310b-ops-info.json" in done.stderr
    op_package(tmp_path / "opp")  # now also built for ascend310b
    done, atc_ran = run_script(build, tmp_path, ASCEND_CUSTOM_OPP_PATH=str(vendor))
    assert done.returncode == 0 and atc_ran, done.stderr


# ---- compile checks it too when it runs atc itself --------------------------------------------


def test_compile_refuses_to_run_atc_without_the_package(monkeypatch, tmp_path, model_path,
                                                         clean_env):
    put_fake_atc_on_path(monkeypatch)
    with pytest.raises(ToolError, match="no installed op package provides them") as error:
        compile_model(model_path, SOC, tmp_path / "build")
    assert error.value.reference == "custom-ops-not-installed"
    assert f"edgefuse ops build --soc {SOC} --ops Swish" in error.value.hint
    assert not (tmp_path / "build").exists()
    vendor = op_package(tmp_path / "opp")
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(vendor))
    result = compile_model(model_path, SOC, tmp_path / "build")
    assert result.om_path is not None and result.om_path.exists()


def test_compile_refuses_a_package_built_for_another_chip(monkeypatch, tmp_path, model_path,
                                                          clean_env):
    put_fake_atc_on_path(monkeypatch)
    vendor = op_package(tmp_path / "opp", short_soc="ascend310p")
    monkeypatch.setenv("ASCEND_CUSTOM_OPP_PATH", str(vendor))
    with pytest.raises(ToolError, match="provide them only for other chips") as error:
        compile_model(model_path, SOC, tmp_path / "build")
    assert error.value.reference == "custom-ops-not-installed"
    assert f"{vendor} (ascend310p)" in error.value.context and "EZ3003" in error.value.message
    assert f"edgefuse ops build --soc {SOC} --ops Swish" in error.value.hint
    assert not (tmp_path / "build").exists()


def test_a_custom_op_the_soc_cannot_run_is_refused(monkeypatch, tmp_path, clean_env):
    hide_atc(monkeypatch)
    register_onnx_schemas(ALL_OPS)
    head = YOLO_HEAD.make_node(["p"], ["boxes", "scores", "classes", "count"], num_classes=2,
                               max_detections=20)
    path = tmp_path / "head.onnx"
    onnx.save(make_model([head], {"p": [1, 6, 100]}, ["boxes", "scores", "classes", "count"],
                         opset=18, extra_opsets={"edgefuse": 1}, check=False), path)
    with pytest.raises(InputError, match="uses YoloHead, whose kernel cannot run on Ascend310") \
            as error:
        compile_model(path, "Ascend310", tmp_path / "build")
    assert error.value.reference == "op-not-on-soc" and "--no-custom-ops" in error.value.hint


# ---- --no-custom-ops --------------------------------------------------------------------------


def test_no_custom_ops_decomposes_them_with_the_same_outputs(monkeypatch, tmp_path, model_path,
                                                             capsys, clean_env):
    put_fake_atc_on_path(monkeypatch)  # no package installed: none is needed
    out = tmp_path / "build"
    assert main(["compile", str(model_path), "--soc", SOC, "-o", str(out), "--no-custom-ops"]) == 0
    assert "decomposed edgefuse custom ops into standard ONNX ops: Swish x1" in (
        capsys.readouterr().out)
    prepared = onnx.load(out / "model.onnx")
    assert {n.op_type for n in prepared.graph.node} >= {"Conv", "Sigmoid", "Mul"}
    assert all(n.domain in ("", "ai.onnx") and n.op_type != "Swish"
               for n in prepared.graph.node)
    assert [e.domain for e in prepared.opset_import] == [""] and not prepared.functions
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["custom_ops"] == {"required": False, "decomposed": {"Swish": 1}}
    assert manifest["prepare"]["parity"]["checked"]
    assert "edgefuse_check_custom_ops" not in (out / "compile.sh").read_text()
    # the decomposition against the op's own numpy reference on the conv output
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    conv = onnx.helper.make_model(onnx.helper.make_graph(
        list(swish_model().graph.node[:1]), "conv", list(swish_model().graph.input),
        [onnx.helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, None)],
        list(swish_model().graph.initializer)), opset_imports=[onnx.helper.make_opsetid("", 13)])
    c = run_onnx(conv, {"x": x})["c"]
    (expected,) = SWISH.reference([c])
    np.testing.assert_allclose(run_onnx(prepared, {"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
