"""Issue 18, finding 13: the board's Python environment comes from the bundle's own wheels,
pinned by sha256, never from an index at first boot.

The build resolves edgefuse's wheel and its dependencies for the target with ``pip download``
(here from a wheelhouse of stand-in wheels: no network), carries them in ``wheels/`` with
``requirements.lock``; install.sh (run for real, into temporary prefixes) installs only those,
with ``--require-hashes``, and refuses a wheel that is not the locked one before anything
switches.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from edgefuse.bundle.builder import build
from edgefuse.bundle.bundle_check import verify_tree
from edgefuse.bundle.target_wheels import download_command, requirement, target_python
from edgefuse.errors import InputError
from tests.bundle.models import write_spec
from tests.bundle.trust import (
    host_python3,
    host_python3_path,
    prefix_builds,
    rewrite_manifest,
    run_install,
    shim,
)
from tests.bundle.wheelhouse import HOST_PYTHON, dummy_wheel, requirement_floors

pytestmark = pytest.mark.ort


def _lock(bundle: Path) -> dict[str, str]:
    """requirements.lock as {name==version: sha256}; every line must carry a hash."""
    pinned = {}
    for line in (bundle / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            found = re.fullmatch(r"([a-z0-9-]+==[^ ]+) --hash=sha256:([0-9a-f]{64})", line)
            assert found, f"not a hash-pinned requirement: {line!r}"
            pinned[found[1]] = found[2]
    return pinned


def _wheel_metadata(wheel: Path) -> str:
    """name==version as the wheel's own METADATA says (not its file name)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    fields = dict(re.findall(r"^(Name|Version): (.+)$", text, re.MULTILINE))
    return f"{re.sub(r'[-_.]+', '-', fields['Name']).lower()}=={fields['Version']}"


def test_the_lock_pins_every_wheel_the_bundle_carries_and_the_manifest_covers_them(small_build):
    bundle = small_build.bundle
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    expected = {_wheel_metadata(w): hashlib.sha256(w.read_bytes()).hexdigest() for w in wheels}
    assert _lock(bundle) == expected
    names = {requirement.partition("==")[0] for requirement in expected}
    assert names == {"edgefuse"} | {re.sub(r"[-_.]+", "-", n).lower() for n in requirement_floors()}
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    for path in [*wheels, bundle / "requirements.lock"]:
        relative = path.relative_to(bundle).as_posix()
        assert manifest["files"][relative] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert manifest["python"]["version"] == HOST_PYTHON
    assert manifest["python"]["packages"]["numpy"] == requirement_floors()["numpy"]
    assert manifest["app"]["wheel"] == "wheels/edgefuse-0.1.0-py3-none-any.whl"


def test_the_download_command_resolves_for_the_boards_tags(tmp_path):
    """The Atlas 200I DK A2 (Ubuntu 22.04: glibc 2.35, Python 3.10): every manylinux tag from
    2_35 down to 2014, not the one fixed manylinux2014 tag that found onnxruntime <= 1.16.3."""
    python = target_python({"wheels": "download"}, {"board": "atlas-200i-dk-a2"}, tmp_path)
    argv = download_command(python, requirement(tmp_path / "app.whl", ["serve", "vision"]),
                            tmp_path / "dest")
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    text = " ".join(argv)
    for flag in ("--platform manylinux_2_35_aarch64", "--platform manylinux_2_28_aarch64",
                 "--platform manylinux_2_17_aarch64", "--platform manylinux2014_aarch64",
                 "--python-version 3.10", "--only-binary=:all:", "--implementation cp",
                 f"--dest {tmp_path / 'dest'}"):
        assert flag in text
    assert "manylinux_2_36" not in text and "x86_64" not in text
    assert "--no-index" not in argv and argv[-1] == f"{tmp_path / 'app.whl'}[serve,vision]"
    house = target_python({"version": "3.9", "wheels": "house",
                           "platform": ["manylinux_2_28_aarch64", "manylinux2014_aarch64"]},
                          {"board": "my-board", "glibc": "2.31", "arch": "aarch64"}, tmp_path)
    argv = download_command(house, str(tmp_path / "app.whl"), tmp_path / "dest")
    text = " ".join(argv)
    assert "--isolated" in argv and "--no-index" in argv
    assert f"--find-links {tmp_path / 'house'}" in text and "--python-version 3.9" in text
    assert argv.count("--platform") == 2  # python.platform overrides the board's tags


def _house_spec(tmp_path: Path, glibc: str) -> Path:
    """The small spec on a described board with ``glibc``, numpy's stand-ins replaced by
    1.20 (pure: below edgefuse's floor) and 2.1 (built for glibc 2.28)."""
    spec = write_spec(tmp_path / "spec")
    spec.write_text(spec.read_text().replace('glibc: "2.17"', f'glibc: "{glibc}"'))
    house = tmp_path / "spec" / "wheelhouse"
    for wheel in house.glob("numpy-*.whl"):
        wheel.unlink()
    abi = f"cp{HOST_PYTHON.replace('.', '')}"
    dummy_wheel(house, "numpy", "1.20")
    dummy_wheel(house, "numpy", "2.1", tag=f"{abi}-{abi}-manylinux_2_28_aarch64")
    return spec


def test_a_version_only_built_for_a_newer_glibc_is_named_with_the_newest_that_fits(
        small_build, tmp_path):
    """pip finds numpy for the board's tags, but not at a version edgefuse allows: the error
    names the requirement, the newest version for the tags tried, and says the index is not
    the cause."""
    spec = _house_spec(tmp_path, "2.27")
    with pytest.raises(InputError, match=r"no wheel of numpy>=1\.24 for Python") as caught:
        build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False)
    context = caught.value.context
    assert "the newest numpy the wheelhouse" in context and "for these tags is 1.20" in context
    assert "not the index" in context
    assert "tags tried: manylinux_2_27_aarch64, manylinux_2_26_aarch64" in context
    assert "manylinux_2_28_aarch64" not in context.split("tags tried:")[1].split("\n")[0]
    assert "python.platform narrows" not in context
    assert not (tmp_path / "out").exists()
    # a python.platform that leaves out the board's newer tags is named as the cause
    spec = _house_spec(tmp_path / "narrow", "2.28")
    narrowed = "wheels: wheelhouse\n  platform: manylinux2014_aarch64"
    spec.write_text(spec.read_text().replace("wheels: wheelhouse", narrowed))
    with pytest.raises(InputError, match=r"no wheel of numpy>=1\.24") as caught:
        build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False)
    assert "python.platform narrows the tags: without it the build takes every tag glibc 2.28" \
        in caught.value.context


def test_the_boards_glibc_decides_which_wheels_are_taken(small_build, tmp_path):
    """The same wheelhouse for a board with glibc 2.28: pip takes numpy 2.1, built for it."""
    spec = _house_spec(tmp_path, "2.28")
    outcome = build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False)
    assert any(line.startswith("numpy==2.1 ") for line in
               (outcome.bundle_dir / "requirements.lock").read_text().splitlines())
    python = json.loads((outcome.bundle_dir / "MANIFEST.json").read_text())["python"]
    assert python["board"] == {"name": "build-host", "os": "described in the spec",
                               "arch": "aarch64", "glibc": "2.28"}
    assert python["platforms"][0] == "manylinux_2_28_aarch64" and python["extras"] == ["vision"]


def test_a_wheelhouse_without_the_targets_wheel_refuses_the_build_first(tmp_path):
    spec = write_spec(tmp_path / "spec")
    house = tmp_path / "spec" / "wheelhouse"
    version = requirement_floors()["numpy"]
    for wheel in house.glob("numpy-*.whl"):
        wheel.unlink()
    dummy_wheel(house, "numpy", version, tag="cp311-cp311-manylinux2014_x86_64")  # the host's
    with pytest.raises(InputError, match=r"no wheel of numpy") as caught:
        build(spec, tmp_path / "out", cache_dir=tmp_path / "cache", progress=False)
    context = caught.value.context
    assert "has no numpy wheel for these tags at all" in context
    assert f"numpy-{version}-cp311-cp311-manylinux2014_x86_64.whl" in context
    assert "--only-binary=:all:" in context and "manylinux2014_aarch64" in context
    assert not (tmp_path / "out").exists()
    cache = tmp_path / "cache"
    assert {p.name for p in cache.iterdir()} <= {"wheel", "wheels"}  # no model was built
    assert not list((cache / "wheels").rglob("*.whl"))


def test_a_spec_without_wheels_for_the_board_is_refused_before_building(tmp_path):
    spec = write_spec(tmp_path / "spec")
    text = spec.read_text()
    spec.write_text(text[: text.index("python:\n")])
    with pytest.raises(InputError, match=r"missing required key 'python'"):
        build(spec, tmp_path / "out", cache_dir=tmp_path / "cache", progress=False)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def _site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python3*/site-packages"))


@pytest.mark.slow
def test_the_environment_is_the_locked_wheels_not_what_an_index_offers(small_build, tmp_path):
    """Before: pip install edgefuse.whl with `>=` requirements took the newest numpy that pip's
    sources offered; now pip sees only the bundle's wheels and its lock."""
    prefix, (v1,) = prefix_builds(small_build, tmp_path, "1.0.0")
    newer = tmp_path / "index"
    dummy_wheel(newer, "numpy", "99.0")
    env = {**host_python3(tmp_path), "PIP_FIND_LINKS": str(newer),
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    done = run_install(v1.output_dir / "install.sh", None, str(v1.archive), env=env, python=True)
    assert done.returncode == 0, done.stderr
    release = (prefix / "current").resolve()
    installed = sorted(p.name for p in _site_packages(release / ".venv").glob("*.dist-info"))
    numpy = requirement_floors()["numpy"]
    assert f"numpy-{numpy}.dist-info" in installed and "numpy-99.0.dist-info" not in installed
    assert "edgefuse-0.1.0.dist-info" in installed
    verify_tree(prefix / "current")


def _tamper_keeping_the_manifest_whole(bundle: Path, relative: str) -> None:
    """Swap a wheel and rewrite MANIFEST.json's digests, as anyone without the signing key can;
    requirements.lock keeps the sha256 of the real wheel."""
    wheel = bundle / relative
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr("numpy/__init__.py", "raise SystemExit('planted')\n")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    rewrite_manifest(bundle, lambda data: data["files"].__setitem__(relative, digest))


def test_a_wheel_that_is_not_the_locked_one_is_refused_before_the_switch(small_build, tmp_path):
    prefix, (v1, v2) = prefix_builds(small_build, tmp_path, "1.0.0", "2.0.0")
    assert run_install(v1.output_dir / "install.sh", None, str(v1.archive)).returncode == 0
    first = os.readlink(prefix / "current")
    bundle = tmp_path / "small-2.0.0"
    shutil.copytree(v2.bundle_dir, bundle)
    relative = f"wheels/numpy-{requirement_floors()['numpy']}-py3-none-any.whl"
    _tamper_keeping_the_manifest_whole(bundle, relative)
    with pytest.raises(InputError, match=r"does not pin the wheels") as caught:
        verify_tree(bundle)
    assert "numpy" in caught.value.context
    done = run_install(bundle / "install.sh", None, str(bundle), env=host_python3(tmp_path),
                       python=True)
    assert done.returncode == 1 and "could not be built from its own wheels" in done.stderr, (
        done.stderr)
    assert "do not match the hashes" in done.stderr.lower()  # pip's own refusal
    assert os.readlink(prefix / "current") == first
    assert not any((prefix / "releases").glob("*/.venv"))


def test_a_board_python_other_than_the_locked_one_is_refused(small_build, tmp_path):
    prefix, (v1,) = prefix_builds(small_build, tmp_path, "1.0.0")
    env = shim(tmp_path / "bin", "python3", 'echo 3.2; exit 0\n')
    done = run_install(v1.output_dir / "install.sh", None, str(v1.archive), env=env, python=True)
    assert done.returncode == 1, done.stderr
    assert f"wheels are for Python {HOST_PYTHON}, but python3 here is 3.2" in done.stderr
    assert not (prefix / "current").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="building as root needs root")
def test_first_boot_builds_the_environment_as_root_never_as_the_service_user(small_build,
                                                                             tmp_path):
    """--finish, as the card maker's first-boot block runs it, where the service user exists:
    venv and pip run as root in folders only root can write (issue 27 §7: built as the service
    user, a process of that user planted a .pth during pip), never through runuser."""
    prefix, (v1,) = prefix_builds(small_build, tmp_path, "1.0.0")
    assert run_install(v1.output_dir / "install.sh", None, str(v1.archive)).returncode == 0
    log = tmp_path / "runuser.log"
    env = host_python3(tmp_path)
    shim(tmp_path / "bin", "id", 'if [ "$#" = 2 ] && [ "$1" = -u ] && [ "$2" = HwHiAiUser ]; '
         'then echo 65534; exit 0; fi\nexec /usr/bin/id "$@"\n')
    shim(tmp_path / "bin", "runuser", f'printf "%s\\n" "$*" >> {log}\n'
         'while [ "$1" != -- ]; do shift; done; shift; exec "$@"\n')
    done = run_install(prefix / "current/install.sh", None, "--finish", env=env, python=True)
    assert done.returncode == 0, done.stderr
    assert not log.exists()
    venv = (prefix / "current").resolve() / ".venv"
    assert {path.lstat().st_uid for path in [venv, *venv.rglob("*")]} == {0}
    assert not any(path.lstat().st_mode & 0o022 for path in [venv, *venv.rglob("*")]
                   if not path.is_symlink())


def _simple_index(wheelhouse: Path, folder: Path) -> str:
    """A PEP 503 index of ``wheelhouse`` on disk; returns its file: URL."""
    for wheel in wheelhouse.glob("*.whl"):
        project = folder / re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        project.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, project / wheel.name)
        (project / "index.html").write_text(
            "".join(f'<a href="{w.name}">{w.name}</a>\n' for w in sorted(project.glob("*.whl"))))
    return folder.as_uri()


def test_download_fetches_the_targets_wheels_from_the_hosts_index(small_build, tmp_path,
                                                                 monkeypatch):
    """``wheels: download``: pip download with the build host's index settings (here a local
    index named by PIP_INDEX_URL; no network)."""
    spec = write_spec(tmp_path / "spec")
    spec.write_text(spec.read_text().replace("wheels: wheelhouse", "wheels: download"))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", _simple_index(tmp_path / "spec/wheelhouse",
                                                      tmp_path / "simple"))
    outcome = build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False)
    assert _lock(outcome.bundle_dir) == _lock(small_build.bundle)


def _plant(site: Path, module: str) -> None:
    (site / module).mkdir(parents=True, exist_ok=True)
    (site / module / "__init__.py").write_text(f"WHERE = 'planted {module}'\n")


@pytest.mark.slow
def test_the_boards_own_packages_never_shadow_the_locked_ones_but_canns_acl_is_seen(
        small_build, tmp_path):
    """The image's numpy and cv2 (here in the user site-packages of the Python the installer
    uses, which an environment made with --system-site-packages puts before its own packages)
    are invisible to the service's environment; CANN's pyACL is found at install time and named
    in edgefuse-cann.pth, after the locked packages."""
    prefix, (v1,) = prefix_builds(small_build, tmp_path, "1.0.0")
    user_base = tmp_path / "userbase"
    user_site = user_base / "lib" / f"python{HOST_PYTHON}" / "site-packages"
    for module in ("numpy", "cv2"):
        _plant(user_site, module)
    cann = tmp_path / "Ascend" / "ascend-toolkit" / "latest"
    _plant(cann / "python" / "site-packages", "acl")
    env = {**host_python3(tmp_path), "PYTHONUSERBASE": str(user_base),
           "ASCEND_TOOLKIT_HOME": str(cann)}
    done = run_install(v1.output_dir / "install.sh", None, str(v1.archive), env=env, python=True)
    assert done.returncode == 0, done.stderr
    assert "CANN's Python folders for pyACL (import acl), in " in done.stderr
    release = (prefix / "current").resolve()
    venv = release / ".venv"
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    pth = _site_packages(venv) / "edgefuse-cann.pth"
    assert pth.read_text() == f"{cann / 'python' / 'site-packages'}\n"
    probe = ("import importlib.util as u, acl\n"
             "print(u.find_spec('numpy'), u.find_spec('cv2'), acl.WHERE)\n")
    seen = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True,
                          text=True, env={**os.environ, **env}, check=True).stdout.split()
    assert seen == ["None", "None", "planted", "acl"]  # stand-in wheels carry no module
    verify_tree(prefix / "current")
    # the same Python with --system-site-packages: the planted copies win (what this prevents)
    other = tmp_path / "system-site-venv"
    subprocess.run([host_python3_path(), "-m", "venv", "--without-pip", "--system-site-packages",
                    str(other)], check=True, env={**os.environ, **env})
    planted = subprocess.run([str(other / "bin" / "python"), "-c",
                              "import numpy, cv2; print(numpy.WHERE, cv2.WHERE)"],
                             capture_output=True, text=True, env={**os.environ, **env},
                             check=True).stdout
    assert planted.split() == ["planted", "numpy", "planted", "cv2"]


@pytest.mark.slow
def test_without_cann_the_environment_has_no_pth_and_says_the_cpu_runs(small_build, tmp_path):
    prefix, (v1,) = prefix_builds(small_build, tmp_path, "1.0.0")
    env = {**host_python3(tmp_path), "ASCEND_TOOLKIT_HOME": str(tmp_path / "none")}
    done = run_install(v1.output_dir / "install.sh", None, str(v1.archive), env=env, python=True)
    assert done.returncode == 0, done.stderr
    assert "no CANN found" in done.stderr and "runs on the CPU fallback" in done.stderr
    venv = (prefix / "current").resolve() / ".venv"
    assert not (_site_packages(venv) / "edgefuse-cann.pth").exists()


def test_a_missing_extra_of_the_app_is_named_with_the_extra(tmp_path):
    """A service with a health port needs the live server (edgefuse[serve]): a wheelhouse
    without aiohttp stops the build, naming the extra that asked for it."""
    spec = write_spec(tmp_path / "spec")
    spec.write_text(spec.read_text().replace("service:\n", "service:\n  health: {port: 8080}\n"))
    for wheel in (tmp_path / "spec" / "wheelhouse").glob("aiohttp-*.whl"):
        wheel.unlink()
    with pytest.raises(InputError, match=r"no wheel of aiohttp>=3\.9 for Python") as caught:
        build(spec, tmp_path / "out", cache_dir=tmp_path / "cache", progress=False)
    assert "aiohttp>=3.9 (required by edgefuse[serve,vision], its serve extra): the wheelhouse" \
        in caught.value.context
    assert "it has no aiohttp" in caught.value.context
