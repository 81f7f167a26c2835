"""``edgefuse ops build``: write the custom-op project for a soc, and build it where CANN is.

Why two halves: the project (kernels, op-info, prototypes, ONNX plugins, msopgen IR JSON, build
and install scripts) is plain text that edgefuse can write anywhere and tests can read; turning
it into ``custom_opp_<os>_<arch>.run`` needs the CANN toolkit (msopgen, the TBE headers, cmake).
Without CANN the project is written, the result says why it was not built and how to build it on
a CANN host, and that is a success; ``require_cann=True`` makes a missing toolkit an error.

The output directory is written atomically: everything goes to a temporary sibling that is
renamed into place only when complete, so a failure leaves no half-written project behind. An
existing output directory is refused unless ``overwrite`` (``--force``), and even then only a
project this command wrote (its ``manifest.json`` says so) or an empty directory is replaced:
``ops build`` never deletes a directory it did not write.

What goes into the project is checked first: the vendor name (``toolkit.validate_vendor``; every
value written into a shell script is quoted as well), the ops against the soc (an op whose kernel
needs instructions the chip lacks is left out, or refused when asked for by name), and the
toolkit's CANN version against the range the packages target (``toolkit.CANN_RANGE``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from edgefuse._files import temporary_directory_in
from edgefuse.acl.atc.runner import cann_version
from edgefuse.acl.compile.soc import Soc, validate_soc
from edgefuse.acl.ops import _render, _scripts
from edgefuse.acl.ops.registry import ALL_OPS
from edgefuse.acl.ops.spec import DOMAIN, OpSpec
from edgefuse.acl.ops.toolkit import (
    CANN_BELOW,
    CANN_MIN,
    CANN_RANGE,
    check_cann_version,
    validate_vendor,
)
from edgefuse.errors import InputError, Ref, ToolError

VENDOR = "edgefuse"
PROJECT_FORMAT = "edgefuse-op-project/1"  # manifest.json's "format": the projects we may replace
BUILD_TIMEOUT_S = 1800
LOG_TAIL_LINES = 40


@dataclasses.dataclass(frozen=True)
class CannToolkit:
    home: Path
    msopgen: Path
    cmake: Path


@dataclasses.dataclass(frozen=True)
class OpPackage:
    """What ``build_op_package`` wrote, and whether it built the installable package."""

    soc: str
    soc_short: str
    vendor: str
    directory: Path
    ops: tuple[str, ...]
    files: tuple[str, ...]  # paths relative to ``directory``
    run_file: Path | None  # custom_opp_<os>_<arch>.run, when built
    not_built: tuple[str, ...]  # why it was not built (empty when built)
    skipped: tuple[tuple[str, str], ...] = ()  # (op, why) left out for this soc
    cann_version: str | None = None  # of the toolkit that built it

    @property
    def built(self) -> bool:
        return self.run_file is not None

    def summary(self) -> str:
        lines = [f"wrote {len(self.files)} files for {', '.join(self.ops)} to {self.directory}"]
        lines += [f"left out {op}: {why}" for op, why in self.skipped]
        install = self.directory / "install.sh"
        if self.built:
            version = self.cann_version or "(version unknown)"
            lines.append(f"built {self.run_file} with CANN {version}")
        else:
            lines += [
                "not built: the CANN toolkit is not available here:",
                *(f"  - {reason}" for reason in self.not_built),
                f"to build on a CANN host ({CANN_RANGE}): copy {self.directory}, source "
                "<CANN>/set_env.sh and run `bash build.sh` there",
            ]
        lines += [
            f"install: bash {install}   -> ${{ASCEND_OPP_PATH}}/vendors/{self.vendor}, listed in "
            "vendors/config.ini, where ATC looks by default",
            f"     or: bash {install} DIR -> DIR/vendors/{self.vendor} (DIR/{self.vendor} before "
            "CANN 7.0); it prints the `source .../bin/set_env.bash` line to run in every shell "
            "that runs ATC or the model (it prepends the package to ASCEND_CUSTOM_OPP_PATH)",
        ]
        return "\n".join(lines)


def find_cann(env: Mapping[str, str] | None = None) -> tuple[CannToolkit | None, list[str]]:
    """The toolkit ``build.sh`` will use, or the reasons it cannot run here."""
    env = os.environ if env is None else env
    path = env.get("PATH", "")
    missing: list[str] = []
    home_text = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
    home = Path(home_text) if home_text else None
    if home is None:
        missing.append("ASCEND_HOME_PATH/ASCEND_TOOLKIT_HOME is unset (source <CANN>/set_env.sh)")
    elif not home.is_dir():
        missing.append(f"ASCEND_HOME_PATH={home} is not a directory")
    cmake = shutil.which("cmake", path=path)
    if cmake is None:
        missing.append("cmake is not on PATH")
    msopgen = shutil.which("msopgen", path=path)
    if msopgen is None and home is not None:
        bundled = home / "python" / "site-packages" / "bin" / "msopgen"
        msopgen = str(bundled) if bundled.is_file() else None
    if msopgen is None:
        missing.append("msopgen not found (on PATH or <toolkit>/python/site-packages/bin/msopgen)")
    if missing:
        return None, missing
    return CannToolkit(Path(home), Path(msopgen), Path(cmake)), []


def ops_for_soc(
    soc: Soc, ops: Sequence[OpSpec] | None = None
) -> tuple[tuple[OpSpec, ...], tuple[tuple[str, str], ...]]:
    """The ops to build for ``soc`` and the (op, why) left out.

    ``ops=None`` means every op whose kernel runs on the chip, the others left out with the
    reason; ops named explicitly must all run there, or this raises.
    """
    specs = ALL_OPS if ops is None else tuple(ops)
    refused = [spec for spec in specs if not spec.runs_on(soc.short_name)]
    if refused and ops is not None:
        raise InputError(
            f"{', '.join(spec.name for spec in refused)} cannot be built for {soc.name}: "
            + "; ".join(spec.unsupported_reason for spec in refused),
            hint="leave it out of --ops; a model that uses it still compiles for this soc with "
            "`edgefuse compile ... --no-custom-ops`, which decomposes it into standard ONNX ops",
            reference=Ref.OP_NOT_ON_SOC,
        )
    kept = tuple(spec for spec in specs if spec.runs_on(soc.short_name))
    return kept, tuple((spec.name, spec.unsupported_reason) for spec in refused)


def project_files(specs: Sequence[OpSpec], soc: Soc, vendor: str = VENDOR) -> dict[str, str]:
    """Relative path -> text of every file of the project (pure; the tests read this)."""
    validate_vendor(vendor)
    ops_for_soc(soc, specs)
    files: dict[str, str] = {}
    for spec in specs:
        kernel = spec.kernel_name
        files[f"tbe/impl/{kernel}.py"] = spec.kernel_source()
        files[f"tbe/op_info_cfg/ai_core/{soc.short_name}/{kernel}.ini"] = _render.render_ini(spec)
        files[f"op_proto/{kernel}.h"] = _render.render_proto_header(spec)
        files[f"op_proto/{kernel}.cc"] = _render.render_proto_source(spec)
        files[f"framework/onnx_plugin/{kernel}_plugin.cc"] = _render.render_onnx_plugin(spec)
    files["edgefuse_ops.json"] = _render.render_msopgen_json(specs)
    # Every value a shell script gets is quoted (the names are validated as well).
    shell = {
        "SOC_SHORT": shlex.quote(soc.short_name),
        "VENDOR": shlex.quote(vendor),
        "OPS": " ".join(shlex.quote(spec.ascend_type) for spec in specs),
        "KERNELS": " ".join(shlex.quote(spec.kernel_name) for spec in specs),
        "CANN_MIN": str(CANN_MIN[0] * 100 + CANN_MIN[1]),
        "CANN_BELOW": str(CANN_BELOW[0] * 100 + CANN_BELOW[1]),
        "CANN_RANGE": shlex.quote(CANN_RANGE),
    }
    text = {
        "SOC": soc.name,
        "SOC_SHORT": soc.short_name,
        "VENDOR": vendor,
        "OP_LIST": ", ".join(f"{DOMAIN}::{spec.name} -> {spec.ascend_type}" for spec in specs),
        "CANN_RANGE": CANN_RANGE,
    }
    files["build.sh"] = _scripts.fill(_scripts.BUILD_SH, shell)
    files["install.sh"] = _scripts.fill(_scripts.INSTALL_SH, shell)
    files["README.md"] = _scripts.fill(_scripts.README, text)
    return files


def build_op_package(
    soc: str,
    output_dir: str | os.PathLike[str],
    ops: Sequence[OpSpec] | None = None,
    *,
    vendor: str = VENDOR,
    require_cann: bool = False,
    overwrite: bool = False,
    env: Mapping[str, str] | None = None,
) -> OpPackage:
    """Write the op project for ``soc`` to ``output_dir``; build the ``.run`` if CANN is here.

    ``ops=None`` builds every op whose kernel runs on ``soc``; ``overwrite`` replaces a project
    this function wrote before (never another directory).
    """
    soc_info = validate_soc(soc)
    validate_vendor(vendor)
    specs, skipped = ops_for_soc(soc_info, ops)
    toolkit, missing = find_cann(env)
    if toolkit is None and require_cann:
        raise ToolError(
            "the CANN toolkit needed to build the custom-op package is not available",
            context="\n".join(missing),
            hint="source <CANN>/set_env.sh on a CANN host, or drop --require-cann to only "
            "write the project",
            reference=Ref.CANN_NOT_FOUND,
        )
    version = cann_version(os.environ if env is None else env) if toolkit is not None else None
    if toolkit is not None:
        check_cann_version(version, toolkit.home)
    target = _check_target(Path(output_dir), overwrite)
    scratch = temporary_directory_in(target.parent, f".{target.name}.")  # read-only: exit 2
    try:
        files = project_files(specs, soc_info, vendor)
        for relative, text in files.items():
            path = scratch / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        for script in ("build.sh", "install.sh"):
            (scratch / script).chmod(0o755)
        run_name = _build(scratch, toolkit, env) if toolkit is not None else None
        written = (*files, "manifest.json")
        manifest = _manifest(specs, soc_info, vendor, written, run_name, missing, skipped, version)
        (scratch / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
        _replace_dir(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return OpPackage(
        soc=soc_info.name,
        soc_short=soc_info.short_name,
        vendor=vendor,
        directory=target,
        ops=tuple(spec.name for spec in specs),
        files=tuple(written),
        run_file=target / run_name if run_name else None,
        not_built=tuple(missing),
        skipped=skipped,
        cann_version=version,
    )


def _check_target(target: Path, overwrite: bool) -> Path:
    if target.exists() and not target.is_dir():
        raise InputError(
            f"output path '{target}' exists and is not a directory",
            hint="give a directory, for example -o build/opp",
            reference=Ref.BAD_OUTPUT_PATH,
        )
    if not target.parent.is_dir():
        raise InputError(
            f"output directory '{target.parent}' does not exist",
            hint=f"create it first: mkdir -p {target.parent}",
            reference=Ref.BAD_OUTPUT_PATH,
        )
    if target.is_dir() and any(target.iterdir()):
        if not overwrite:
            raise InputError(
                f"'{target}' already exists",
                hint="choose another -o, or pass --force to replace an op project that "
                "`edgefuse ops build` wrote there before",
                reference=Ref.BAD_OUTPUT_PATH,
            )
        if not _written_by_us(target):
            raise InputError(
                f"'{target}' exists and is not an op project written by `edgefuse ops build` "
                "(no manifest.json saying so); --force replaces only those",
                hint="choose another -o, or move the directory away yourself",
                reference=Ref.BAD_OUTPUT_PATH,
            )
    return target.absolute()


def _written_by_us(directory: Path) -> bool:
    try:
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == PROJECT_FORMAT


def _build(project: Path, toolkit: CannToolkit, env: Mapping[str, str] | None) -> str:
    """Run the project's build.sh; the name of the .run it produced."""
    log_path = project / "build.log"
    run_env = dict(os.environ if env is None else env)
    run_env["PATH"] = os.pathsep.join(
        [str(toolkit.msopgen.parent), str(toolkit.cmake.parent), run_env.get("PATH", "")]
    )
    with log_path.open("w", encoding="utf-8") as log:
        try:
            done = subprocess.run(
                ["bash", "build.sh"], cwd=project, env=run_env, stdout=log,
                stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ToolError(
                f"building the custom-op package took over {BUILD_TIMEOUT_S} s",
                context=_tail(log_path),
                reference=Ref.OP_BUILD_FAILED,
            ) from exc
    runs = sorted(project.glob("custom_opp_*.run"))
    if done.returncode != 0 or not runs:
        raise ToolError(
            f"building the custom-op package failed (build.sh exit {done.returncode})",
            context=_tail(log_path),
            hint="the lines above are the end of build.log; nothing was written to the output "
            "directory",
            reference=Ref.OP_BUILD_FAILED,
        )
    return runs[-1].name


def _tail(log_path: Path) -> str:
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:]) or "(build.log is empty)"


def _manifest(ops, soc: Soc, vendor: str, files, run_name, missing, skipped, version) -> dict:
    return {
        "format": PROJECT_FORMAT,
        "soc": soc.name,
        "soc_short": soc.short_name,
        "vendor": vendor,
        "ops": [
            {
                "onnx": f"{DOMAIN}::{spec.name}",
                "ascend_type": spec.ascend_type,
                "kernel": spec.kernel_name,
                "origin_op_types": list(spec.origin_op_types()),
            }
            for spec in ops
        ],
        "skipped": [{"op": op, "why": why} for op, why in skipped],
        "cann": {"targets": CANN_RANGE, "min": ".".join(map(str, CANN_MIN)),
                 "below": ".".join(map(str, CANN_BELOW)), "built_with": version},
        "files": sorted(files),
        "built": run_name is not None,
        "run_file": run_name,
        "not_built": list(missing),
        "install": {
            "vendors": f"bash install.sh -> ${{ASCEND_OPP_PATH}}/vendors/{vendor}, listed in "
            "${ASCEND_OPP_PATH}/vendors/config.ini (load_priority), where ATC looks by default",
            "custom_path": f"bash install.sh DIR -> DIR/vendors/{vendor} (DIR/{vendor} before "
            f"CANN 7.0); then `source DIR/vendors/{vendor}/bin/set_env.bash` (the line "
            "install.sh prints), which prepends the package to ASCEND_CUSTOM_OPP_PATH",
        },
    }


def _replace_dir(new: Path, target: Path) -> None:
    """Move ``new`` to ``target``; an existing ``target`` (checked by ``_check_target``: empty, or
    a project written here) is replaced only after that works."""
    if not target.exists() or not any(target.iterdir()):
        os.replace(new, target)  # rename() replaces an empty directory
        return
    old = temporary_directory_in(target.parent, f".{target.name}.old.")
    os.replace(target, old / target.name)
    try:
        os.replace(new, target)
    except OSError:
        os.replace(old / target.name, target)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
