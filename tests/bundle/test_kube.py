"""``build --emit k8s``: the DaemonSet validates against the Kubernetes OpenAPI object schemas
(kubernetes-validate, strict: no unknown field, every type checked) and carries what an Atlas
200I DK A2 edge node needs, locked down (issue 27 §18); the Containerfile installs the build's
own archive on a CANN base image, once its installer's signature checks (§9).

The DaemonSet's probes are run for real: the exec probe's command against a stand-in /healthz on
a free port, and against that port with nothing listening (the defect: a probe of :8080 where the
app served nothing)."""

from __future__ import annotations

import copy
import http.server
import socket
import subprocess
import sys
import threading

import pytest
import yaml

from edgefuse.bundle.builder import build
from edgefuse.bundle.kube import HOST_PATHS, NPU_RESOURCE, UNPINNED, daemonset, pin_image
from edgefuse.bundle.signing import new_key_pair
from edgefuse.bundle.spec import load_spec
from edgefuse.cli.main import main
from edgefuse.errors import InputError
from tests.bundle.models import without_app, write_detection_spec, write_spec

pytestmark = pytest.mark.ort

K8S_VERSION = "1.30"
DIGEST = "registry.example/edgefuse/small@sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    return new_key_pair(tmp_path_factory.mktemp("keys"), "release")


@pytest.fixture(scope="module")
def emitted(small_build, key, tmp_path_factory):
    folder = tmp_path_factory.mktemp("kube")
    spec = write_spec(folder / "spec")
    spec.write_text(spec.read_text().replace("service:\n", "service:\n  metrics_port: 9100\n"))
    return build(spec, folder / "out", cache_dir=small_build.cache, progress=False,
                 emit=("k8s",), sign_key=key[0])


def _detection(tmp_path, config: str, service: str = ""):
    """The DaemonSet of the detection spec with the app ``config`` and ``service`` keys."""
    spec = write_detection_spec(tmp_path / "det", config=config)
    if service:
        spec.write_text(spec.read_text().replace("service:\n", f"service:\n{service}"))
    return daemonset(load_spec(spec))


def _validate(document: dict) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def _container(document: dict) -> dict:
    return document["spec"]["template"]["spec"]["containers"][0]


def test_the_daemonset_is_a_valid_kubernetes_object(emitted):
    text = (emitted.output_dir / "k8s/daemonset.yaml").read_text()
    document = yaml.safe_load(text)
    _validate(document)
    assert document["kind"] == "DaemonSet" and document["metadata"]["name"] == "edgefuse-small"


def test_a_broken_daemonset_fails_the_same_validation(emitted):
    """The validator is real: a misspelt field, a user name where a number belongs and a wrong
    seccomp type are refused."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    document = yaml.safe_load((emitted.output_dir / "k8s/daemonset.yaml").read_text())
    misspelt = copy.deepcopy(document)
    _container(misspelt)["imagePullPolicyy"] = "Always"
    named_user = copy.deepcopy(document)
    _container(named_user)["securityContext"]["runAsUser"] = "HwHiAiUser"
    wrong_type = copy.deepcopy(document)
    _container(wrong_type)["ports"][0]["containerPort"] = "x"
    for broken in (misspelt, named_user, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_pod_runs_locked_down_as_a_numeric_non_root_user(emitted):
    document = yaml.safe_load((emitted.output_dir / "k8s/daemonset.yaml").read_text())
    pod = document["spec"]["template"]["spec"]
    container = _container(document)
    for context in (pod["securityContext"], container["securityContext"]):
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == 1000 and context["runAsGroup"] == 1000
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    for kind in ("requests", "limits"):
        assert set(container["resources"][kind]) == {"cpu", "memory", NPU_RESOURCE}
    # the read-only root has empty folders where the app writes, and only there
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/tmp", "/var/lib/edgefuse/small", "/var/log/edgefuse/small"}


def test_the_pod_asks_for_the_npu_and_mounts_the_boards_driver(emitted):
    document = yaml.safe_load((emitted.output_dir / "k8s/daemonset.yaml").read_text())
    pod = document["spec"]["template"]["spec"]
    container = _container(document)
    assert container["resources"]["limits"][NPU_RESOURCE] == "1"
    assert NPU_RESOURCE == "huawei.com/Ascend310"
    mounted = {m["mountPath"]: m.get("readOnly") for m in container["volumeMounts"]}
    hosts = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    for path in ("/usr/local/Ascend/driver/lib64", "/usr/lib64/aicpu_kernels", "/var/slogd",
                 "/var/dmp_daemon", "/etc/sys_version.conf", "/etc/hdcBasic.cfg",
                 "/usr/local/sbin/npu-smi"):
        assert mounted[path] is True and path in hosts
    assert len(hosts) == len(HOST_PATHS)
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 9100}
    # the segmentation app serves nothing: no probe of a port nobody listens on
    assert "livenessProbe" not in container and "readinessProbe" not in container
    assert pod["nodeSelector"]["kubernetes.io/arch"] == "arm64"


def test_the_image_is_named_by_digest_once_pinned(emitted, tmp_path, capsys):
    folder = tmp_path / "k8s"
    folder.mkdir()
    (folder / "daemonset.yaml").write_text((emitted.output_dir / "k8s/daemonset.yaml").read_text())
    text = (folder / "daemonset.yaml").read_text()
    assert UNPINNED in text
    assert _container(yaml.safe_load(text))["imagePullPolicy"] == "Always"  # a tag: pull anew
    assert main(["bundle", "pin-image", str(folder), "registry.example/edgefuse/small:1.0.0"]) == 2
    assert "does not name an image by its digest" in capsys.readouterr().err
    assert main(["bundle", "pin-image", str(folder), DIGEST]) == 0
    pinned = yaml.safe_load((folder / "daemonset.yaml").read_text())
    _validate(pinned)
    assert _container(pinned)["image"] == DIGEST
    assert _container(pinned)["imagePullPolicy"] == "IfNotPresent"
    assert UNPINNED not in (folder / "daemonset.yaml").read_text()
    with pytest.raises(InputError, match=r"cannot read"):
        pin_image(tmp_path / "nowhere", DIGEST)


def test_the_containerfile_checks_the_installer_then_installs_as_a_numeric_user(emitted):
    text = (emitted.output_dir / "k8s/Containerfile").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0] == "ARG CANN_BASE"
    assert lines[1] == "FROM --platform=linux/arm64 ${CANN_BASE}"
    assert lines[2] == "COPY --from=trust *.pem /etc/edgefuse/keys/"
    assert lines[3] == f"COPY {emitted.archive.name} install.sh install.sh.sig /tmp/edgefuse/"
    assert "useradd --uid 1000 --gid 1000" in text
    verify = text.index("openssl pkeyutl -verify -pubin")
    install = f"bash /tmp/edgefuse/install.sh /tmp/edgefuse/{emitted.archive.name}"
    assert verify < text.index(install)
    assert "USER 1000:1000" in lines
    assert 'ENV EDGEFUSE_LOG="info"' in lines
    assert lines[-1].startswith('CMD ["/opt/edgefuse/small/current/.venv/bin/edgefuse", "segment"')
    assert (emitted.output_dir / "install.sh.sig").is_file()
    assert not (emitted.bundle_dir / "k8s").exists()  # beside the bundle, not in it


def test_emit_k8s_needs_a_signing_key_and_an_app(small_build, key, tmp_path):
    spec = write_spec(tmp_path / "spec")
    with pytest.raises(InputError, match=r"--emit k8s needs --sign KEY"):
        build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False, emit=("k8s",))
    spec.write_text(without_app(spec.read_text()))
    with pytest.raises(InputError, match=r"--emit k8s needs an app"):
        build(spec, tmp_path / "out", cache_dir=small_build.cache, progress=False, emit=("k8s",),
              sign_key=key[0])


# ---- probes: only where the app serves, and they really probe it -------------------------------


def test_a_health_port_the_app_does_not_serve_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"app.config.serve is null"):
        _detection(tmp_path, "{stride: 1}", "  health: {port: 8080, path: /healthz}\n")
    with pytest.raises(InputError, match=r"serves on 8081"):
        _detection(tmp_path, "{serve: '127.0.0.1:8081'}", "  health: {port: 8080}\n")


def _healthz_server():
    class Healthz(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _run_probe(container: dict) -> int:
    command = container["livenessProbe"]["exec"]["command"]
    assert command[0] == "/opt/edgefuse/boxes/current/.venv/bin/python"
    return subprocess.run([sys.executable, *command[1:]], capture_output=True, timeout=30,
                          check=False).returncode


def test_the_probe_asks_the_apps_serve_address_and_fails_where_nothing_listens(tmp_path):
    server = _healthz_server()
    try:
        port = server.server_address[1]
        document = _detection(tmp_path, f"{{serve: '127.0.0.1:{port}'}}",
                              f"  health: {{port: {port}, path: /healthz}}\n")
        _validate(document)
        container = _container(document)
        assert container["readinessProbe"]["exec"] == container["livenessProbe"]["exec"]
        assert _run_probe(container) == 0
    finally:
        server.shutdown()
        server.server_close()
    silent = _container(_detection(tmp_path, f"{{serve: '127.0.0.1:{_free_port()}'}}"))
    assert _run_probe(silent) != 0
    assert "ports" not in silent  # loopback only: nothing for the pod's network


def test_a_serve_on_every_address_is_a_named_port(tmp_path):
    container = _container(_detection(tmp_path, "{serve: '0.0.0.0:8080', serve_token: t}"))
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert "http://127.0.0.1:8080/healthz" in container["livenessProbe"]["exec"]["command"][2]
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert "/var/lib/edgefuse/boxes" in writable  # the JSON Lines sink's folder
