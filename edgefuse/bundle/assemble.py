"""Fill a bundle folder from the cache entries of a build (see ``bundle`` for the layout).

Why separate from the model stages: assembling only copies and writes small text files, so a
final ``edgefuse build`` over a cache that CI shards filled (``--shard K/N``) assembles in
seconds without importing PyTorch; and everything here is a pure function of the entries and the
spec, which is what makes the archive reproducible.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgefuse.acl.compile.int8 import COMPRESSION_FILE as INT8_CONFIG
from edgefuse.bundle import service
from edgefuse.bundle.archive import copy_file, write_bundle_manifest, write_file
from edgefuse.bundle.cache import Entry
from edgefuse.bundle.digests import tool_versions
from edgefuse.bundle.golden import GOLDEN_NPZ
from edgefuse.bundle.spec import BuildSpec, ModelSpec
from edgefuse.bundle.stages import BUILD_FOLDER, ModelBuild
from edgefuse.bundle.target_wheels import LOCK_FILE, WHEELS_DIR, lock_text, wheel_identity
from edgefuse.manifest import read_manifest
from edgefuse.reference.recording import FORMAT as RECORDING_FORMAT

INT8_REPORT_FILE = "reports/int8.json"  # keep_fp16 auto's report (quantize's int8_report.json)


def assemble(bundle: Path, spec: BuildSpec, builds: list[ModelBuild], wheels: Entry,
             opp: Entry | None, atc: str | None, epoch: int, build_number: int) -> str:
    """Write the bundle into the empty folder ``bundle``; returns MANIFEST.json's digest.

    ``wheels``: edgefuse's wheel and its dependencies for the board (``target_wheels``), copied
    to ``wheels/`` and pinned by ``requirements.lock``.

    ``build_number`` orders releases of one bundle name: install.sh refuses a lower one than
    the installed release (a downgrade) unless told to."""
    models = {}
    for build in builds:
        models[build.name] = _model(bundle, spec.model(build.name), build, spec)
    opp_vendor = spec.custom_ops["vendor"] if opp is not None else None
    if opp is not None:
        for name in sorted(opp.files):
            copy_file(opp.path(name), bundle, f"opp/{name}")
    app_record = None
    for name in sorted(wheels.files):
        copy_file(wheels.path(name), bundle, f"{WHEELS_DIR}/{name}")
    write_file(bundle, LOCK_FILE, lock_text([bundle / WHEELS_DIR / name
                                             for name in sorted(wheels.files)]))
    wheel_name = next(name for name in sorted(wheels.files)
                      if wheel_identity(name)[0] == "edgefuse")
    for relative, path in service.app_wrappers():
        copy_file(path, bundle, relative)
    if spec.app is not None:
        name = spec.service["name"]
        write_file(bundle, "app/config.yaml", service.app_config(spec))
        write_file(bundle, f"systemd/{name}.service", service.unit_file(spec))
        write_file(bundle, f"env/{name}.env", service.environment_file(spec, opp_vendor))
        app_record = {"kind": spec.app["kind"], "model": spec.app["model"],
                      "config": "app/config.yaml", "wheel": f"{WHEELS_DIR}/{wheel_name}"}
    values = service.script_values(spec, opp_vendor)
    write_file(bundle, "install.sh", service.render("install.sh", values), executable=True)
    write_file(bundle, "minirc_install_hook.sh",
               service.render("minirc_install_hook.sh", values), executable=True)
    write_file(bundle, service.VERIFIER, service.render(service.VERIFIER, {}), executable=True)
    write_file(bundle, "spec.json", json.dumps(spec.document, indent=2, sort_keys=True) + "\n")
    record = {
        "bundle": {"name": spec.name, "version": spec.version, "id": spec.bundle_id,
                   "build": build_number},
        "source_date_epoch": epoch,
        "target": spec.target,
        "tools": {**tool_versions(), "atc": atc},
        "models": models,
        "custom_ops": {"package": "opp/" if opp is not None else None,
                       "vendor": opp_vendor, "install": "install.sh builds it into each "
                       "release's .opp where the board has the CANN toolkit (else "
                       "install.sh --finish, later)" if opp else None},
        "app": app_record,
        "service": {"name": spec.service["name"], "unit": f"systemd/{spec.service['name']}"
                    ".service", "env": f"env/{spec.service['name']}.env",
                    "user": spec.service["user"], "restart": spec.service["restart"]}
        if spec.app is not None else None,
        "python": {"version": spec.python["version"], "platforms": spec.python["platforms"],
                   "board": spec.python["board"], "extras": wheels.info["extras"],
                   "lock": LOCK_FILE, "wheels": f"{WHEELS_DIR}/",
                   "packages": dict(sorted(wheel_identity(name) for name in wheels.files))},
        "install": {"prefix": spec.prefix, "script": "install.sh",
                    "card_maker_hook": "minirc_install_hook.sh",
                    "installer_verifier": service.VERIFIER},
    }
    return write_bundle_manifest(bundle, record)


def _model(bundle: Path, model: ModelSpec, build: ModelBuild, spec: BuildSpec) -> dict[str, Any]:
    folder = f"models/{model.name}"
    compiled = build.entries["compile"]
    for name in sorted(compiled.files):
        inner = name.removeprefix(f"{BUILD_FOLDER}/")
        if inner != name:
            copy_file(compiled.path(name), bundle, f"{folder}/{inner}")
    golden = build.entries["golden"]
    host_onnx = golden.info["host_onnx"]
    for name in (GOLDEN_NPZ, *([host_onnx] if host_onnx else [])):
        copy_file(golden.path(name), bundle, f"{folder}/{name}")
    copy_file(build.entries["optimize"].path("optimize.json"), bundle,
              f"{folder}/reports/optimize.json")
    copy_file(build.entries["fp16"].path("fp16.json"), bundle, f"{folder}/reports/fp16.json")
    manifest = read_manifest(compiled.path(BUILD_FOLDER))
    info = compiled.info
    compiled_as = "om" if info["om"] else "onnx+compile.sh"
    app = build.app or {}
    metadata = {
        "name": model.name,
        "task": app.get("task"),
        "classes": app.get("classes", []),
        "inputs": [entry.to_json() for entry in manifest.inputs],
        "outputs": [entry.to_json() for entry in manifest.outputs],
        "preprocess": app.get("preprocess"),
        "postprocess": app.get("postprocess", {}),
        "aipp": manifest.preprocess.to_json() if manifest.preprocess is not None else None,
        "soc": manifest.soc,
        "compiled": compiled_as,
        "golden": {"npz": GOLDEN_NPZ, "format": RECORDING_FORMAT,
                   "backend": build.entries["golden"].info["backend"],
                   "inputs": build.entries["golden"].info.get("inputs")},
        "gates": {k: model.verify[k] for k in ("optimize_min_cosine", "fp16_min_cosine",
                                               "max_rel_l2")},
    }
    int8 = build.entries.get("int8")
    automatic = int8.info["automatic"] if int8 is not None else None
    if int8 is not None:
        metadata["gates"]["int8_min_cosine"] = model.verify["int8_min_cosine"]
    if automatic is not None:  # the report of what each kept layer buys, beside fp16.json
        metadata["gates"]["int8_max_drop"] = model.verify["int8_max_drop"]
        copy_file(int8.path(automatic["report"]), bundle, f"{folder}/{INT8_REPORT_FILE}")
        automatic = {**automatic, "report": f"{folder}/{INT8_REPORT_FILE}"}
    write_file(bundle, f"{folder}/metadata.json", json.dumps(metadata, indent=2) + "\n")
    return {
        "source": model.source,
        "folder": folder,
        "compiled": compiled_as,
        "om": f"{folder}/{info['om']}" if info["om"] else None,
        "onnx": f"{folder}/{manifest.model}",
        "host_onnx": f"{folder}/{host_onnx}" if host_onnx else None,
        "soc": manifest.soc,
        "atc": {"argv": info["argv"], "script": f"{folder}/compile.sh", "ran": bool(info["om"])},
        "custom_ops": info["custom_ops"],
        "decomposed_custom_ops": info["decomposed"],
        "parity": {
            "optimize": build.entries["optimize"].info["parity"],
            "fp16": build.entries["fp16"].info["parity"],
            "prepare": info["parity"],
        },
        "gates": metadata["gates"],
        "keep_fp32": build.entries["fp16"].info["keep_fp32"],
        "golden": f"{folder}/{GOLDEN_NPZ}",
        "int8": None if int8 is None else {
            "calibration": model.int8.calibration_text, "samples": int8.info["samples"],
            "keep_fp16": int8.info["keep_fp16"], "config": f"{folder}/{INT8_CONFIG}",
            "keep_fp16_chosen": int8.info["keep_fp16_chosen"],
            "automatic": automatic,
            "host_emulation": {"parity": int8.info["parity"],
                               "note": "ONNX Runtime QDQ emulation of the board's INT8: a "
                                       "prediction until a board confirms it"}},
    }
