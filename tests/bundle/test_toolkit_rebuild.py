"""Issue 27 §2, performed: the toolkit behind the same ``atc`` launcher changes (an upgrade in
place rewrites ``ascend-toolkit/latest/version.cfg``, not the launcher script) and the OM is
compiled again rather than taken from the cache. The toolkit is a stand-in: tests/fakes/atc as
``latest/compiler/bin/atc`` beside a ``version.cfg`` in CANN's spelling."""

from __future__ import annotations

import shutil

import pytest

from edgefuse.bundle.cache import Cache
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.stages import atc_identity, build_model
from tests.acl.models import FAKES
from tests.bundle.models import write_spec

pytestmark = pytest.mark.ort

VERSION_CFG = """\
runtime_running_version=[7.3.0.1.231:{version}]
compiler_running_version=[7.3.0.1.231:{version}]
opp_running_version=[7.3.0.1.231:{version}]
toolkit_running_version=[7.3.0.1.231:{version}]
"""


def _toolkit(root, monkeypatch, version="8.0.RC2"):
    """``root/ascend-toolkit/latest`` with the stand-in atc in ``compiler/bin`` on PATH."""
    latest = root / "ascend-toolkit" / "latest"
    (latest / "compiler" / "bin").mkdir(parents=True)
    shutil.copy(FAKES / "atc", latest / "compiler" / "bin" / "atc")
    (latest / "version.cfg").write_text(VERSION_CFG.format(version=version))
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setenv("PATH", f"{latest / 'compiler' / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_ATC_MODE", "success")
    return latest


def test_a_new_version_cfg_behind_the_same_launcher_changes_the_identity(tmp_path,
                                                                         monkeypatch):
    latest = _toolkit(tmp_path, monkeypatch)
    first = atc_identity()
    (latest / "version.cfg").write_text(VERSION_CFG.format(version="8.0.0"))
    assert atc_identity() != first


def test_set_env_sh_names_the_toolkit_whose_version_files_count(tmp_path, monkeypatch):
    latest = _toolkit(tmp_path, monkeypatch)
    (latest / "compiler" / "version.info").write_text("Version=7.3.0.1.231\n")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(latest))
    first = atc_identity()
    (latest / "compiler" / "version.info").write_text("Version=7.5.0.1.100\n")
    assert atc_identity() != first


def test_changing_the_toolkit_compiles_the_om_again(tmp_path, monkeypatch):
    latest = _toolkit(tmp_path, monkeypatch)
    model = load_spec(write_spec(tmp_path / "spec")).models[1]
    cache = Cache(tmp_path / "cache")

    def cached():
        return build_model(model, "Ascend310B4", cache, lambda *event: None).cached

    first = cached()
    assert not first["compile"]
    assert cached()["compile"]
    (latest / "version.cfg").write_text(VERSION_CFG.format(version="8.0.0"))
    again = cached()
    assert not again["compile"]
    assert again["convert"] and again["fp16"]
