"""``build --emit k8s``: a container image recipe and a DaemonSet for K8s/KubeEdge edge nodes.

Why from the same spec: the image runs the same signed bundle that install.sh puts on a board
(the Containerfile installs the archive with the bundle's own install.sh, so every check runs
at image build time), and the DaemonSet carries the service's name, environment, health
endpoint and metrics port from the spec, so the two deployments cannot drift apart.

Trust (issue 27 §9): the image build runs install.sh only after its detached signature
(install.sh.sig, ``build --sign``) checks against the publisher's public keys, which come from a
second build context (``--build-context trust=DIR``), never from OUT_DIR, where whoever can edit
install.sh could put a key too; install.sh then checks the archive against the same keys.

The pod (issue 27 §18): a numeric non-root user (the spec's ``service.uid``/``gid``, which the
image creates, so ``runAsNonRoot`` can be enforced by the kubelet), the runtime's default
seccomp profile, no privilege escalation, no capabilities, a read-only root file system with
empty folders where the app writes (``/tmp``, its state and log folders, its sinks' folders),
CPU and memory requests and limits, no service-account token. Probes only where something
answers them: the app's ``serve`` address (its live view serves ``/healthz``), checked from inside
the container with the environment's own Python, since kubelet's HTTP probes reach the pod's
address and a serve on 127.0.0.1 (the safe default: no token needed) would never answer them. The
image is named by its digest once built and pushed (``pin_image``): a tag can be pushed again.

What an Atlas 200I DK A2 edge node needs in the pod: the NPU through Huawei's Ascend device
plugin (resource ``huawei.com/Ascend310``; the plugin injects ``/dev/davinci*``,
``/dev/davinci_manager`` and the 310B device nodes), and from the host the driver, its
libraries and daemons' folders (``HOST_PATHS``, after the device plugin's and the board's
container documentation). The files are written to OUT_DIR/k8s/, beside the archive, which is
the image's build context.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from edgefuse._files import write_text
from edgefuse.apps.config import from_mapping
from edgefuse.bundle.service import VERBS, app_config, environment
from edgefuse.bundle.spec import BuildSpec
from edgefuse.bundle.spec_checks import APP_CONFIGS
from edgefuse.errors import InputError, Ref

NPU_RESOURCE = "huawei.com/Ascend310"
# (host path, type): mounted read-only at the same path in the container
HOST_PATHS: tuple[tuple[str, str], ...] = (
    ("/usr/local/Ascend/driver/lib64", "Directory"),
    ("/usr/lib64/aicpu_kernels", "Directory"),
    ("/var/slogd", "Directory"),
    ("/var/dmp_daemon", "File"),
    ("/etc/sys_version.conf", "File"),
    ("/etc/hdcBasic.cfg", "File"),
    ("/usr/local/sbin/npu-smi", "File"),
    ("/usr/lib64/libaicpu_processer.so", "File"),
    ("/usr/lib64/libaicpu_prof.so", "File"),
    ("/usr/lib64/libaicpu_sharder.so", "File"),
    ("/usr/lib64/libadump.so", "File"),
    ("/usr/lib64/libtsd_eventclient.so", "File"),
    ("/usr/lib64/libaicpu_scheduler.so", "File"),
    ("/usr/lib64/libdcmi.so", "File"),
    ("/usr/lib64/libmpi_dvpp_adapter.so", "File"),
    ("/usr/lib64/libstackcore.so", "File"),
)
CONTAINERFILE = "Containerfile"
DAEMONSET = "daemonset.yaml"
TRUST_CONTEXT = "trust"  # podman/docker build --build-context trust=DIR: the public keys
# A starting point for one camera app on the 4-core Atlas 200I DK A2 (4, 8 or 12 GB): tune from
# `kubectl top pod`. The NPU is asked for besides.
RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"},
             "limits": {"cpu": "3", "memory": "2Gi"}}
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
DIGEST = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")
UNPINNED = ("# NOT PINNED: once the image is pushed, run "
            "`edgefuse bundle pin-image K8S_DIR IMAGE@sha256:...`\n")


def image_name(spec: BuildSpec) -> str:
    return f"edgefuse/{spec.name}:{spec.version}"


def containerfile(spec: BuildSpec, archive: str, opp_vendor: str | None) -> str:
    """An aarch64 image on a CANN runtime base image (``CANN_BASE``) that runs the bundle, once
    its installer's signature checks against the keys of the ``trust`` build context."""
    prefix, service = spec.prefix, spec.service
    user, group, uid, gid = service["user"], service["group"], service["uid"], service["gid"]
    command = [f"{prefix}/current/.venv/bin/edgefuse", VERBS[spec.app["kind"]], "--config",
               f"{prefix}/current/app/config.yaml"]
    env = "\n".join(f"ENV {name}={json.dumps(value)}"
                    for name, value in environment(spec, opp_vendor).items())
    return f"""\
# The edgefuse bundle {spec.bundle_id} as an aarch64 image (written by edgefuse build --emit k8s).
# Build context: the build's OUT_DIR ({archive}, install.sh, install.sh.sig from --sign); the
# publisher's public keys (*.pem, public keys only) from a folder outside it, TRUST_DIR:
#   podman build --platform linux/arm64 -f k8s/{CONTAINERFILE} \\
#     --build-context {TRUST_CONTEXT}=TRUST_DIR \\
#     --build-arg CANN_BASE=<a CANN runtime image for the Ascend 310B> -t {image_name(spec)} OUT_DIR
# install.sh runs only once its signature checks against one of those keys (openssl, below);
# it then checks the archive's signature against the same keys before it installs anything.
ARG CANN_BASE
FROM --platform=linux/arm64 ${{CANN_BASE}}
COPY --from={TRUST_CONTEXT} *.pem /etc/edgefuse/keys/
COPY {archive} install.sh install.sh.sig /tmp/edgefuse/
RUN getent group {group} >/dev/null || groupadd --gid {gid} {group}; \\
    id -u {user} >/dev/null 2>&1 || useradd --uid {uid} --gid {gid} --no-create-home \\
      --home-dir /nonexistent --shell /usr/sbin/nologin {user}; \\
    test "$(id -u {user}):$(id -g {user})" = "{uid}:{gid}" \\
      || {{ echo "{user} is $(id -u {user}):$(id -g {user}) in CANN_BASE, not {uid}:{gid} \\
(service.uid, service.gid)" >&2; exit 1; }}
RUN signed=; for key in /etc/edgefuse/keys/*.pem; do \\
      if [ -f "$key" ] && openssl pkeyutl -verify -pubin -inkey "$key" -rawin \\
          -in /tmp/edgefuse/install.sh -sigfile /tmp/edgefuse/install.sh.sig >/dev/null 2>&1; \\
      then signed=$key; break; fi; \\
    done; \\
    if [ -z "$signed" ]; then echo "install.sh is not signed by a key of the {TRUST_CONTEXT} \\
context: nothing was installed" >&2; exit 1; fi; \\
    echo "install.sh is signed by $signed"; \\
    bash /tmp/edgefuse/install.sh /tmp/edgefuse/{archive} && rm -rf /tmp/edgefuse
{env}
USER {uid}:{gid}
WORKDIR {prefix}/current
CMD {json.dumps(command)}
"""


def _serve(spec: BuildSpec) -> tuple[str, int] | None:
    """The (host, port) the packaged app serves its live view and /healthz on, if any (the
    segmentation app serves nothing)."""
    config = from_mapping(APP_CONFIGS[spec.app["kind"]], yaml.safe_load(app_config(spec)),
                          "app config")
    return getattr(config, "serve", None)


def _probe(spec: BuildSpec) -> dict[str, Any] | None:
    """An exec probe of the app's /healthz from inside the container, or None when the app
    serves nothing (a probe of a port nobody listens on fails every pod)."""
    health, serve = spec.service.get("health"), _serve(spec)
    if serve is None:
        if health is not None:
            raise InputError(
                f"service.health names port {health['port']}, but the app serves nothing there "
                "(app.config.serve is null): every pod would fail its probes",
                hint=f"set app.config.serve: 127.0.0.1:{health['port']} (the live view, "
                     "/metrics and /healthz), or drop service.health",
                reference=Ref.BAD_BUILD_SPEC)
        return None
    host, port = serve
    if health is not None and health["port"] != port:
        raise InputError(f"service.health names port {health['port']}, but the app serves on "
                         f"{port} (app.config.serve)",
                         hint="give both the same port", reference=Ref.BAD_BUILD_SPEC)
    host = "127.0.0.1" if host in WILDCARD_HOSTS else host
    path = (health or {}).get("path", "/healthz")
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}{path}"
    check = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=4)"
    return {"exec": {"command": [f"{spec.prefix}/current/.venv/bin/python", "-c", check]},
            "timeoutSeconds": 5}


def _writable(spec: BuildSpec) -> list[str]:
    """The folders the app writes to, each an empty folder over the read-only root."""
    folders = ["/tmp", f"/var/lib/edgefuse/{spec.name}", f"/var/log/edgefuse/{spec.name}"]
    sinks = spec.app["sinks"]
    if sinks.get("jsonl"):
        folders.append(str(PurePosixPath(sinks["jsonl"]).parent))
    if sinks.get("save"):
        folders.append(str(PurePosixPath(sinks["save"])))
    kept: list[str] = []
    for folder in folders:
        if not any(folder == k or folder.startswith(k + "/") for k in kept):
            kept.append(folder)
    return kept


def daemonset(spec: BuildSpec, image: str | None = None) -> dict[str, Any]:
    """One pod of the app on every edge node that has the NPU; ``image``: the image by digest
    (``NAME@sha256:...``), else the build's tag, to be pinned (``pin_image``)."""
    service = spec.service
    labels = {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/version": spec.version,
              "app.kubernetes.io/managed-by": "edgefuse"}
    volumes, mounts = [], []
    for index, (path, kind) in enumerate(HOST_PATHS):
        name = f"host-{index}"
        volumes.append({"name": name, "hostPath": {"path": path, "type": kind}})
        mounts.append({"name": name, "mountPath": path, "readOnly": True})
    for index, path in enumerate(_writable(spec)):
        name = f"writable-{index}"
        volumes.append({"name": name, "emptyDir": {}})
        mounts.append({"name": name, "mountPath": path})
    user = {"runAsNonRoot": True, "runAsUser": service["uid"], "runAsGroup": service["gid"]}
    container: dict[str, Any] = {
        "name": "app",
        "image": image or image_name(spec),
        # by digest, the node's copy is the right one; by tag, only a fresh pull may be
        "imagePullPolicy": "IfNotPresent" if image else "Always",
        "resources": {kind: {**amounts, NPU_RESOURCE: "1"}
                      for kind, amounts in RESOURCES.items()},
        "volumeMounts": mounts,
        "securityContext": {**user, "allowPrivilegeEscalation": False, "privileged": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    probe = _probe(spec)
    if probe is not None:
        container["readinessProbe"] = {**probe, "periodSeconds": 10, "failureThreshold": 3}
        container["livenessProbe"] = {**probe, "initialDelaySeconds": 30, "periodSeconds": 15,
                                      "failureThreshold": 3}
    ports = []
    serve = _serve(spec)
    if serve is not None and serve[0] in WILDCARD_HOSTS:
        ports.append({"name": "http", "containerPort": serve[1], "protocol": "TCP"})
    if service.get("metrics_port") is not None and (serve is None
                                                   or service["metrics_port"] != serve[1]):
        ports.append({"name": "metrics", "containerPort": service["metrics_port"],
                      "protocol": "TCP"})
    if ports:
        container["ports"] = ports
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": service["name"], "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": spec.name}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "securityContext": {**user, "seccompProfile": {"type": "RuntimeDefault"}},
                    "nodeSelector": {"kubernetes.io/arch": "arm64",
                                     "node-role.kubernetes.io/edge": ""},
                    "tolerations": [{"key": "node-role.kubernetes.io/edge",
                                     "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def write_k8s(folder: Path, spec: BuildSpec, archive: str, opp_vendor: str | None) -> None:
    """OUT_DIR/k8s/{Containerfile,daemonset.yaml} for a spec with an app."""
    document = daemonset(spec)  # a spec whose probes could never pass stops here
    folder.mkdir()
    write_text(folder / CONTAINERFILE, containerfile(spec, archive, opp_vendor))
    write_text(folder / DAEMONSET, _header(spec.bundle_id, None) + yaml.safe_dump(
        document, sort_keys=False))


def _header(bundle_id: str, image: str | None) -> str:
    return (f"# {bundle_id} on K8s/KubeEdge edge nodes (written by edgefuse build --emit k8s); "
            f"image: k8s/{CONTAINERFILE}\n" + (f"# image pinned: {image}\n" if image else UNPINNED))


def pin_image(folder: Path, image: str) -> Path:
    """Name the built and pushed image by its digest in ``folder/daemonset.yaml``
    (``REGISTRY/NAME@sha256:HEX``, as ``podman push --digestfile`` reports it)."""
    if not DIGEST.fullmatch(image):
        raise InputError(f"'{image}' does not name an image by its digest",
                         hint="give REGISTRY/NAME@sha256:<64 hex digits>: `podman push "
                              "--digestfile FILE IMAGE` writes the digest; a tag can be "
                              "pushed again with other content", reference=Ref.BAD_ARGUMENT)
    path = folder / DAEMONSET
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read '{path}': {exc.strerror}",
                         hint="give the k8s/ folder that `edgefuse build --emit k8s` wrote",
                         reference=Ref.FILE_NOT_FOUND) from exc
    document = yaml.safe_load(text)
    container = document["spec"]["template"]["spec"]["containers"][0]
    container["image"], container["imagePullPolicy"] = image, "IfNotPresent"
    bundle_id = text.splitlines()[0].removeprefix("# ").split(" on K8s")[0]
    write_text(path, _header(bundle_id, image) + yaml.safe_dump(document, sort_keys=False))
    return path
