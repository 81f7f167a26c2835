"""``edgefuse ops build``: write the custom-op project for a soc, and build it where CANN is.

Why two halves: the project (kernels, op-info, prototypes, ONNX plugins, msopgen IR JSON, build
and install scripts) is plain text that edgefuse can write anywhere and tests can read; turning
it into ``custom_opp_<os>_<arch>.run`` needs the CANN toolkit (msopgen, the TBE headers, cmake).
Without CANN the project is written, the result says why it was not built and how to build it on
a CANN host, and that is a success; ``require_cann=True`` makes a missing toolkit an error.

The output directory is written atomically: everything goes to a temporary sibling that is
renamed into place only when complete, so a failure leaves no half-written project behind.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from edgefuse.acl.build.soc import Soc, validate_soc
from edgefuse.acl.ops import _render, _scripts
from edgefuse.acl.ops.registry import ALL_OPS
from edgefuse.acl.ops.spec import DOMAIN, OpSpec
from edgefuse.errors import InputError, Ref, ToolError

VENDOR = "edgefuse"
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

    @property
    def built(self) -> bool:
        return self.run_file is not None

    def summary(self) -> str:
        lines = [f"wrote {len(self.files)} files for {', '.join(self.ops)} to {self.directory}"]
        if self.built:
            lines += [
                f"built {self.run_file}",
                f"install: bash {self.directory / 'install.sh'} [DIR]  "
                f"(DIR: then source DIR/{self.vendor}/bin/set_env.bash for "
                "ASCEND_CUSTOM_OPP_PATH; none: ${ASCEND_OPP_PATH}/vendors/" + self.vendor + ")",
            ]
        else:
            lines += [
                "not built: the CANN toolkit is not available here:",
                *(f"  - {reason}" for reason in self.not_built),
                f"to build on a CANN host: copy {self.directory}, source <CANN>/set_env.sh, "
                "run `bash build.sh` there, then `bash install.sh [DIR]`",
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


def project_files(specs: Sequence[OpSpec], soc: Soc, vendor: str = VENDOR) -> dict[str, str]:
    """Relative path -> text of every file of the project (pure; the tests read this)."""
    files: dict[str, str] = {}
    for spec in specs:
        kernel = spec.kernel_name
        files[f"tbe/impl/{kernel}.py"] = spec.kernel_source()
        files[f"tbe/op_info_cfg/ai_core/{soc.short_name}/{kernel}.ini"] = _render.render_ini(spec)
        files[f"op_proto/{kernel}.h"] = _render.render_proto_header(spec)
        files[f"op_proto/{kernel}.cc"] = _render.render_proto_source(spec)
        files[f"framework/onnx_plugin/{kernel}_plugin.cc"] = _render.render_onnx_plugin(spec)
    files["edgefuse_ops.json"] = _render.render_msopgen_json(specs)
    values = {
        "SOC": soc.name,
        "SOC_SHORT": soc.short_name,
        "VENDOR": vendor,
        "OPS": " ".join(spec.ascend_type for spec in specs),
        "KERNELS": " ".join(spec.kernel_name for spec in specs),
        "OP_LIST": ", ".join(f"{DOMAIN}::{spec.name} -> {spec.ascend_type}" for spec in specs),
    }
    files["build.sh"] = _scripts.fill(_scripts.BUILD_SH, values)
    files["install.sh"] = _scripts.fill(_scripts.INSTALL_SH, values)
    files["README.md"] = _scripts.fill(_scripts.README, values)
    return files


def build_op_package(
    soc: str,
    output_dir: str | os.PathLike[str],
    ops: Sequence[OpSpec] = ALL_OPS,
    *,
    vendor: str = VENDOR,
    require_cann: bool = False,
    env: Mapping[str, str] | None = None,
) -> OpPackage:
    """Write the op project for ``soc`` to ``output_dir``; build the ``.run`` if CANN is here."""
    soc_info = validate_soc(soc)
    toolkit, missing = find_cann(env)
    if toolkit is None and require_cann:
        raise ToolError(
            "the CANN toolkit needed to build the custom-op package is not available",
            context="\n".join(missing),
            hint="source <CANN>/set_env.sh on a CANN host, or drop --require-cann to only "
            "write the project",
            reference=Ref.CANN_NOT_FOUND,
        )
    target = _check_target(Path(output_dir))
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        files = project_files(ops, soc_info, vendor)
        for relative, text in files.items():
            path = scratch / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        for script in ("build.sh", "install.sh"):
            (scratch / script).chmod(0o755)
        run_name = _build(scratch, toolkit, env) if toolkit is not None else None
        written = (*files, "manifest.json")
        manifest = _manifest(ops, soc_info, vendor, written, run_name, missing)
        (scratch / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
        _replace_dir(scratch, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return OpPackage(
        soc=soc_info.name,
        soc_short=soc_info.short_name,
        vendor=vendor,
        directory=target,
        ops=tuple(spec.name for spec in ops),
        files=tuple(written),
        run_file=target / run_name if run_name else None,
        not_built=tuple(missing),
    )


def _check_target(target: Path) -> Path:
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
    return target.absolute()


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


def _manifest(ops, soc: Soc, vendor: str, files, run_name, missing) -> dict:
    return {
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
        "files": sorted(files),
        "built": run_name is not None,
        "run_file": run_name,
        "not_built": list(missing),
        "install": {
            "vendors": f"${{ASCEND_OPP_PATH}}/vendors/{vendor} (bash install.sh)",
            "custom_path": f"bash install.sh DIR; source DIR/{vendor}/bin/set_env.bash "
            "(sets ASCEND_CUSTOM_OPP_PATH)",
        },
    }


def _replace_dir(new: Path, target: Path) -> None:
    """Move ``new`` to ``target``; an existing ``target`` is replaced only after that works."""
    if not target.exists():
        os.replace(new, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    os.replace(target, old / target.name)
    try:
        os.replace(new, target)
    except OSError:
        os.replace(old / target.name, target)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)
