"""The rendered C++ (op prototypes and ONNX parser plugins) compiles against the CANN API.

There is no CANN here, so ``cann_stubs/`` declares the part of the GE/parser API the sources use,
with the signatures of Ascend/metadef's public headers; ``g++ -fsyntax-only`` then catches syntax
errors, wrong types and calls that do not exist in that API. It does not prove the real build:
that needs ``edgefuse ops build`` on a CANN host.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.acl.ops.build import project_files
from edgefuse.acl.ops.registry import ALL_OPS

STUBS = Path(__file__).parent / "cann_stubs"
GXX = shutil.which("g++")
pytestmark = [pytest.mark.standin,
              pytest.mark.skipif(GXX is None, reason="needs g++ to compile the C++ sources")]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    for relative, text in project_files(ALL_OPS, validate_soc("Ascend310B4")).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def compile_only(source: Path, *include_dirs: Path) -> subprocess.CompletedProcess:
    includes = [f"-I{d}" for d in (STUBS, *include_dirs)]
    command = [GXX, "-std=c++11", "-fsyntax-only", "-Wall", "-Werror", *includes, str(source)]
    return subprocess.run(command, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("spec", ALL_OPS, ids=lambda spec: spec.name)
def test_op_prototype_compiles(project, spec):
    done = compile_only(project / "op_proto" / f"{spec.kernel_name}.cc", project / "op_proto")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("spec", ALL_OPS, ids=lambda spec: spec.name)
def test_onnx_plugin_compiles(project, spec):
    done = compile_only(project / "framework" / "onnx_plugin" / f"{spec.kernel_name}_plugin.cc")
    assert done.returncode == 0, done.stderr
