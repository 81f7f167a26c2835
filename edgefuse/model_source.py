"""What a user hands ``open_session``, resolved to the files each backend needs.

Why its own module: the backends decide from it whether they can run a model (the board needs an
OM for its soc, ONNX Runtime a host ONNX), and the dispatcher in ``edgefuse.runtime`` imports the
backends; kept here, below both, neither has to import the other.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import onnx

from edgefuse.errors import InputError, Ref
from edgefuse.manifest import BuildManifest, read_manifest, resolve

# A bundle's BUILD_DIR of a model with edgefuse custom ops also holds the model before compile,
# which carries their decompositions: the prepared ONNX keeps them in ATC's spelling, which ONNX
# Runtime cannot load, so host backends (the board's CPU fallback included) run this one.
HOST_ONNX = "host.onnx"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """What ``open_session`` was given, resolved to the files each backend needs."""

    label: str
    onnx: Path | onnx.ModelProto | None
    om: Path | None
    manifest: BuildManifest | None


def resolve_source(model: str | os.PathLike[str] | onnx.ModelProto | ModelSource) -> ModelSource:
    """A BUILD_DIR (manifest.json), an .onnx file, an .om file or an in-memory ModelProto."""
    if isinstance(model, ModelSource):
        return model
    if isinstance(model, onnx.ModelProto):
        return ModelSource(model.graph.name or "<in-memory model>", model, None, None)
    if not isinstance(model, (str, os.PathLike)):
        raise InputError(
            f"a model must be a BUILD_DIR, an .onnx or .om path, or an onnx.ModelProto, got "
            f"{type(model).__name__}",
            reference=Ref.BAD_MODEL_SOURCE,
        )
    path = Path(model)
    if path.is_dir():
        manifest = read_manifest(path)
        om = resolve(path, manifest.om) if manifest.om else None
        host = path / HOST_ONNX
        onnx_path = host if host.is_file() else resolve(path, manifest.model)
        return ModelSource(str(path), onnx_path, om, manifest)
    if not path.is_file():
        raise InputError(
            f"'{path}' does not exist",
            hint="pass a BUILD_DIR written by `edgefuse compile`, an .onnx file or an .om file",
            reference=Ref.MODEL_NOT_FOUND,
        )
    if path.suffix.lower() == ".om":
        return ModelSource(str(path), None, path, None)
    return ModelSource(str(path), path, None, None)
