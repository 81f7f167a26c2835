"""Issue 18, finding 9: every input of a cached stage is in its key, so nothing stale is reused:
a factory model's own source, the ``atc`` on PATH, pyproject.toml for the wheel, the CANN
version for the op package."""

from __future__ import annotations

import dataclasses

import pytest

from edgefuse.bundle.builder import opp_key, wheel_key
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.stages import _source_identity, atc_identity
from tests.bundle.models import write_spec

pytestmark = pytest.mark.unit


def _factory_model(tmp_path, module_text: str):
    spec = write_spec(tmp_path / "spec")
    (tmp_path / "spec" / "mynet.py").write_text(module_text)
    model = load_spec(spec).models[0]
    return dataclasses.replace(model, source="mynet:build", source_kind="factory",
                               source_file=None)


def test_a_factory_models_source_is_in_its_key(tmp_path):
    model = _factory_model(tmp_path, "def build():\n    return 1\n")
    first = _source_identity(model)
    assert first["module"] is not None  # was None: the spec folder is not on sys.path here
    (tmp_path / "spec" / "mynet.py").write_text("def build():\n    return 2\n")
    assert _source_identity(model)["module"] != first["module"]


def test_the_atc_on_path_is_in_the_compile_key(tmp_path, monkeypatch):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    identities = []
    for body in ("#!/bin/sh\necho toolkit A\n", "#!/bin/sh\necho toolkit B\n"):
        folder = tmp_path / str(len(identities))
        folder.mkdir()
        (folder / "atc").write_text(body)
        (folder / "atc").chmod(0o755)
        monkeypatch.setenv("PATH", str(folder))
        identities.append(atc_identity())
    assert identities[0].startswith("unknown atc:")
    assert identities[0] != identities[1]


def test_pyproject_is_in_the_wheel_key(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "edgefuse"\ndependencies = ["numpy>=1.24"]\n')
    first = wheel_key(pyproject)
    pyproject.write_text('[project]\nname = "edgefuse"\ndependencies = ["numpy>=2"]\n')
    assert wheel_key(pyproject) != first


def test_the_cann_version_is_in_the_op_package_key():
    assert opp_key("Ascend310B4", "edgefuse", "8.0.RC1") != opp_key("Ascend310B4", "edgefuse",
                                                                    "8.0.0")
