"""Issue 27 §2, performed: edit a helper module that a factory model imports, build again, and
the convert stage is rebuilt from the edited helper (its model has the digest of a fresh build
from an empty cache), not reused from the cache."""

from __future__ import annotations

import pytest

from edgefuse.bundle.cache import Cache
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.stages import MODEL_FILE, build_model
from edgefuse.errors import InputError

pytestmark = pytest.mark.torch

SPEC = """\
apiVersion: edgefuse/v1
bundle: {name: helpers, version: "1.0.0"}
target: {soc: Ascend310B4, board: debian-12-arm64}
models:
  - name: net
    source: "mynet:build"
    input: [1, 3, 8, 8]
    task: classify
    precision: {keep_fp32: none}
    verify: {samples: 1}
python: {wheels: wheelhouse}
"""
FACTORY = """\
import torch
{importer}

def build():
    torch.manual_seed(0)
    layer = torch.nn.Conv2d(3, 4, 3, padding=1)
    with torch.no_grad():
        layer.weight.mul_(SCALE)
    return torch.nn.Sequential(layer, torch.nn.ReLU()).eval()
"""


def _spec(folder, importer="from helpers import SCALE"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mynet.py").write_text(FACTORY.format(importer=importer))
    (folder / "helpers.py").write_text("SCALE = 1.0\n")
    (folder / "wheelhouse").mkdir(exist_ok=True)
    (folder / "spec.yaml").write_text(SPEC)
    return load_spec(folder / "spec.yaml").models[0]


def _convert(model, cache):
    events = []
    build = build_model(model, "Ascend310B4", cache, lambda *event: events.append(event))
    return build.entries["convert"].files[MODEL_FILE], build.cached["convert"]


def test_editing_a_helper_module_rebuilds_the_model(tmp_path):
    model = _spec(tmp_path / "spec")
    cache = Cache(tmp_path / "cache")
    first, cached = _convert(model, cache)
    assert not cached
    assert _convert(model, cache) == (first, True)
    (tmp_path / "spec" / "helpers.py").write_text("SCALE = 2.0  # twice the weights\n")
    edited, cached = _convert(model, cache)
    assert not cached
    assert edited != first
    fresh, _ = _convert(model, Cache(tmp_path / "fresh-cache"))
    assert edited == fresh


def test_a_module_imported_by_a_computed_name_is_refused_not_cached(tmp_path):
    model = _spec(tmp_path / "spec", importer='import importlib\n'
                  'SCALE = importlib.import_module("help" + "ers").SCALE')
    with pytest.raises(InputError, match=r"loaded helpers\.py, which its import statements"):
        _convert(model, Cache(tmp_path / "cache"))
    assert not list((tmp_path / "cache" / "convert").rglob("entry.json"))
