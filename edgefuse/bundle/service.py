"""What the board runs: the app's config, the systemd unit, its environment file, the scripts.

Why generated from templates (``templates/``, package data): install.sh and the card-maker hook
run on the board or against a root file system where edgefuse is not installed, so they are
plain bash; the values the spec decides (bundle id, prefix, service name and user) are written
into them once, shell-quoted, and nothing else varies, so equal specs give equal scripts. Paths
in them are board paths under the spec's install prefix, never the build host's.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

import yaml

from edgefuse.apps.config import from_mapping
from edgefuse.apps.stopping import stop_bound_s
from edgefuse.bundle.digests import PACKAGE_DIR
from edgefuse.bundle.spec import BuildSpec
from edgefuse.bundle.spec_checks import APP_CONFIGS

TEMPLATES = Path(__file__).resolve().parent / "templates"
APPS_DIR = PACKAGE_DIR.parent / "apps"  # the checkout's thin app wrappers and their configs
VERBS = {"detection": "detect", "segmentation": "segment"}
# runs an install.sh only where a trusted key signed it (install.sh.sig); the card maker's hook
# puts it on the board with the keys, at VERIFIER_PATH
VERIFIER = "edgefuse-verify-installer"
VERIFIER_PATH = f"/usr/local/sbin/{VERIFIER}"
WATCHDOG_S = 30  # a pipeline with no finished frame for this long is restarted by systemd
# A board's card is small (the Atlas 200I DK A2 boots from a 32-64 GB microSD, the OS takes ~10
# GB): a service recording for weeks keeps each output within these unless the spec's app config
# sets its own ``retain`` (null: keep everything). docs/service.md says what a day costs.
SERVICE_RETAIN = {"max_bytes": "4G", "max_age": "7d", "min_free_bytes": "2G"}
_DRIVER_LIBS = "/usr/local/Ascend/driver/lib64/driver:/usr/local/Ascend/driver/lib64/common"


def render(template: str, values: dict[str, str]) -> str:
    """``templates/<template>`` with every ``@@NAME@@`` replaced; a leftover is a bug."""
    text = (TEMPLATES / template).read_text(encoding="utf-8")
    for name, value in values.items():
        text = text.replace(f"@@{name}@@", value)
    if "@@" in text:
        raise RuntimeError(f"template {template} has an unfilled placeholder")
    return text


def script_values(spec: BuildSpec, opp_vendor: str | None) -> dict[str, str]:
    service = spec.service if spec.app is not None else None
    return {
        "BUNDLE_ID": shlex.quote(spec.bundle_id),
        "BUNDLE_NAME": shlex.quote(spec.name),
        "PREFIX": shlex.quote(spec.prefix),
        "SERVICE": shlex.quote(service["name"]) if service else "''",
        "SERVICE_USER": shlex.quote(spec.service["user"]),
        "SERVICE_GROUP": shlex.quote(spec.service["group"]),
        "OPP_VENDOR": shlex.quote(opp_vendor) if opp_vendor else "''",
        "PYTHON_VERSION": shlex.quote(spec.python["version"]),
        "CANN_HOME": shlex.quote(spec.target["cann_home"]),
        "VERIFIER": VERIFIER,
        "VERIFIER_PATH": VERIFIER_PATH,
    }


def app_config(spec: BuildSpec) -> str:
    """``app/config.yaml`` of the service: the app's own config.yaml with the spec's values."""
    app = spec.app
    kind = app["kind"]
    base_file = APPS_DIR / kind / "config.yaml"
    base = yaml.safe_load(base_file.read_text(encoding="utf-8")) if base_file.is_file() else {}
    values: dict[str, Any] = {**(base or {}), **app["config"]}
    if "retain" not in app["config"]:
        values["retain"] = SERVICE_RETAIN
    values.update({
        "model": f"models/{app['model']}",
        "backend": list(app["backend"]),
        "stats_every": values.get("stats_every", 5.0),
    })
    if app["source"] is not None:
        values["source"] = app["source"]
    for sink in ("jsonl", "save"):
        if app["sinks"].get(sink) is not None:
            values[sink] = app["sinks"][sink]
    from_mapping(APP_CONFIGS[kind], values, "app config")  # checked as the app will read it
    header = (f"# The {kind} app of {spec.bundle_id} (written by edgefuse build from the spec's "
              f"app section over apps/{kind}/config.yaml).\n# `model` is relative to the "
              "service's working directory, the installed bundle.\n")
    return header + yaml.safe_dump(values, sort_keys=False, default_flow_style=None)


def unit_file(spec: BuildSpec) -> str:
    service = spec.service
    config = from_mapping(APP_CONFIGS[spec.app["kind"]], yaml.safe_load(app_config(spec)),
                          "app config")
    return render("service.service", {
        "WATCHDOG_SEC": str(WATCHDOG_S),
        "TIMEOUT_STOP_SEC": str(math.ceil(stop_bound_s(config.stop_timeout_s,
                                                       config.reconnect.timeout_s))),
        "BUNDLE_ID": spec.bundle_id,
        "BUNDLE_NAME": spec.name,
        "APP_KIND": spec.app["kind"],
        "SERVICE": service["name"],
        "SERVICE_USER": service["user"],
        "SERVICE_GROUP": service["group"],
        "SUPPLEMENTARY_GROUPS": " ".join(service["supplementary_groups"]),
        "PREFIX": spec.prefix,
        "VERB": VERBS[spec.app["kind"]],
        "RESTART": service["restart"],
        "RESTART_SEC": f"{service['restart_sec']:g}",
    })


def environment_file(spec: BuildSpec, opp_vendor: str | None) -> str:
    values = environment(spec, opp_vendor)
    lines = "\n".join(f"{name}={_env_value(value)}" for name, value in values.items())
    return render("service.env", {"SERVICE": spec.service["name"], "ENVIRONMENT": lines})


def environment(spec: BuildSpec, opp_vendor: str | None) -> dict[str, str]:
    """The app's environment: what CANN's set_env.sh sets, then the spec's own variables."""
    cann = spec.target["cann_home"]
    values = {
        "ASCEND_TOOLKIT_HOME": cann,
        "ASCEND_HOME_PATH": cann,
        "ASCEND_AICPU_PATH": cann,
        "ASCEND_OPP_PATH": f"{cann}/opp",
        "LD_LIBRARY_PATH": f"{cann}/lib64:{cann}/lib64/plugin/opskernel:"
                           f"{cann}/lib64/plugin/nnengine:{_DRIVER_LIBS}",
        # no PYTHONPATH: it would put CANN's folders before the locked packages; install.sh
        # names them in the environment's edgefuse-cann.pth, after them
        "PATH": f"{cann}/bin:{cann}/compiler/ccec_compiler/bin:/usr/local/sbin:/usr/local/bin:"
                "/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONUNBUFFERED": "1",
        # CANN logs to $HOME/ascend/log by default, which ProtectHome= hides: the unit's logs
        "ASCEND_PROCESS_LOG_PATH": f"/var/log/edgefuse/{spec.name}",
    }
    if opp_vendor is not None:
        # each release's own package, built into it by install.sh: it rolls back with it
        values["ASCEND_CUSTOM_OPP_PATH"] = f"{spec.prefix}/current/.opp/vendors/{opp_vendor}"
    for name, value in spec.service["environment"].items():
        values[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return values


def _env_value(value: str) -> str:
    """systemd's EnvironmentFile quoting: plain when safe, else double quotes with escapes."""
    if value and all(c.isalnum() or c in "/._:-+=,@%" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def app_wrappers() -> list[tuple[str, Path]]:
    """(bundle path, file) of the checkout's apps/ (thin wrappers and configs), if present."""
    if not APPS_DIR.is_dir():
        return []
    return [(f"app/apps/{path.relative_to(APPS_DIR).as_posix()}", path)
            for path in sorted(APPS_DIR.rglob("*"))
            if path.is_file() and path.suffix in (".py", ".yaml")
            and "__pycache__" not in path.parts]
