"""Ultralytics exports and Ultralytics' own predictions on real photos, cached between runs.

Why a subprocess: Ultralytics needs a torchvision it can import (the tests-only stand-in in
tests/fakes/torchvision_for_ultralytics) and writes settings at import; neither may leak into the
test process. The export and the reference predictions are made once per (Ultralytics version,
yaml, export mode, seed, photos) under the user's cache folder
(``$XDG_CACHE_HOME/edgefuse/tests/ultralytics``, else ``~/.cache/...``), written to a temporary
folder and renamed into place whole.

The photos ship with installed packages (Ultralytics' assets, Matplotlib's sample data), plus
crops of them at other aspect ratios (0.38 to 2.35); nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
STAND_IN = HERE.parents[1] / "tests" / "fakes" / "torchvision_for_ultralytics"
SCRIPT = HERE / "ultralytics_reference.py"
RETINA_SCRIPT = HERE / "ultralytics_retina.py"
SEED = 29
# name -> (source photo, crop as (top, bottom, left, right) fractions, or None for the whole)
PHOTOS = {
    "bus.jpg": ("ultralytics:bus.jpg", None),
    "zidane.jpg": ("ultralytics:zidane.jpg", None),
    "grace_hopper.jpg": ("matplotlib:grace_hopper.jpg", None),
    "bus_wide.png": ("ultralytics:bus.jpg", (0.35, 0.72, 0.0, 1.0)),
    "zidane_cinema.png": ("ultralytics:zidane.jpg", (0.1, 0.85, 0.0, 1.0)),
    "bus_tall.png": ("ultralytics:bus.jpg", (0.0, 1.0, 0.0, 0.38)),
    "grace_square.png": ("matplotlib:grace_hopper.jpg", (0.1, 0.95, 0.0, 1.0)),
}


@dataclasses.dataclass(frozen=True)
class Export:
    """An exported model and what Ultralytics' predictor found on each photo."""

    onnx: Path
    reference: dict
    folder: Path

    def masks(self, index: int) -> np.ndarray:
        """The frame-size boolean masks Ultralytics made for photo ``index``."""
        data = np.load(self.folder / f"masks_{index}.npz")
        return np.unpackbits(data["masks"], -1, count=int(data["width"])).astype(bool)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgefuse" / "tests" / "ultralytics"


def ultralytics_version() -> str:
    try:
        return importlib.metadata.version("ultralytics")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError("these tests need Ultralytics: pip install ultralytics --no-deps "
                           "psutil polars ultralytics-thop onnxslim (the dev extra)") from None


def photos() -> list[Path]:
    """The photos, written once (lossless crops) into the cache; their paths in PHOTOS order."""
    folder = cache_root() / "photos-v1"
    paths = [folder / name for name in PHOTOS]
    if all(p.exists() for p in paths):
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    for path, (source, crop) in zip(paths, PHOTOS.values(), strict=True):
        image = cv2.imread(str(_packaged(source)))
        if crop is not None:
            height, width = image.shape[:2]
            top, bottom, left, right = crop
            image = image[int(top * height):int(bottom * height),
                          int(left * width):int(right * width)]
        temporary = path.with_name(f".{path.name}.tmp{path.suffix}")
        if not cv2.imwrite(str(temporary), image):
            raise RuntimeError(f"cannot write {temporary}")
        temporary.replace(path)
    return paths


def exported(yaml: str, mode: str = "default", seed: int = SEED) -> Export:
    """The cached export of ``yaml`` (``mode`` "default" or "end2end") with its reference."""
    images = photos()
    digest = hashlib.sha256(SCRIPT.read_bytes())
    for image in images:
        digest.update(image.read_bytes())
    key = f"{yaml.removesuffix('.yaml')}-{mode}-s{seed}-{digest.hexdigest()[:12]}"
    folder = cache_root() / ultralytics_version() / key
    if not (folder / "reference.json").exists():
        _export(folder, yaml, mode, seed, images)
    return Export(folder / "model.onnx", json.loads((folder / "reference.json").read_text()),
                  folder)


def retina_reference(export: Export) -> Export:
    """Ultralytics' predictions with ``retina_masks=True`` on ``export`` (a segmenter), cached
    beside it."""
    digest = hashlib.sha256(RETINA_SCRIPT.read_bytes()).hexdigest()[:12]
    folder = export.folder / f"retina-{digest}"
    if not (folder / "reference.json").exists():
        _run(folder, [str(RETINA_SCRIPT), str(export.onnx), "{out}", *map(str, photos())],
             "predicting with retina_masks")
    return Export(export.onnx, json.loads((folder / "reference.json").read_text()), folder)


def _export(folder: Path, yaml: str, mode: str, seed: int, images: list[Path]) -> None:
    _run(folder, [str(SCRIPT), "{out}", yaml, str(seed), mode, *map(str, images)],
         f"exporting {yaml} ({mode})")


def _run(folder: Path, arguments: list[str], what: str) -> None:
    """Run a script under Ultralytics' settings in a temporary folder; its "{out}" folder
    becomes ``folder`` when it succeeds."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as work:
        settings = Path(work) / "settings"
        out = Path(work) / "out"
        out.mkdir()
        env = {**os.environ, "PYTHONPATH": str(STAND_IN), "YOLO_OFFLINE": "1",
               "YOLO_CONFIG_DIR": str(settings), "YOLO_VERBOSE": "False"}
        done = subprocess.run([sys.executable, *(a.replace("{out}", str(out))
                                                 for a in arguments)],
                              cwd=work, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{what} with Ultralytics failed:\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        try:
            out.replace(folder)
        except OSError:
            if not (folder / "reference.json").exists():
                raise  # not another run that made the same one meanwhile


def _packaged(source: str) -> Path:
    package, name = source.split(":")
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"the photo {name} ships with {package}, which is not installed")
    root = Path(spec.origin).parent
    return root / ("assets" if package == "ultralytics" else "mpl-data/sample_data") / name
