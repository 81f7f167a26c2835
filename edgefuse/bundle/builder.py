"""``build``: a spec in, OUT_DIR with the bundle, its archive and the build log out.

OUT_DIR::

    <name>-<version>/            the bundle (``bundle``)
    <name>-<version>.tar.gz      the same tree, byte-reproducible (``reproducible``)
    <name>-<version>.tar.gz.sha256
    install.sh                   a copy, to check and install the archive on the board
    install.sh.sig               with ``sign_key``: its Ed25519 signature, which the board's
                                 edgefuse-verify-installer checks before a first install runs it
    k8s/                         with ``emit=("k8s",)``: Containerfile, daemonset.yaml (``kube``)
    build-log.json               per model and stage: cached or built, seconds (not in the bundle)

Order: validate the spec (nothing starts on a bad one) -> check OUT_DIR -> the edgefuse wheel
and the target's wheels (it and its dependencies for the board's Python, ``target_wheels``;
cached; a shard run skips them) -> build each model (in ``jobs`` worker processes; ``shard`` K/N
builds only models i with i % N == K - 1, into the cache, and assembles nothing) -> the op
package (cached) -> assemble into a temporary sibling of OUT_DIR -> start the app as its service
would (``app_trial``: a failure stops the build here, before signing) -> sign -> archive ->
rename into place. A failure anywhere removes the temporary folder; cache entries are complete
or absent (``cache``), so an interrupted build leaves neither a half-written bundle nor a
poisoned cache.
Models that built before another failed keep their cache entries: the next run starts from there.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import shutil
import time
from pathlib import Path
from typing import Any

from edgefuse._files import (
    check_outputs_spare_inputs,
    publish_directory,
    temporary_directory_in,
    write_text,
)
from edgefuse.acl.atc.runner import cann_version
from edgefuse.acl.ops.build import build_op_package
from edgefuse.bundle.app_requirements import bundle_extras
from edgefuse.bundle.app_trial import try_app
from edgefuse.bundle.assemble import assemble
from edgefuse.bundle.cache import Cache, Entry, NotCached
from edgefuse.bundle.digests import (
    PACKAGE_DIR,
    key_of,
    library_version,
    tool_versions,
    tree_sha256,
)
from edgefuse.bundle.kube import write_k8s
from edgefuse.bundle.progress import ProgressPrinter, QueueDrain
from edgefuse.bundle.reproducible import DEFAULT_EPOCH, write_tar_gz
from edgefuse.bundle.signing import load_private_key, sign_bundle, sign_installer
from edgefuse.bundle.spec import BuildSpec, ModelSpec, load_spec
from edgefuse.bundle.stages import (
    ModelBuild,
    atc_identity,
    build_model,
    int8_summary,
    model_stages,
)
from edgefuse.bundle.target_wheels import DOWNLOAD, fetch_wheels, requirement
from edgefuse.bundle.wheel import build_wheel
from edgefuse.errors import EdgefuseError, InputError, Ref
from edgefuse.manifest import file_sha256

LOG_FILE = "build-log.json"
EMITS = ("k8s",)


@dataclasses.dataclass(frozen=True)
class BuildOutcome:
    spec: BuildSpec
    output_dir: Path | None  # None for a shard run
    bundle_dir: Path | None
    archive: Path | None
    archive_sha256: str | None
    models: dict[str, dict[str, dict[str, Any]]]  # model -> stage -> {cached, seconds}
    seconds: float

    @property
    def rebuilt(self) -> list[str]:
        """The models of which at least one stage was built rather than found in the cache."""
        return [name for name, stages in self.models.items()
                if any(not stage["cached"] for stage in stages.values())]


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    head, _, tail = text.partition("/")
    if not (head.isdigit() and tail.isdigit()) or not 1 <= int(head) <= int(tail):
        raise InputError(f"--shard {text!r} is not K/N with 1 <= K <= N",
                         hint="e.g. --shard 1/3 in the first of three CI jobs",
                         reference=Ref.BAD_SHARD)
    return int(head), int(tail)


# The latest SOURCE_DATE_EPOCH, as the spec's schema (reproducibility.source_date_epoch) has it.
LATEST_EPOCH = 4102444800  # 2100-01-01T00:00:00Z


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgefuse" / "build"


def source_date_epoch(spec: BuildSpec) -> int:
    """SOURCE_DATE_EPOCH from the environment, else the spec's, else 1980-01-01.

    Checked against the range the spec's schema allows (zip entries start in 1980, gzip's header
    holds 32 bits) before anything is built: a value in milliseconds used to fail in the gzip
    header once every model was built.
    """
    text = os.environ.get("SOURCE_DATE_EPOCH")
    if text is None or text == "":
        return spec.source_date_epoch if spec.source_date_epoch is not None else DEFAULT_EPOCH
    hint = "e.g. SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)"
    if not text.isdigit():
        raise InputError(f"SOURCE_DATE_EPOCH={text!r} is not a number of seconds", hint=hint,
                         reference=Ref.BAD_SOURCE_DATE_EPOCH)
    epoch = int(text)
    if not DEFAULT_EPOCH <= epoch <= LATEST_EPOCH:
        raise InputError(
            f"SOURCE_DATE_EPOCH={text} is outside {DEFAULT_EPOCH}..{LATEST_EPOCH} "
            "(1980-01-01..2100-01-01 in seconds)",
            hint=f"{hint}; a value in milliseconds is 1000 times too large",
            reference=Ref.BAD_SOURCE_DATE_EPOCH)
    return epoch


def build(spec_path: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None, *,
          jobs: int = 1, use_cache: bool = True, cache_dir: str | os.PathLike[str] | None = None,
          shard: str | None = None, force: bool = False, progress: bool = True,
          sign_key: str | os.PathLike[str] | None = None,
          build_number: int | None = None, emit: tuple[str, ...] = ()) -> BuildOutcome:
    """Build the bundle the spec at ``spec_path`` describes (see the module docstring).

    ``sign_key``: an Ed25519 private key (``edgefuse keys new``) that signs MANIFEST.json.
    ``build_number``: the bundle's monotonic build number (default: the source date epoch).
    ``emit``: further deployments to write beside the archive: ``"k8s"`` (``kube``)."""
    start = time.perf_counter()
    spec = load_spec(spec_path)
    slice_ = parse_shard(shard)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise InputError(f"--jobs must be a whole number >= 1, got {jobs!r}",
                         reference=Ref.BAD_ARGUMENT)
    out = Path(output_dir) if output_dir is not None else None
    if out is not None and out.name in ("", ".."):  # "-o ." names the folder by its path
        out = out.resolve()
    cache_root = Path(cache_dir) if cache_dir else spec.cache_dir or default_cache_dir()
    if slice_ is None:
        if out is None:
            raise InputError("give -o OUT_DIR (only a --shard run assembles nothing)",
                             reference=Ref.BAD_USAGE)
        check_outputs_spare_inputs({"output folder": out},
                                   {**spec_inputs(spec), "cache folder": cache_root})
        _check_output_dir(out, force)
    epoch = source_date_epoch(spec)  # before any model is built: a bad value fails now
    if build_number is None:
        build_number = epoch
    if isinstance(build_number, bool) or not isinstance(build_number, int) or build_number < 0:
        raise InputError(f"--build-number must be a whole number >= 0, got {build_number!r}",
                         reference=Ref.BAD_ARGUMENT)
    if sign_key is not None:
        load_private_key(Path(sign_key))  # a bad key stops the build before any work
    unknown = sorted(set(emit) - set(EMITS))
    if unknown:
        raise InputError(f"--emit {', '.join(unknown)}: not one of {', '.join(EMITS)}",
                         reference=Ref.BAD_ARGUMENT)
    if emit and sign_key is None:
        raise InputError("--emit k8s needs --sign KEY: the image installs only an installer "
                         "whose signature (install.sh.sig) checks against the publisher's keys",
                         hint="make a key pair with `edgefuse keys new release -o keys/`",
                         reference=Ref.BAD_ARGUMENT)
    if emit and spec.app is None:
        raise InputError("--emit k8s needs an app: the spec has no 'app' section to run",
                         hint="add an app (see examples/tiny-camera.yaml)",
                         reference=Ref.BAD_ARGUMENT)
    cache = Cache(cache_root, read=use_cache)
    wheels = None
    if slice_ is None:  # a wheelhouse that lacks the board's wheels fails before any model
        wheel, _ = cache.fetch("wheel", wheel_key(PACKAGE_DIR.parent / "pyproject.toml"),
                               lambda scratch: {"wheel": build_wheel(scratch, DEFAULT_EPOCH).name})
        wheels = _target_wheels(spec, wheel, cache)
    models = list(spec.models)
    if slice_ is not None:
        index, count = slice_
        models = [m for i, m in enumerate(models) if i % count == index - 1]
    printer = ProgressPrinter({m.name: len(model_stages(m)) for m in models}, enabled=progress)
    builds = _build_models(models, spec.soc, cache, jobs, printer)
    for built in builds:
        summary = int8_summary(built)
        if summary is not None:
            printer.line(summary)
    log = {b.name: {stage: {"cached": b.cached[stage], "seconds": round(b.seconds[stage], 3)}
                    for stage in b.entries} for b in builds}
    if slice_ is not None:
        return BuildOutcome(spec, None, None, None, None, log, time.perf_counter() - start)
    opp = _op_package(spec, builds, cache)
    staging = temporary_directory_in(out.parent, f".{out.name}.partial-")
    try:
        publish_directory(staging)
        bundle = staging / spec.bundle_id
        bundle.mkdir()
        assemble(bundle, spec, builds, wheels, opp, atc_identity(), epoch, build_number)
        trial = try_app(bundle, spec, say=printer.line)  # before it is signed or archived
        if sign_key is not None:
            sign_bundle(bundle, Path(sign_key))
        archive = staging / f"{spec.bundle_id}.tar.gz"
        write_tar_gz(archive, bundle, spec.bundle_id, epoch)
        digest = file_sha256(archive)
        (staging / f"{archive.name}.sha256").write_text(f"{digest}  {archive.name}\n",
                                                        encoding="utf-8")
        shutil.copyfile(bundle / "install.sh", staging / "install.sh")
        (staging / "install.sh").chmod(0o755)
        if sign_key is not None:  # a first install checks it before it runs (install.sh.sig)
            sign_installer(staging / "install.sh", Path(sign_key))
        if "k8s" in emit:
            write_k8s(staging / "k8s", spec, archive.name,
                      spec.custom_ops["vendor"] if opp is not None else None)
        seconds = time.perf_counter() - start
        write_text(staging / LOG_FILE, json.dumps(
            {"spec": str(spec.path), "archive": archive.name, "archive_sha256": digest,
             "seconds": round(seconds, 3), "models": log,
             "app": trial.record() if trial else None}, indent=2) + "\n")
        _move_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    printer.line(f"wrote {out / archive.name} (sha256 {digest})")
    return BuildOutcome(spec, out, out / spec.bundle_id, out / archive.name, digest, log,
                        seconds)


def spec_inputs(spec: BuildSpec) -> dict[str, Any]:
    """Every file or folder the build reads, by role: none may lie in (or be) the output."""
    models = spec.models
    classes = [spec.directory / m["classes"] for m in spec.document.get("models", [])
               if isinstance(m.get("classes"), str)]
    return {"build spec": spec.path,
            "model source": [m.source_file for m in models if m.source_file is not None],
            "calibration inputs": [m.calibration for m in models if m.calibration is not None]
            + [m.int8.calibration for m in models if m.int8 is not None],
            "class-name file": classes,
            "wheelhouse": [] if spec.python["wheels"] == DOWNLOAD else [spec.python["wheels"]]}


def _check_output_dir(out: Path, force: bool) -> None:
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"the parent of '{out}' does not exist",
                         hint=f"create it first: mkdir -p {parent}", reference=Ref.BAD_OUTPUT_PATH)
    if out.exists() and not out.is_dir():
        raise InputError(f"'{out}' is a file, not an output folder",
                         hint="choose another -o", reference=Ref.BAD_OUTPUT_PATH)
    here = Path.cwd()
    if out.exists() and (out.resolve() == here or out.resolve() in here.parents):
        # The new bundle folder replaces OUT_DIR whole: not the folder a shell is working in.
        raise InputError(f"the build would replace '{out}', which holds the current folder",
                         hint="choose a new or empty -o folder, outside the one you work in",
                         reference=Ref.OUTPUT_IS_INPUT)
    if out.exists() and not force and any(out.iterdir()):
        raise InputError(f"'{out}' exists and is not empty",
                         hint="choose another -o, or pass --force to replace it (atomically)",
                         reference=Ref.BAD_OUTPUT_PATH)


def _move_into_place(staging: Path, out: Path) -> None:
    if out.exists():
        retired = temporary_directory_in(out.parent, f".{out.name}.old-")
        os.replace(out, retired / "old")
        os.replace(staging, out)
        shutil.rmtree(retired, ignore_errors=True)
        return
    os.replace(staging, out)


# ---- the models, in this process or in a pool -------------------------------------------------


def _model_job(model: ModelSpec, soc: str, cache_root: str, read: bool, events: Any,
               threads: int) -> tuple[str, Any]:
    """One model in a worker: ("ok", ModelBuild) or ("error", EdgefuseError parts)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(threads))
    try:
        result = build_model(model, soc, Cache(cache_root, read=read),
                             lambda *event: events.put(event))
    except EdgefuseError as exc:
        return "error", (model.name, exc.render(), exc.exit_code)
    return "ok", result


def _build_models(models: list[ModelSpec], soc: str, cache: Cache, jobs: int,
                  printer: ProgressPrinter) -> list[ModelBuild]:
    failures: list[tuple[str, str, int]] = []
    builds: dict[str, ModelBuild] = {}
    names = [model.name for model in models]
    if jobs > 1:  # workers only for the models with something to build
        pending = []
        for model in models:
            try:
                found = _from_cache(model, soc, cache, printer)
            except EdgefuseError as exc:
                failures.append((model.name, exc.render(), exc.exit_code))
                continue
            if found is None:
                pending.append(model)
            else:
                builds[model.name] = found
        models = pending
    if jobs == 1 or len(models) <= 1:
        for model in models:
            try:
                builds[model.name] = build_model(model, soc, cache, printer)
            except EdgefuseError as exc:
                failures.append((model.name, exc.render(), exc.exit_code))
    else:
        context = multiprocessing.get_context("spawn")  # torch and ORT thread pools: no fork
        threads = max(1, (os.cpu_count() or 1) // jobs)
        with context.Manager() as manager:
            events = manager.Queue()
            with QueueDrain(events, printer), concurrent.futures.ProcessPoolExecutor(
                    max_workers=min(jobs, len(models)), mp_context=context) as pool:
                futures = {pool.submit(_model_job, model, soc, str(cache.root), cache.read,
                                       events, threads): model for model in models}
                for future in concurrent.futures.as_completed(futures):
                    status, value = future.result()
                    if status == "ok":
                        builds[value.name] = value
                    else:
                        failures.append(value)
    if failures:
        raise _failed(failures)
    return [builds[name] for name in names]


def _from_cache(model: ModelSpec, soc: str, cache: Cache,
                printer: ProgressPrinter) -> ModelBuild | None:
    """``model`` assembled from the cache alone, or None when a stage must be built."""
    events: list[tuple[str, str, str, float]] = []
    try:
        found = build_model(model, soc, cache.cached_only(), lambda *event: events.append(event))
    except NotCached:
        return None
    for event in events:
        printer(*event)
    return found


def _failed(failures: list[tuple[str, str, int]]) -> EdgefuseError:
    names = ", ".join(name for name, _, _ in failures)
    error = EdgefuseError(
        f"{len(failures)} model(s) failed to build: {names}",
        context="\n".join(text for _, text, _ in failures),
        hint="models that built are cached: fix the spec and run the same command again",
        reference=Ref.MODEL_BUILD_FAILED)
    error.exit_code = max(code for _, _, code in failures)
    return error


def _op_package(spec: BuildSpec, builds: list[ModelBuild], cache: Cache) -> Entry | None:
    """The custom-op package project, when a model needs it or the spec asks for it."""
    needed = sorted({op for b in builds for op in b.entries["compile"].info["custom_ops"]})
    policy = spec.custom_ops["package"]
    if policy == "never" or (policy == "auto" and not needed):
        return None
    vendor = spec.custom_ops["vendor"]

    def produce(scratch: Path) -> dict[str, Any]:
        package = build_op_package(spec.soc, scratch / "project", None, vendor=vendor)
        for path in sorted((scratch / "project").iterdir()):
            os.replace(path, scratch / path.name)
        (scratch / "project").rmdir()
        return {"ops": list(package.ops), "built": package.built}

    entry, _ = cache.fetch("opp", opp_key(spec.soc, vendor, cann_version()), produce)
    return entry


def _target_wheels(spec: BuildSpec, app_wheel: Entry, cache: Cache) -> Entry:
    """edgefuse's wheel, with the extras its app needs (``app_requirements``), and every wheel
    they need on the board (``target_wheels``), cached: a download resolves once, later builds
    reuse the same files (``--no-cache`` resolves again)."""
    app = app_wheel.path(next(iter(app_wheel.files)))
    extras = bundle_extras(spec)

    def produce(scratch: Path) -> dict[str, Any]:
        wheels = fetch_wheels(spec.python, requirement(app, extras), scratch)
        return {"wheels": [path.name for path in wheels], "extras": extras}

    entry, _ = cache.fetch("wheels", wheels_key(spec.python, file_sha256(app), extras), produce)
    return entry


def wheels_key(python: dict[str, Any], app_wheel_sha256: str, extras: list[str]) -> str:
    """The resolution depends on the target, edgefuse's wheel (its requirements) and the extras
    taken, pip and, from a wheelhouse, every file in it."""
    source = python["wheels"]
    return key_of({"stage": "wheels", "version": python["version"],
                   "platforms": python["platforms"], "app": app_wheel_sha256, "extras": extras,
                   "pip": library_version("pip"),
                   "source": source if source == DOWNLOAD else tree_sha256(source)})


def wheel_key(pyproject: Path) -> str:
    """The wheel's metadata (name, version, dependencies) comes from the checkout's
    pyproject.toml: its digest is part of the key."""
    return key_of({"stage": "wheel", "tools": tool_versions(),
                   "pyproject": file_sha256(pyproject) if pyproject.is_file() else None})


def opp_key(soc: str, vendor: str, cann: str | None) -> str:
    """The op package project is generated for one CANN: its version is part of the key."""
    return key_of({"stage": "opp", "soc": soc, "vendor": vendor, "cann": cann,
                   "tools": tool_versions()})
