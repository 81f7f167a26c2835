"""``build --emit k8s``: a container image recipe and a DaemonSet for K8s/KubeEdge edge nodes.

Why from the same spec: the image runs the same signed bundle that install.sh puts on a board
(the Containerfile installs the archive with the bundle's own install.sh, so every check runs
at image build time), and the DaemonSet carries the service's name, environment, health
endpoint and metrics port from the spec, so the two deployments cannot drift apart.

What an Atlas 200I DK A2 edge node needs in the pod: the NPU through Huawei's Ascend device
plugin (resource ``huawei.com/Ascend310``; the plugin injects ``/dev/davinci*``,
``/dev/davinci_manager`` and the 310B device nodes), and from the host the driver, its
libraries and daemons' folders (``HOST_PATHS``, after the device plugin's and the board's
container documentation). The files are written to OUT_DIR/k8s/, beside the archive, which is
the image's build context.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from edgefuse._files import write_text
from edgefuse.bundle.service import VERBS, environment
from edgefuse.bundle.spec import BuildSpec

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


def image_name(spec: BuildSpec) -> str:
    return f"edgefuse/{spec.name}:{spec.version}"


def containerfile(spec: BuildSpec, archive: str, opp_vendor: str | None) -> str:
    """An aarch64 image on a CANN runtime base image (``CANN_BASE``) that runs the bundle."""
    prefix, service = spec.prefix, spec.service
    command = [f"{prefix}/current/.venv/bin/edgefuse", VERBS[spec.app["kind"]], "--config",
               f"{prefix}/current/app/config.yaml"]
    env = "\n".join(f"ENV {name}={json.dumps(value)}"
                    for name, value in environment(spec, opp_vendor).items())
    return f"""\
# The edgefuse bundle {spec.bundle_id} as an aarch64 image (written by edgefuse build --emit k8s).
# Build context: the build's OUT_DIR, which holds {archive} and install.sh:
#   podman build --platform linux/arm64 -f k8s/{CONTAINERFILE} \\
#     --build-arg CANN_BASE=<a CANN runtime image for the Ascend 310B> -t {image_name(spec)} OUT_DIR
# install.sh checks the archive (and, with keys in trusted-keys/, its signature) before it installs.
ARG CANN_BASE
FROM --platform=linux/arm64 ${{CANN_BASE}}
COPY {archive} install.sh /tmp/edgefuse/
RUN bash /tmp/edgefuse/install.sh /tmp/edgefuse/{archive} && rm -rf /tmp/edgefuse
{env}
USER {service["user"]}
WORKDIR {prefix}/current
CMD {json.dumps(command)}
"""


def daemonset(spec: BuildSpec) -> dict[str, Any]:
    """One pod of the app on every edge node that has the NPU."""
    service = spec.service
    labels = {"app.kubernetes.io/name": spec.name, "app.kubernetes.io/version": spec.version,
              "app.kubernetes.io/managed-by": "edgefuse"}
    volumes, mounts = [], []
    for index, (path, kind) in enumerate(HOST_PATHS):
        name = f"host-{index}"
        volumes.append({"name": name, "hostPath": {"path": path, "type": kind}})
        mounts.append({"name": name, "mountPath": path, "readOnly": True})
    container: dict[str, Any] = {
        "name": "app",
        "image": image_name(spec),
        "imagePullPolicy": "IfNotPresent",
        "resources": {"requests": {NPU_RESOURCE: "1"}, "limits": {NPU_RESOURCE: "1"}},
        "volumeMounts": mounts,
        "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    ports = []
    health = service.get("health")
    if health is not None:
        ports.append({"name": "health", "containerPort": health["port"], "protocol": "TCP"})
        probe = {"httpGet": {"path": health.get("path", "/healthz"), "port": "health"}}
        container["readinessProbe"] = {**probe, "periodSeconds": 5, "failureThreshold": 3}
        container["livenessProbe"] = {**probe, "initialDelaySeconds": 30, "periodSeconds": 10,
                                      "failureThreshold": 3}
    if service.get("metrics_port") is not None:
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
    folder.mkdir()
    write_text(folder / CONTAINERFILE, containerfile(spec, archive, opp_vendor))
    header = (f"# {spec.bundle_id} on K8s/KubeEdge edge nodes (written by edgefuse build "
              f"--emit k8s); image: k8s/{CONTAINERFILE}\n")
    write_text(folder / DAEMONSET, header + yaml.safe_dump(daemonset(spec), sort_keys=False))
