"""The checks of a build spec that a JSON Schema cannot express, as positioned problems.

Why separate from the schema: these need the file system (a model or calibration file exists,
relative to the spec), edgefuse's own knowledge (catalogue names, socs, custom ops, the records
of preprocess / AIPP / app config) and the document as a whole (model names are unique, the app
runs one of the spec's models). Each check looks only at values of the right type, so it runs
beside the schema's errors and every problem is reported in one pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from edgefuse.acl.atc.options import INT8_CONFLICTING_MODES
from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.compile.soc import KNOWN_SOCS, validate_soc
from edgefuse.apps.config import DetectionConfig, SegmentationConfig, from_mapping
from edgefuse.bundle.boards import BOARDS, DEFAULT_BOARD
from edgefuse.bundle.spec_problems import SpecProblem, closest
from edgefuse.bundle.spec_schema import INT8_MODE
from edgefuse.bundle.target_wheels import DOWNLOAD
from edgefuse.bundle.wheel import project_metadata
from edgefuse.bundle.yaml_positions import Located, Path_
from edgefuse.errors import EdgefuseError
from edgefuse.model_info import Postprocess
from edgefuse.models.catalogue import CATALOGUE, VARIANTS
from edgefuse.optimize.pipeline import pipeline_for
from edgefuse.preprocess import Preprocess
from edgefuse.reference.feeds import IMAGE_SUFFIXES, VIDEO_SUFFIXES

APP_CONFIGS = {"detection": DetectionConfig, "segmentation": SegmentationConfig}
# Keys of the app config the spec sets itself (app.model, app.source, app.sinks, app.backend).
APP_OWNED_KEYS = ("model", "source", "jsonl", "save", "backend")
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def source_kind(text: str, spec_dir: Path) -> str:
    """catalogue, file or factory: how a model ``source`` string reads."""
    name, _, variant = text.partition(":")
    if name in CATALOGUE and (not variant or variant in VARIANTS):
        return "catalogue"
    module = name.partition(".")[0]
    looks_catalogue = "." not in name and variant in VARIANTS  # "yolov8m:tiny", a typo
    if _FACTORY.match(text) and module and not looks_catalogue and not (spec_dir / text).exists():
        return "factory"
    return "file"


def check(located: Located, spec_dir: Path) -> list[SpecProblem]:
    data = located.data
    if not isinstance(data, Mapping):
        return []
    problems: list[SpecProblem] = []
    problems += _target(data.get("target"), located)
    models = data.get("models")
    names: dict[str, Path_] = {}
    if isinstance(models, list):
        for index, model in enumerate(models):
            if isinstance(model, Mapping):
                problems += list(_model(model, ("models", index), located, spec_dir))
                name = model.get("name")
                if isinstance(name, str):
                    if name in names:
                        problems.append(SpecProblem(
                            located.value_at(("models", index, "name")),
                            ("models", index, "name"),
                            f"model name '{name}' is used twice (first at line "
                            f"{located.value_at(names[name]).line})",
                            "give every model its own name: it is its folder in the bundle"))
                    names.setdefault(name, ("models", index, "name"))
    problems += _app(data.get("app"), names, located)
    cache = data.get("cache")
    if isinstance(cache, Mapping) and isinstance(cache.get("dir"), str):
        folder = spec_dir / cache["dir"]
        if folder.exists() and not folder.is_dir():
            problems.append(SpecProblem(located.value_at(("cache", "dir")), ("cache", "dir"),
                                        f"'{cache['dir']}' exists and is not a folder",
                                        "name a folder (it is created when missing)"))
    python = data.get("python")
    problems += _board(data.get("target"), python, located)
    if isinstance(python, Mapping) and isinstance(python.get("wheels"), str) \
            and python["wheels"] != DOWNLOAD and not (spec_dir / python["wheels"]).is_dir():
        problems.append(SpecProblem(
            located.value_at(("python", "wheels")), ("python", "wheels"),
            f"the wheelhouse '{python['wheels']}' is not a folder (looked in {spec_dir})",
            "fill it with `pip download --platform manylinux_2_35_aarch64 --platform "
            "manylinux2014_aarch64 --python-version 3.X --only-binary=:all: -d WHEELHOUSE "
            "edgefuse`, or write `wheels: download`"))
    return problems


def _board(target: Any, python: Any, located: Located) -> list[SpecProblem]:
    """The board is one of the table's, or the spec describes it (glibc, arch, python.version);
    a stated Python is the board's own; and edgefuse runs on that Python."""
    if not isinstance(target, Mapping) or not isinstance(python, Mapping):
        return []
    name = target.get("board", DEFAULT_BOARD)
    version = python.get("version")
    if not isinstance(name, str) or not isinstance(version, (str, type(None))):
        return []
    described = [key for key in ("os", "glibc", "arch") if key in target]
    problems = []
    if name in BOARDS:
        board = BOARDS[name]
        for key in described:
            problems.append(SpecProblem(
                located.value_at(("target", key)), ("target", key),
                f"board '{name}' is in edgefuse's table ({board.os}, {board.arch}, glibc "
                f"{board.glibc}, Python {board.python}): its '{key}' is not written in the spec",
                f"remove `{key}:`; a board with another system needs a name of its own"))
        if version is not None and version != board.python:
            problems.append(SpecProblem(
                located.value_at(("python", "version")), ("python", "version"),
                f"board '{name}' runs Python {board.python} ({board.os}); wheels for "
                f"{version} would not install there (install.sh refuses another python3)",
                f"remove `version:` to take {board.python}, or describe the board you have: "
                f"`target: {{board: my-board, glibc: \"{board.glibc}\", arch: {board.arch}}}` "
                f"with `python: {{version: \"{version}\"}}`"))
        version = version or board.python
    else:
        needed = [key for key in ("glibc", "arch") if key not in target]
        needed += ["python.version"] if version is None else []
        if needed:
            near = closest(name, list(BOARDS))
            problems.append(SpecProblem(
                located.value_at(("target", "board")), ("target", "board"),
                f"unknown board '{name}': edgefuse knows {', '.join(BOARDS)}; another board "
                f"must be described ({', '.join(needed)} missing)",
                (f"did you mean `board: {near}`? " if near else "")
                + "or describe it: `target: {board: " + name + ", glibc: \"2.31\", arch: "
                "aarch64}` (ldd --version, uname -m) and `python: {version: \"3.9\"}` "
                "(python3 --version on the board)"))
    supported = SpecifierSet(project_metadata()["requires_python"] or ">=3")
    if version is not None and version not in supported:
        at = ("python", "version") if "version" in python else ("target", "board")
        problems.append(SpecProblem(
            located.value_at(at), at,
            f"edgefuse needs Python {supported}; the board's python3 is {version}",
            "use an image with a newer python3 (e.g. the Ubuntu 22.04 image: atlas-200i-dk-a2)"))
    return problems


def _unreadable_text(file: Path) -> str | None:
    """Why ``file`` cannot be read as UTF-8 text (the end of a sentence), or None."""
    if file.is_dir():
        return "is a folder, not a text file"
    if not file.is_file():
        return "does not exist"
    try:
        file.read_text(encoding="utf-8")
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 text (byte {exc.start})"
    return None


def _target(target: Any, located: Located) -> list[SpecProblem]:
    if not isinstance(target, Mapping) or not isinstance(target.get("soc"), str):
        return []
    soc = target["soc"]
    try:
        validate_soc(soc)
    except EdgefuseError as exc:
        by_lower = {name.lower(): name for name in KNOWN_SOCS}
        lowered = soc.strip().lower()
        near = by_lower.get(lowered) or by_lower.get("ascend" + lowered) or closest(
            soc, list(KNOWN_SOCS))
        return [SpecProblem(located.value_at(("target", "soc")), ("target", "soc"),
                            exc.message, f"write `soc: {near}`" if near else exc.hint)]
    return []


def _model(model: Mapping[str, Any], path: Path_, located: Located,
           spec_dir: Path) -> Iterator[SpecProblem]:
    def at(*keys: str | int) -> tuple[Any, Path_]:
        return located.value_at((*path, *keys)), (*path, *keys)

    source = model.get("source")
    if isinstance(source, str) and source:
        yield from _source(source, model, path, located, spec_dir)
    if "input" in model and "inputs" in model:
        yield SpecProblem(*at("inputs"), "give either 'input' (one shape) or 'inputs' (by "
                          "name), not both", "keep one of them")
    target = (model.get("optimize") or {}).get("target") if isinstance(
        model.get("optimize"), Mapping) else None
    if isinstance(target, str) and target != "soc":
        try:
            pipeline_for(target)
        except EdgefuseError as exc:
            yield SpecProblem(*at("optimize", "target"), exc.message,
                              "write `target: cpu`, `target: soc` or an Ascend soc name")
    head = (model.get("optimize") or {}).get("yolo_head") if isinstance(
        model.get("optimize"), Mapping) else None
    post = model.get("postprocess")
    layout = post.get("layout") if isinstance(post, Mapping) else None
    if head is not None and layout not in (None, "yolo_head"):
        yield SpecProblem(*at("postprocess", "layout"),
                          f"optimize.yolo_head makes the model return final detections, which "
                          f"the app cannot decode as '{layout}'",
                          "write `layout: yolo_head` (or leave it out), or drop "
                          "optimize.yolo_head to decode on the host")
    verify = model.get("verify")
    if isinstance(verify, Mapping) and isinstance(verify.get("calibration"), str):
        calibration = spec_dir / verify["calibration"]
        if not calibration.exists():
            yield SpecProblem(*at("verify", "calibration"),
                              f"'{verify['calibration']}' does not exist (looked in {spec_dir})",
                              "give a folder of images or .npz files, or a video, relative to "
                              "the spec; or leave calibration out for seeded random inputs")
    precision = model.get("precision")
    if isinstance(precision, Mapping):
        yield from _int8(precision, verify if isinstance(verify, Mapping) else {}, at, spec_dir)
    classes = model.get("classes")
    if isinstance(classes, str):
        problem = _unreadable_text(spec_dir / classes)
        if problem:
            yield SpecProblem(*at("classes"), f"class-name file '{classes}' {problem}",
                              "give a UTF-8 text file with one name per line, relative to the "
                              "spec, or a list: `classes: [circle, square]`")
    for key, record in (("aipp", AippSpec.from_dict), ("preprocess", _preprocess),
                        ("postprocess", Postprocess.from_dict)):
        value = model.get(key)
        if isinstance(value, Mapping):
            try:
                record(value)
            except EdgefuseError as exc:
                yield SpecProblem(*at(key), exc.message, exc.hint or f"see the {key} keys in "
                                  "examples/")


def _int8(precision: Mapping[str, Any], verify: Mapping[str, Any],
          at: Callable[..., tuple[Any, Path_]], spec_dir: Path) -> Iterator[SpecProblem]:
    """``precision: {mode: int8}`` has real frames to calibrate on; the INT8 keys are not given
    to a mode that would ignore them, nor to the modes CANN forbids with calibration."""
    mode = precision.get("mode")
    int8_keys = [key for key in ("calibration", "keep_fp16", "keep_fp16_budget_s")
                 if key in precision]
    if mode != INT8_MODE:
        given = [("precision", key) for key in int8_keys]
        given += [("verify", key) for key in ("int8_min_cosine", "int8_max_drop")
                  if key in verify]
        for path in given:
            if mode in INT8_CONFLICTING_MODES:
                message = (f"INT8 calibration cannot be combined with precision mode '{mode}': "
                           "CANN refuses calibration with force_fp32 and must_keep_origin_dtype "
                           "(atlasatcparam_16_0059), which would give neither INT8's speed nor "
                           "that mode's accuracy")
            else:
                message = (f"'{path[1]}' applies to `mode: int8`; with mode "
                           f"'{mode or 'force_fp16'}' it would be ignored")
            yield SpecProblem(*at(*path), message,
                              f"write `mode: int8` to quantize, or remove `{path[1]}:`")
        return
    keep = precision.get("keep_fp16")
    if isinstance(keep, str):
        keep = [item.strip() for item in keep.split(",")]
    if isinstance(keep, list) and "none" in keep and len(keep) > 1:
        yield SpecProblem(*at("precision", "keep_fp16"),
                          "'none' cannot be combined with other entries of keep_fp16",
                          "write `keep_fp16: none`, `auto`, or layer names (with or without "
                          "auto)")
    source = precision.get("calibration", verify.get("calibration"))
    if "calibration" not in precision and not isinstance(source, str):
        yield SpecProblem(*at("precision", "mode"),
                          "INT8 needs real frames to calibrate on: the spec names none "
                          "(precision.calibration, or verify.calibration), and activation "
                          "ranges measured on random noise are not those of the camera",
                          "add `calibration: calib/frames/` to precision: a folder of images "
                          "or a video of the scene, relative to the spec")
        return
    if not isinstance(source, str):
        return
    field = ("precision", "calibration") if "calibration" in precision else (
        "verify", "calibration")
    problem = _calibration_problem(spec_dir / source)
    if problem is not None and (field == ("precision", "calibration")
                                or (spec_dir / source).exists()):  # verify reports it missing
        yield SpecProblem(*at(*field), f"INT8 calibration source '{source}' {problem} "
                          f"(looked in {spec_dir})",
                          "give a folder of images (or .npz files made through the model's "
                          "preprocessing) or a video of the scene, relative to the spec")


def _calibration_problem(path: Path) -> str | None:
    """Why ``path`` holds no calibration frames (the end of a sentence), or None."""
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in VIDEO_SUFFIXES or suffix in IMAGE_SUFFIXES or suffix == ".npz":
            return None
        return f"is a '{suffix or path.name}' file, neither a video, an image nor an .npz file"
    if path.is_dir():
        if any(p.suffix.lower() in IMAGE_SUFFIXES or p.suffix.lower() == ".npz"
               for p in path.iterdir()):
            return None
        return "is a folder without images or .npz files"
    return "does not exist"


def _preprocess(value: Mapping[str, Any]) -> Preprocess:
    return Preprocess.from_dict(value if "size" in value else {**value, "size": [1, 1]})


def _source(source: str, model: Mapping[str, Any], path: Path_, located: Located,
            spec_dir: Path) -> Iterator[SpecProblem]:
    where = located.value_at((*path, "source"))
    kind = source_kind(source, spec_dir)
    if kind == "catalogue":
        if "sha256" in model:
            yield SpecProblem(located.value_at((*path, "sha256")), (*path, "sha256"),
                              "a catalogue model has no file to pin", "remove `sha256:`")
        return
    if kind == "factory":
        return
    file = spec_dir / source
    if file.is_file():
        return
    name, _, variant = source.partition(":")
    looks_like_name = "/" not in source and "." not in source
    if looks_like_name:
        near = closest(name, list(CATALOGUE))
        if name in CATALOGUE:
            message = f"catalogue model '{name}' has no variant '{variant}'"
            fix = f"write `source: {name}` or `source: {name}:tiny`"
        else:
            message = f"'{source}' is neither a catalogue model nor a file"
            suffix = f":{variant}" if variant else ""
            fix = (f"did you mean `source: {near}{suffix}`?" if near else
                   f"catalogue models: {', '.join(CATALOGUE)}; or give a file relative to the "
                   "spec, or package.module:factory")
        yield SpecProblem(where, (*path, "source"), message, fix)
        return
    reason = "is a folder" if file.is_dir() else "does not exist"
    yield SpecProblem(where, (*path, "source"), f"model file '{source}' {reason} (looked in "
                      f"{spec_dir})", "give an .onnx or TorchScript file relative to the spec, "
                      "a catalogue name, or package.module:factory")


def _app(app: Any, names: Mapping[str, Path_], located: Located) -> list[SpecProblem]:
    if not isinstance(app, Mapping):
        return []
    problems = []
    model = app.get("model")
    if isinstance(model, str) and names and model not in names:
        near = closest(model, list(names))
        problems.append(SpecProblem(
            located.value_at(("app", "model")), ("app", "model"),
            f"'{model}' is not one of the spec's models ({', '.join(names)})",
            f"write `model: {near}`" if near else f"write `model: {next(iter(names))}`"))
    kind = app.get("kind")
    config = app.get("config")
    # the schema reports a kind that is not one of the names; a list or a mapping there must
    # not reach the lookup (unhashable: exit 3 instead of the spec's problem list)
    if isinstance(kind, str) and kind in APP_CONFIGS and isinstance(config, Mapping):
        owned = [key for key in config if key in APP_OWNED_KEYS]
        for key in owned:
            problems.append(SpecProblem(
                located.key_at(("app", "config", key)), ("app", "config", key),
                f"'{key}' is set by the spec's app section, not its config",
                f"move it up: `app.{'sinks.' if key in ('jsonl', 'save') else ''}{key}`"))
        rest = {k: v for k, v in config.items() if k not in owned}
        try:
            from_mapping(APP_CONFIGS[kind], rest, "app.config")
        except EdgefuseError as exc:
            key = _key_named(exc.message, rest)
            where = located.key_at(("app", "config", key)) if key else located.value_at(
                ("app", "config"))
            problems.append(SpecProblem(where, ("app", "config", *([key] if key else [])),
                                        exc.message, exc.hint or "see apps/<kind>/config.yaml"))
    return problems


def _key_named(message: str, config: Mapping[str, Any]) -> str | None:
    for key in config:
        if f"'{key}'" in message:
            return str(key)
    return None
