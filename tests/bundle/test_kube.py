"""``build --emit k8s``: the DaemonSet validates against the Kubernetes object schemas
(kubernetes-validate, strict: no unknown field) and carries what an Atlas 200I DK A2 edge node
needs; the Containerfile installs the build's own archive on a CANN base image."""

from __future__ import annotations

import copy

import pytest
import yaml

from edgefuse.bundle.builder import build
from edgefuse.bundle.kube import HOST_PATHS, NPU_RESOURCE
from edgefuse.errors import InputError
from tests.bundle.models import without_app, write_spec

pytestmark = pytest.mark.ort

K8S_VERSION = "1.30"


@pytest.fixture(scope="module")
def emitted(small_build, tmp_path_factory):
    folder = tmp_path_factory.mktemp("kube")
    spec = write_spec(folder / "spec")
    spec.write_text(spec.read_text().replace(
        "service:\n", "service:\n  health: {port: 8080, path: /healthz}\n  metrics_port: 9100\n"))
    outcome = build(spec, folder / "out", cache_dir=small_build.cache, progress=False,
                    emit=("k8s",))
    return outcome


def _validate(document: dict) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def test_the_daemonset_is_a_valid_kubernetes_object(emitted):
    document = yaml.safe_load((emitted.output_dir / "k8s/daemonset.yaml").read_text())
    _validate(document)
    assert document["kind"] == "DaemonSet" and document["metadata"]["name"] == "edgefuse-small"


def test_a_broken_daemonset_fails_the_same_validation(emitted):
    """The validator is real: a misspelt field and a wrong type are refused."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    document = yaml.safe_load((emitted.output_dir / "k8s/daemonset.yaml").read_text())
    misspelt = copy.deepcopy(document)
    misspelt["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    wrong_type = copy.deepcopy(document)
    wrong_type["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    for broken in (misspelt, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_pod_asks_for_the_npu_and_mounts_the_boards_driver(emitted):
    document = yaml.safe_load((emitted.output_dir / "k8s/daemonset.yaml").read_text())
    pod = document["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {NPU_RESOURCE: "1"}
    assert NPU_RESOURCE == "huawei.com/Ascend310"
    mounted = {m["mountPath"]: m["readOnly"] for m in container["volumeMounts"]}
    hosts = {v["hostPath"]["path"] for v in pod["volumes"]}
    for path in ("/usr/local/Ascend/driver/lib64", "/usr/lib64/aicpu_kernels", "/var/slogd",
                 "/var/dmp_daemon", "/etc/sys_version.conf", "/etc/hdcBasic.cfg",
                 "/usr/local/sbin/npu-smi"):
        assert mounted[path] is True and path in hosts
    assert len(hosts) == len(HOST_PATHS)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9100}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert pod["nodeSelector"]["kubernetes.io/arch"] == "arm64"


def test_the_containerfile_installs_this_builds_archive_on_a_cann_base(emitted):
    text = (emitted.output_dir / "k8s/Containerfile").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "ARG CANN_BASE"
    assert lines[1] == "FROM --platform=linux/arm64 ${CANN_BASE}"
    assert f"COPY {emitted.archive.name} install.sh /tmp/edgefuse/" in lines
    assert any(line.startswith("RUN bash /tmp/edgefuse/install.sh /tmp/edgefuse/")
               for line in lines)
    assert "USER HwHiAiUser" in lines
    assert 'ENV EDGEFUSE_LOG="info"' in lines
    assert lines[-1].startswith('CMD ["/opt/edgefuse/small/current/.venv/bin/edgefuse", "segment"')
    assert not (emitted.bundle_dir / "k8s").exists()  # beside the bundle, not in it


def test_emit_k8s_without_an_app_is_refused(small_build, tmp_path):
    spec = write_spec(tmp_path / "spec")
    text = spec.read_text()
    spec.write_text(without_app(text))
    with pytest.raises(InputError, match=r"--emit k8s needs an app"):
        build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False, emit=("k8s",))
