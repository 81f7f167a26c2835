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
    assert first["sources"]  # was None: the spec folder is not on sys.path here
    (tmp_path / "spec" / "mynet.py").write_text("def build():\n    return 2\n")
    assert _source_identity(model)["sources"] != first["sources"]


@pytest.mark.parametrize("importer", ["import helpers\n", "from helpers import width\n",
                                      "import tools.helpers\n", "from tools import helpers\n"])
def test_a_helper_module_the_factory_imports_is_in_its_key(tmp_path, importer):
    """Issue 27 §2: a helper beside the spec (a module or a package) that the factory imports."""
    model = _factory_model(tmp_path, importer + "def build():\n    return 1\n")
    folder = tmp_path / "spec"
    (folder / "tools").mkdir()
    (folder / "tools" / "__init__.py").write_text("")
    for helper in (folder / "helpers.py", folder / "tools" / "helpers.py"):
        helper.write_text("width = 8\n")
    first = _source_identity(model)
    (folder / "helpers.py").write_text("width = 16\n")
    (folder / "tools" / "helpers.py").write_text("width = 16\n")
    assert _source_identity(model) != first


def test_a_factory_in_a_package_keys_on_the_whole_package(tmp_path):
    model = _factory_model(tmp_path, "")
    model = dataclasses.replace(model, source="nets.yolo:build")
    package = tmp_path / "spec" / "nets"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "yolo.py").write_text("from .blocks import width\ndef build():\n    return 1\n")
    (package / "blocks.py").write_text("width = 8\n")
    first = _source_identity(model)
    assert set(first["sources"]) == {"nets/__init__.py", "nets/yolo.py", "nets/blocks.py"}
    (package / "blocks.py").write_text("width = 16\n")
    assert _source_identity(model) != first


def test_a_module_the_key_does_not_name_is_not_pulled_in(tmp_path):
    """Only what the factory imports: another model's module beside the spec stays out."""
    model = _factory_model(tmp_path, "import helpers\ndef build():\n    return 1\n")
    (tmp_path / "spec" / "helpers.py").write_text("width = 8\n")
    (tmp_path / "spec" / "other_model.py").write_text("width = 8\n")
    assert set(_source_identity(model)["sources"]) == {"mynet.py", "helpers.py"}


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
