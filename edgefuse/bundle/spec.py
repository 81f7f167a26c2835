"""The build spec: read ``SPEC.yaml``, validate it completely, and hand out typed records.

Order: read the file -> parse YAML keeping positions (``yaml_positions``) -> keys written twice ->
the JSON Schema (``spec_schema``, with ``jsonschema``) -> the checks a schema cannot make
(``spec_checks``). Every problem of every step is collected and raised together as one
``SpecError`` (``error[bad-build-spec]``, exit 2) before any work starts; only a spec with no
problem becomes a ``BuildSpec``.

Paths in the spec are relative to the spec's folder. The records keep the text as written
(``ModelSpec.source``) next to what it resolves to, so that nothing derived from where the spec
happens to sit (an absolute path) reaches the bundle or a cache key.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema

from edgefuse.bundle import spec_checks
from edgefuse.bundle.boards import DEFAULT_BOARD
from edgefuse.bundle.spec_problems import SpecError, SpecProblem, from_schema_error
from edgefuse.bundle.spec_schema import INT8_MODE, SCHEMA
from edgefuse.bundle.target_wheels import target_python
from edgefuse.bundle.yaml_positions import (
    Located,
    Path_,
    Position,
    YamlSyntaxError,
    load_located,
)
from edgefuse.errors import InputError, Ref
from edgefuse.quantize.int8_mixed import DEFAULT_MAX_DROP

DEFAULT_SERVICE_USER = "HwHiAiUser"  # the Atlas 200I DK A2 image's runtime user
# its uid and gid where the emitted image creates it (--emit k8s): a pod's runAsUser is a number
DEFAULT_SERVICE_ID = 1000
DEFAULT_CANN_HOME = "/usr/local/Ascend/ascend-toolkit/latest"
DEFAULT_VERIFY = {"optimize_min_cosine": 0.99999, "fp16_min_cosine": 0.999, "max_rel_l2": None,
                  "samples": 2, "seed": 0, "calibration": None, "int8_min_cosine": 0.99,
                  "int8_max_drop": DEFAULT_MAX_DROP}
# The ATC precision mode of an INT8 build's float layers: what `compile --int8` uses by default.
INT8_FLOAT_MODE = "force_fp16"
# The time keep_fp16 auto may search in a build (the CLI's --budget is 600 s): a build stays fast,
# and a search cut by it says so (its stopped_by) in the MANIFEST and the report.
DEFAULT_KEEP_FP16_BUDGET_S = 120.0


@dataclasses.dataclass(frozen=True)
class Int8Spec:
    """``precision: {mode: int8}``: the frames ATC's calibration runs on, the layers it leaves
    FP16, the gate on the host emulation, and where the spec says each: a problem only the build
    can find (frames that are only noise, a layer the model does not have) is reported at that
    line of the spec, as validation would have."""

    calibration: Path
    calibration_text: str  # as written, relative to the spec
    keep_fp16: tuple[str, ...] | None  # as written ("auto", "none", names); None: not written
    min_cosine: float
    max_drop: float  # points of the task metric below FP16's, for keep_fp16 auto
    budget_s: float  # the time keep_fp16 auto may search
    spec_file: str
    calibration_at: tuple[Position, Path_]  # where the value is, its path in the document
    keep_fp16_at: tuple[Position, Path_]

    def keep_fp16_for(self, task: str | None) -> tuple[str, ...]:
        """``keep_fp16`` for a model of ``task``: as written, else ``auto`` where the task is
        known (its metric gates the choice) and none where it is not, as ``quantize --int8``
        decides."""
        if self.keep_fp16 is not None:
            return self.keep_fp16
        return ("auto",) if task is not None else ()

    def problem(self, field: str, message: str, fix: str | None) -> SpecError:
        """A ``SpecError`` at ``field`` ("calibration" or "keep_fp16") of this spec."""
        position, path = self.calibration_at if field == "calibration" else self.keep_fp16_at
        error = SpecError(self.spec_file, [SpecProblem(position, path, message, fix)])
        error.hint = "fix the line above; the stages before INT8 are cached, no bundle was written"
        return error


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model of the spec, defaults filled in."""

    name: str
    directory: Path  # the spec's folder: factories import from it
    source: str  # as written
    source_kind: str  # catalogue | file | factory
    source_file: Path | None  # the file a "file" source names
    sha256: str | None
    inputs: dict[str | None, tuple[int, ...]] | None  # None key: the single unnamed input
    opset: int | None
    optimize: dict[str, Any]  # target ("cpu", "soc" or a soc), only, skip, yolo_head
    precision: dict[str, Any]  # mode, keep_fp32, keep_io_types (+ calibration, keep_fp16: int8)
    verify: dict[str, Any]  # the gates and the calibration inputs (see DEFAULT_VERIFY)
    calibration: Path | None
    aipp: dict[str, Any] | None
    custom_ops: bool
    app: dict[str, Any]  # task, classes, preprocess, postprocess as given (classes resolved)
    int8: Int8Spec | None = None  # precision mode int8

    @property
    def catalogue_name(self) -> tuple[str, str]:
        name, _, variant = self.source.partition(":")
        return name, variant or "full"

    @property
    def atc_precision_mode(self) -> str:
        """ATC's --precision_mode: the spec's, or for INT8 the mode of the float layers."""
        mode = self.precision["mode"]
        return INT8_FLOAT_MODE if mode == INT8_MODE else mode


@dataclasses.dataclass(frozen=True)
class BuildSpec:
    path: Path
    directory: Path
    name: str
    version: str
    target: dict[str, Any]  # board, soc, cann, cann_home
    source_date_epoch: int | None
    cache_dir: Path | None
    models: tuple[ModelSpec, ...]
    custom_ops: dict[str, Any]  # package (auto|always|never), vendor
    app: dict[str, Any] | None
    service: dict[str, Any]
    prefix: str
    python: dict[str, Any]  # version, platforms, wheels (a folder or "download"): target_wheels
    document: dict[str, Any]  # the validated document, for the bundle's record of its spec

    @property
    def soc(self) -> str:
        return self.target["soc"]

    @property
    def bundle_id(self) -> str:
        return f"{self.name}-{self.version}"

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)


def load_spec(path: str | os.PathLike[str]) -> BuildSpec:
    """Read and validate the spec at ``path``; ``SpecError`` lists every problem found."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"the build spec '{file}' does not exist",
                         hint="give the path of a SPEC.yaml (see examples/)",
                         reference=Ref.FILE_NOT_FOUND) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise InputError(f"cannot read the build spec '{file}': {reason}",
                         reference=Ref.CANNOT_READ) from exc
    located = _parse(text, str(file))
    problems = problems_in(located, file.resolve().parent)
    if problems:
        raise SpecError(str(file), problems)
    return _records(located, file)


def problems_in(located: Located, spec_dir: Path) -> list[SpecProblem]:
    """Every problem of the parsed spec: keys written twice, the schema, the other checks."""
    problems = [SpecProblem(again, path, f"key '{path[-1]}' is written twice (first at line "
                            f"{first.line}); YAML would keep only the last",
                            "delete one of the two")
                for path, first, again in located.duplicates]
    if not isinstance(located.data, Mapping):
        problems.append(SpecProblem(located.value_at(()), (), "the spec must be a mapping",
                                    "start from examples/tiny-camera.yaml"))
        return problems
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for error in validator.iter_errors(located.data):
        problems += from_schema_error(error, located)
    problems += spec_checks.check(located, spec_dir)
    unique = {(p.position, p.path, p.message): p for p in problems}
    return list(unique.values())


def _parse(text: str, file: str) -> Located:
    try:
        return load_located(text)
    except YamlSyntaxError as exc:
        raise SpecError(file, [SpecProblem(exc.position, (), f"not valid YAML: {exc.problem}",
                                           "check the indentation and quoting on this line")]
                        ) from None


def _records(located: Located, file: Path) -> BuildSpec:
    data = located.data
    directory = file.resolve().parent
    bundle = data["bundle"]
    target = {"board": DEFAULT_BOARD, "cann": None, "cann_home": DEFAULT_CANN_HOME,
              **data["target"]}
    name = bundle["name"]
    service = {"name": f"edgefuse-{name}", "user": DEFAULT_SERVICE_USER, "group": None,
               "uid": DEFAULT_SERVICE_ID, "gid": DEFAULT_SERVICE_ID,
               "supplementary_groups": ["video"], "restart": "always", "restart_sec": 5,
               "environment": {}, **data.get("service", {})}
    service["group"] = service["group"] or service["user"]
    cache = data.get("cache", {}).get("dir")
    return BuildSpec(
        path=file,
        directory=directory,
        name=name,
        version=str(bundle.get("version", "0")),
        target=target,
        source_date_epoch=data.get("reproducibility", {}).get("source_date_epoch"),
        cache_dir=directory / cache if cache else None,
        models=tuple(_model(m, directory, target["soc"],
                            _int8(m, ("models", index), located, file))
                     for index, m in enumerate(data["models"])),
        custom_ops={"package": "auto", "vendor": "edgefuse", **data.get("custom_ops", {})},
        app=_app(data.get("app")),
        service=service,
        prefix=data.get("install", {}).get("prefix", f"/opt/edgefuse/{name}"),
        python=target_python(data["python"], target, directory),
        document=data,
    )


def _model(data: dict[str, Any], directory: Path, soc: str,
           int8: Int8Spec | None) -> ModelSpec:
    kind = spec_checks.source_kind(data["source"], directory)
    if "input" in data:
        inputs: dict[str | None, tuple[int, ...]] | None = {None: tuple(data["input"])}
    elif "inputs" in data:
        inputs = {name: tuple(shape) for name, shape in data["inputs"].items()}
    else:
        inputs = None
    optimize = {"target": "cpu", "only": None, "skip": None, "yolo_head": None,
                **data.get("optimize", {})}
    if optimize["target"] == "soc":
        optimize["target"] = soc
    precision = {"mode": "force_fp16", "keep_fp32": "auto", "keep_io_types": False,
                 **data.get("precision", {})}
    verify = {**DEFAULT_VERIFY, **data.get("verify", {})}
    classes = data.get("classes")
    if isinstance(classes, str):
        lines = (directory / classes).read_text(encoding="utf-8").splitlines()
        classes = [line.strip() for line in lines if line.strip()]
    app = {key: data[key] for key in ("task", "preprocess", "postprocess") if key in data}
    if classes is not None:
        app["classes"] = list(classes)
    return ModelSpec(
        name=data["name"],
        directory=directory,
        source=data["source"],
        source_kind=kind,
        source_file=directory / data["source"] if kind == "file" else None,
        sha256=data.get("sha256"),
        inputs=inputs,
        opset=data.get("opset"),
        optimize=optimize,
        precision=precision,
        verify=verify,
        calibration=directory / verify["calibration"] if verify["calibration"] else None,
        aipp=data.get("aipp"),
        custom_ops=data.get("custom_ops", True),
        app=app,
        int8=int8,
    )


def _int8(data: dict[str, Any], path: Path_, located: Located, file: Path) -> Int8Spec | None:
    """The INT8 record of a model whose precision mode is int8 (``spec_checks`` made sure it
    has a calibration source: its own, else verify.calibration)."""
    precision = data.get("precision", {})
    if precision.get("mode") != INT8_MODE:
        return None
    verify = {**DEFAULT_VERIFY, **data.get("verify", {})}
    key = ("precision", "calibration") if "calibration" in precision else (
        "verify", "calibration")
    text = precision.get("calibration", verify["calibration"])
    keep_at = ("precision", "keep_fp16") if "keep_fp16" in precision else ("precision", "mode")
    keep = precision.get("keep_fp16")
    return Int8Spec(
        calibration=file.resolve().parent / text,
        calibration_text=text,
        keep_fp16=None if keep is None else tuple(
            item.strip() for item in (keep.split(",") if isinstance(keep, str) else keep)),
        min_cosine=verify["int8_min_cosine"],
        max_drop=verify["int8_max_drop"],
        budget_s=precision.get("keep_fp16_budget_s", DEFAULT_KEEP_FP16_BUDGET_S),
        spec_file=str(file),
        calibration_at=(located.value_at((*path, *key)), (*path, *key)),
        keep_fp16_at=(located.value_at((*path, *keep_at)), (*path, *keep_at)),
    )


def _app(data: dict[str, Any] | None) -> dict[str, Any] | None:
    if data is None:
        return None
    return {"source": None, "sinks": {}, "backend": ["acl", "cpu"], "config": {}, **data}
