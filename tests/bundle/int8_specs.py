"""What the INT8 build-spec tests share: a one-model spec folder (the model, the test photos as
its calibration ``frames/``, a wheelhouse for the host's Python) and one model built through the
stages without the bundle around it."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from edgefuse.bundle.cache import Cache
from edgefuse.bundle.spec import load_spec
from edgefuse.bundle.stages import build_model
from tests.bundle.wheelhouse import HOST_PYTHON, fill_wheelhouse

PHOTOS = Path(__file__).parents[1] / "vision" / "photos"
SOC = "Ascend310B4"
HEADER = f"""\
apiVersion: edgefuse/v1
bundle: {{name: quant, version: "1.0.0"}}
target: {{soc: {SOC}, board: build-host, glibc: "2.17", arch: aarch64}}
reproducibility: {{source_date_epoch: 1767225600}}
models:
"""
PYTHON = f'python: {{version: "{HOST_PYTHON}", wheels: wheelhouse}}\n'


def spec_folder(folder: Path, models: str, model: onnx.ModelProto, model_file: str,
                frames: list[Path] | None = None) -> Path:
    """``folder/spec.yaml`` holding ``models`` (the spec's models list, indented), beside
    ``model`` saved as ``model_file``, ``frames/`` (``frames`` or the test photos; kept where
    it exists) and a wheelhouse."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / model_file)
    if not (folder / "frames").exists():
        (folder / "frames").mkdir()
        for photo in frames if frames is not None else sorted(PHOTOS.glob("*.jpg")):
            shutil.copy(photo, folder / "frames" / photo.name)
    fill_wheelhouse(folder / "wheelhouse")
    spec = folder / "spec.yaml"
    spec.write_text(HEADER + models + PYTHON, encoding="utf-8")
    return spec


def build_one(spec: Path, cache: Path):
    """The spec's first model through every stage, with ``cache``; progress unheard."""
    return build_model(load_spec(spec).models[0], SOC, Cache(cache), lambda *event: None)
