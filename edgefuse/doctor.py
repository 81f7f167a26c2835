"""What this machine has for running models, and what each backend still needs.

Why: "it runs on my laptop but not on the board" is almost always an environment difference: a
CPU-only onnxruntime wheel shadowing onnxruntime-gpu, CANN's set_env.sh not sourced, an OM built
for another soc. ``diagnose()`` gathers the facts ``open_session`` decides on (the same
``probe()``), plus the versions a bug report needs, without importing heavy packages: torch is
looked up, not imported.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import platform
import shutil
import subprocess
import sys

from edgefuse._version import __version__
from edgefuse.acl.atc.runner import cann_version, find_atc
from edgefuse.acl.compile.soc import detect_soc
from edgefuse.acl.ops.toolkit import CANN_RANGE, cann_in_range
from edgefuse.errors import EdgefuseError
from edgefuse.fallback.sim_target import NOT_SIMULATED
from edgefuse.runtime import BACKENDS, probe
from edgefuse.session import Availability

NEEDS: dict[str, str] = {
    "acl": "pyACL from CANN (source set_env.sh), an Ascend NPU visible to `npu-smi info`, and a "
           "BUILD_DIR compiled for this soc (`edgefuse compile --soc ...`)",
    "tensorrt": "onnxruntime-gpu built with TensorRT, the TensorRT libraries, an NVIDIA GPU",
    "cuda": "onnxruntime-gpu (pip install 'edgefuse[gpu]'; uninstall the CPU-only onnxruntime "
            "wheel), an NVIDIA driver, and the CUDA/cuDNN libraries that onnxruntime-gpu wants",
    "cpu": "onnxruntime (installed with edgefuse)",
    "sim": "onnxruntime (installed with edgefuse) and a BUILD_DIR from `edgefuse compile`: it "
           "runs the build under the board's contract (opt-in: --backend sim)",
}


@dataclasses.dataclass(frozen=True)
class Fact:
    name: str
    value: str
    ok: bool = True


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    facts: tuple[Fact, ...]
    backends: dict[str, Availability]

    def render(self) -> str:
        width = max(len(f.name) for f in self.facts)
        lines = ["environment:"]
        lines += [f"  {f.name:<{width}}  {f.value}" for f in self.facts]
        lines.append("backends (open_session's default order: acl, cuda, cpu; tensorrt and sim "
                     "only when asked for):")
        for name, found in self.backends.items():
            mark = "ok " if found.ok else "-- "
            lines.append(f"  {mark}{name:<9} {found.reason}")
            if not found.ok:
                lines.append(f"  {'':12} needs: {NEEDS[name]}")
        lines.append("the sim backend does not simulate (docs/sim.md):")
        lines += [f"  - {item}" for item in NOT_SIMULATED]
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {
            "facts": {f.name: f.value for f in self.facts},
            "backends": {n: dataclasses.asdict(a) for n, a in self.backends.items()},
            "sim_does_not_simulate": list(NOT_SIMULATED),
        }


def diagnose() -> Diagnosis:
    """Versions, providers, GPU, CANN and NPU facts, and each backend's availability."""
    facts = [
        Fact("edgefuse", __version__),
        Fact("python", f"{sys.version.split()[0]} ({platform.machine()}, {platform.system()})"),
        *(_package(name) for name in ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu",
                                      "torch", "opencv-python-headless")),
        _ort_providers(),
        _nvidia_smi(),
        *_cann(),
    ]
    return Diagnosis(tuple(facts), {name: probe(name) for name in BACKENDS})


def _package(distribution: str) -> Fact:
    try:
        return Fact(distribution, importlib.metadata.version(distribution))
    except importlib.metadata.PackageNotFoundError:
        return Fact(distribution, "not installed", ok=False)


def _ort_providers() -> Fact:
    if importlib.util.find_spec("onnxruntime") is None:
        return Fact("ort providers", "onnxruntime is not importable", ok=False)
    import onnxruntime  # noqa: PLC0415 - looked up first: doctor must work where it is broken

    return Fact("ort providers", ", ".join(onnxruntime.get_available_providers()))


def _nvidia_smi() -> Fact:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return Fact("nvidia gpu", "no nvidia-smi on PATH", ok=False)
    done = subprocess.run(
        [executable, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    if done.returncode != 0:
        return Fact("nvidia gpu", f"nvidia-smi failed: {(done.stderr or done.stdout).strip()}",
                    ok=False)
    return Fact("nvidia gpu", "; ".join(line.strip() for line in done.stdout.splitlines()))


def _op_packages(version: str | None) -> Fact:
    """Whether this toolkit can build edgefuse's op packages (TBE projects, see ops/toolkit)."""
    fits = cann_in_range(version)
    if fits is None:
        return Fact("op packages", f"target {CANN_RANGE}; no CANN version to compare", ok=False)
    if fits:
        return Fact("op packages", f"target {CANN_RANGE}; CANN {version} builds them")
    return Fact("op packages", f"target {CANN_RANGE}; CANN {version} is outside it: `edgefuse ops "
                "build` refuses it, compile with --no-custom-ops", ok=False)


def _cann() -> list[Fact]:
    version = cann_version()
    atc = find_atc()
    facts = [
        Fact("cann", version or "not found (ASCEND_HOME_PATH unset: source set_env.sh)",
             ok=version is not None),
        _op_packages(version),
        Fact("atc", atc or "not on PATH", ok=atc is not None),
        Fact("pyacl", "importable" if importlib.util.find_spec("acl") else "not importable",
             ok=importlib.util.find_spec("acl") is not None),
    ]
    try:
        soc = detect_soc()
        facts.append(Fact("npu soc", soc or "no npu-smi on PATH", ok=soc is not None))
    except EdgefuseError as exc:
        facts.append(Fact("npu soc", exc.message, ok=False))
    return facts
