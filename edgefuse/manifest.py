"""The BUILD_DIR contract: ``manifest.json``, written by ``compile`` and read by ``open_session``.

Why a manifest and not a folder convention: the runtime on the board must know, without guessing,
which OM goes with which host-runnable ONNX, what soc and CANN version the OM was built for (an
OM built for Ascend310B4 does not load on an Ascend310P3, and one built with a newer CANN may not
load on an older one), and what the model's inputs are. The ``files`` digests catch a half-copied
or hand-edited build before a board spends minutes loading it.

Layout (format ``edgefuse-build/1``)::

    {
      "format": "edgefuse-build/1",
      "edgefuse_version": "0.1.0",
      "soc": "Ascend310B4" | null,          # what the OM was compiled for
      "cann_version": "7.0.0" | null,       # the CANN that compiled it
      "model": "model.onnx",                # host-runnable ONNX, relative to the build dir
      "om": "model.om" | null,
      "inputs":  [{"name": "x", "shape": [1, 3, 224, 224], "dtype": "float32", "layout": "NCHW"}],
      "outputs": [{"name": "y", "shape": [1, 1000], "dtype": "float32", "layout": null}],
      "preprocess": {"kind": "aipp", ...} | null,  # AippRecord: the OM takes uint8 frames
      "files": {"model.onnx": "<sha256>", "model.om": "<sha256>"}
    }

Unknown top-level keys are kept in ``BuildManifest.extra`` and written back, so later stages can
add fields without this module dropping them. Shapes hold ints for fixed dimensions and strings
(or null) for dynamic ones.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from edgefuse._files import write_text
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.errors import EdgefuseError, InputError, Ref

FORMAT = "edgefuse-build/1"
MANIFEST_NAME = "manifest.json"

_KNOWN_KEYS = (
    "format", "edgefuse_version", "soc", "cann_version", "model", "om",
    "inputs", "outputs", "preprocess", "files",
)


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    """One model input or output as the build recorded it."""

    name: str
    shape: tuple[int | str | None, ...]
    dtype: str  # a numpy dtype name: "float32", "float16", "uint8", ...
    layout: str | None = None  # "NCHW", "NHWC", or None when it is not an image

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "layout": self.layout}


@dataclasses.dataclass(frozen=True)
class AippRecord:
    """The manifest's ``preprocess`` block of a build compiled with static AIPP.

    Why typed: the compile stage writes it and three readers act on it (the host sessions replay
    AIPP on the frame, the board session sizes the frame buffer, ``run`` makes frames from image
    files); as a bare dict each reader assumed keys the writer never wrote.
    """

    input: str  # the model input AIPP feeds
    related_input_rank: int  # its index among the model's inputs
    spec: AippSpec
    config: str = "aipp.cfg"  # the --insert_op_conf file, relative to the build dir
    model_input_layout: str = "NCHW"  # what AIPP hands the network
    model_input_shape: tuple[int | str | None, ...] = ()

    KIND = "aipp"

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """One uint8 frame: (H, W, 3) for RGB/BGR, (H * 3 / 2, W) for YUV420SP."""
        return self.spec.frame_shape()

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "config": self.config,
            "input": self.input,
            "related_input_rank": self.related_input_rank,
            "spec": self.spec.to_dict(),
            "frame": {"shape": list(self.frame_shape), "dtype": "uint8"},
            "model_input": {"layout": self.model_input_layout,
                            "shape": list(self.model_input_shape)},
            "host_emulation": "edgefuse.acl.compile.aipp.AippSpec.emulate",
        }

    @classmethod
    def from_json(cls, data: Any, fail) -> AippRecord:
        if not isinstance(data, dict) or data.get("kind") != cls.KIND:
            raise fail(f"'preprocess' must be an object with \"kind\": \"{cls.KIND}\"")
        for key, kind in (("input", str), ("related_input_rank", int), ("spec", dict)):
            if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
                raise fail(f"'preprocess.{key}' is missing or not a {kind.__name__}")
        model_input = data.get("model_input", {})
        if not isinstance(model_input, dict):
            raise fail("'preprocess.model_input' must be an object")
        try:
            spec = AippSpec.from_dict(data["spec"])
        except EdgefuseError as exc:
            raise fail(f"'preprocess.spec' is not a valid AIPP spec: {exc.message}") from exc
        return cls(
            input=data["input"],
            related_input_rank=data["related_input_rank"],
            spec=spec,
            config=str(data.get("config", "aipp.cfg")),
            model_input_layout=str(model_input.get("layout", "NCHW")),
            model_input_shape=tuple(model_input.get("shape", ())),
        )


@dataclasses.dataclass(frozen=True)
class BuildManifest:
    """What a BUILD_DIR holds; paths are relative to the build dir."""

    model: str
    inputs: tuple[TensorEntry, ...]
    outputs: tuple[TensorEntry, ...]
    edgefuse_version: str
    soc: str | None = None
    cann_version: str | None = None
    om: str | None = None
    preprocess: AippRecord | None = None
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    format: str = FORMAT

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": self.format,
            "edgefuse_version": self.edgefuse_version,
            "soc": self.soc,
            "cann_version": self.cann_version,
            "model": self.model,
            "om": self.om,
            "inputs": [entry.to_json() for entry in self.inputs],
            "outputs": [entry.to_json() for entry in self.outputs],
            "preprocess": self.preprocess.to_json() if self.preprocess is not None else None,
            "files": dict(sorted(self.files.items())),
        }
        data.update(self.extra)
        return data


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in chunks (OM files can be hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(build_dir: str | os.PathLike[str], manifest: BuildManifest) -> BuildManifest:
    """Hash the build's files and write ``manifest.json`` atomically; returns what was written.

    The digests are always recomputed here, for ``model``, ``om`` and every path already listed in
    ``manifest.files``, so a manifest never records a digest of something other than what is on
    disk at the time it is written.
    """
    root = Path(build_dir)
    names = set(manifest.files) | {manifest.model} | ({manifest.om} if manifest.om else set())
    files = {}
    for name in sorted(names):
        path = _inside(root, name, "files")
        if not path.is_file():
            raise InputError(
                f"the build lists '{name}' but {path} does not exist",
                hint="write the file before the manifest",
                reference=Ref.BAD_BUILD_DIR,
            )
        files[name] = file_sha256(path)
    written = dataclasses.replace(manifest, files=files)
    write_text(root / MANIFEST_NAME, json.dumps(written.to_json(), indent=2) + "\n")
    return written


def read_manifest(build_dir: str | os.PathLike[str], *, check_files: bool = True) -> BuildManifest:
    """Parse and check ``BUILD_DIR/manifest.json``; with ``check_files``, verify every digest."""
    root = Path(build_dir)
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise InputError(
            f"'{root}' has no {MANIFEST_NAME}",
            hint="pass a directory written by `edgefuse compile`, or an .onnx file",
            reference=Ref.BAD_BUILD_DIR,
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"{path} is not valid JSON: {exc}",
            hint="re-run `edgefuse compile` to rewrite the build",
            reference=Ref.BAD_BUILD_DIR,
        ) from exc
    manifest = _from_json(data, path)
    if check_files:
        _check_digests(root, manifest)
    return manifest


def _from_json(data: Any, path: Path) -> BuildManifest:
    def fail(problem: str) -> InputError:
        return InputError(
            f"{path}: {problem}",
            hint="re-run `edgefuse compile` to rewrite the build",
            reference=Ref.BAD_BUILD_DIR,
        )

    if not isinstance(data, dict):
        raise fail("the top level must be a JSON object")
    if data.get("format") != FORMAT:
        raise fail(f"format is {data.get('format')!r}, this edgefuse reads {FORMAT!r}")
    for key, kind in (("model", str), ("edgefuse_version", str), ("inputs", list),
                      ("outputs", list)):
        if not isinstance(data.get(key), kind):
            raise fail(f"'{key}' is missing or not a {kind.__name__}")
    for key in ("soc", "cann_version", "om"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise fail(f"'{key}' must be a string or null")
    files = data.get("files", {})
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        raise fail("'files' must map relative paths to sha256 strings")
    preprocess = data.get("preprocess")
    if preprocess is not None:
        preprocess = AippRecord.from_json(preprocess, fail)
    return BuildManifest(
        model=data["model"],
        inputs=tuple(_tensor(entry, fail) for entry in data["inputs"]),
        outputs=tuple(_tensor(entry, fail) for entry in data["outputs"]),
        edgefuse_version=data["edgefuse_version"],
        soc=data.get("soc"),
        cann_version=data.get("cann_version"),
        om=data.get("om"),
        preprocess=preprocess,
        files=dict(files),
        extra={k: v for k, v in data.items() if k not in _KNOWN_KEYS},
    )


def _tensor(entry: Any, fail) -> TensorEntry:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise fail(f"tensor entry {entry!r} needs a 'name'")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(
        d is None or isinstance(d, (int, str)) and not isinstance(d, bool) for d in shape
    ):
        raise fail(f"tensor '{entry['name']}' has a bad shape {shape!r}")
    if not isinstance(entry.get("dtype"), str):
        raise fail(f"tensor '{entry['name']}' needs a 'dtype' string")
    return TensorEntry(entry["name"], tuple(shape), entry["dtype"], entry.get("layout"))


def _inside(root: Path, name: str, field: str) -> Path:
    """``root / name``, refusing absolute paths and '..' so a manifest cannot point outside."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise InputError(
            f"{field} entry '{name}' must be a path inside the build directory",
            reference=Ref.BAD_BUILD_DIR,
        )
    return root.joinpath(*relative.parts)


def _check_digests(root: Path, manifest: BuildManifest) -> None:
    required = {manifest.model} | ({manifest.om} if manifest.om else set())
    unlisted = sorted(required - set(manifest.files))
    if unlisted:
        raise InputError(
            f"{root / MANIFEST_NAME} records no digest for {', '.join(unlisted)}",
            hint="re-run `edgefuse compile` to rewrite the build",
            reference=Ref.BAD_BUILD_DIR,
        )
    for name, expected in sorted(manifest.files.items()):
        path = _inside(root, name, "files")
        if not path.is_file():
            raise InputError(
                f"the build lists '{name}' but it is missing from {root}",
                hint="copy the whole build directory to the board, not single files",
                reference=Ref.BAD_BUILD_DIR,
            )
        actual = file_sha256(path)
        if actual != expected:
            raise InputError(
                f"'{name}' in {root} does not match its manifest digest",
                context=f"expected sha256 {expected}\nfound    sha256 {actual}",
                hint="the file changed after `edgefuse compile` (partial copy or hand edit); "
                "copy the build again or re-run compile",
                reference=Ref.BUILD_FILE_MODIFIED,
            )


def resolve(build_dir: str | os.PathLike[str], relative: str) -> Path:
    """The absolute path of a file the manifest names."""
    return _inside(Path(build_dir), relative, "path")
