"""One small bundle, built once for every build test (two ONNX-file models, no PyTorch)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from edgefuse.bundle.builder import BuildOutcome, build
from tests.bundle.models import write_spec


@dataclasses.dataclass(frozen=True)
class SmallBuild:
    spec_dir: Path
    cache: Path
    outcome: BuildOutcome

    @property
    def bundle(self) -> Path:
        return self.outcome.bundle_dir

    @property
    def archive(self) -> Path:
        return self.outcome.archive

    @property
    def install_sh(self) -> Path:
        return self.outcome.output_dir / "install.sh"


@pytest.fixture(scope="session")
def small_build(tmp_path_factory) -> SmallBuild:
    root = tmp_path_factory.mktemp("small")
    spec = write_spec(root / "spec")
    cache = root / "cache"
    outcome = build(spec, root / "out", cache_dir=cache, progress=False)
    return SmallBuild(spec.parent, cache, outcome)


@pytest.fixture
def root(tmp_path) -> Path:
    """An empty root file system for ``install.sh --root`` (a systemd unit folder only)."""
    folder = tmp_path / "root"
    (folder / "etc" / "systemd" / "system").mkdir(parents=True)
    return folder
