"""The chart's --kubernetes mode (docs/kubernetes.md): the pod-resources socket mount, the RBAC
and hostPID render only when enabled; lint, kubernetes-validate --strict and the exporter's own
config loader accept what it renders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.deploy.deploy_helpers import (
    CHART,
    CRD_KINDS,
    KUBERNETES_VERSION,
    ROOT,
    by_kind,
    one,
    pod_security_violations,
    render,
    render_raw,
    run,
    tool,
)

ON: dict[str, Any] = {"kubernetes": {"enabled": True, "podLabels": ["team", "app.kubernetes.io/name"], "gpuSeriesLabels": True}}
KUBELET: dict[str, Any] = {"kubernetes": {"enabled": True, "discovery": {"from": "kubelet", "tlsVerify": False}}}
NON_ROOT: dict[str, Any] = {
    "kubernetes": {"enabled": True, "podResources": {"runAsRoot": False}, "discovery": {"enabled": False}}
}
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return pod


def _validate(docs: list[dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "core.yaml"
    path.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] not in CRD_KINDS], sort_keys=False))
    result = run(tool("kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, "--quiet", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", [ON, KUBELET, NON_ROOT], ids=["apiserver", "kubelet", "non-root"])
def test_lint_and_kubernetes_validate_pass(values: dict[str, Any], tmp_path: Path) -> None:
    report = helm_python.lint(CHART, values, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []
    _validate(render(values), tmp_path)


def test_nothing_of_it_renders_unless_enabled() -> None:
    docs = render()
    assert not RBAC_KINDS & {d["kind"] for d in docs}
    pod = _pod(docs)
    assert "hostPID" not in pod and "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False
    assert not any("hostPath" in v for v in pod["volumes"])
    container = pod["containers"][0]
    assert not any("pod-resources" in m["mountPath"] for m in container["volumeMounts"])
    assert not any(a.startswith("--kubernetes") for a in container["args"])
    config = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-config"))
    assert "kubernetes" not in yaml.safe_load(config["data"]["config.yaml"])


def test_enabled_renders_the_socket_mount_rbac_and_host_pid() -> None:
    docs = render(ON)
    pod = _pod(docs)
    assert pod["hostPID"] is True
    assert pod["automountServiceAccountToken"] is True
    account = one(docs, "ServiceAccount")
    assert pod["serviceAccountName"] == account["metadata"]["name"] and account["metadata"]["namespace"] == "monitoring"
    volume = next(v for v in pod["volumes"] if v["name"] == "llm-exporter-pod-resources")
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "llm-exporter-pod-resources")
    assert mount == {"name": "llm-exporter-pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    role = one(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "monitoring"}]


def test_kubelet_discovery_asks_for_nodes_proxy_and_the_kubelets_url() -> None:
    docs = render(KUBELET)
    assert one(docs, "ClusterRole")["rules"] == [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]
    assert "--kubernetes-pods-url=https://$(NODE_IP):10250/pods" in _pod(docs)["containers"][0]["args"]


def test_the_exceptions_to_the_restricted_profile_are_exactly_these() -> None:
    assert pod_security_violations(_pod(render(ON))) == [
        "hostPID: true",
        "volume llm-exporter-pod-resources: type ['hostPath'] not allowed",
        "llm-layer-exporter: runAsNonRoot is not true",
        "llm-layer-exporter: runAsUser 0",
    ]
    container = _pod(render(ON))["containers"][0]["securityContext"]
    assert container["capabilities"] == {"drop": ["ALL"]} and container["allowPrivilegeEscalation"] is False
    assert pod_security_violations(_pod(render(NON_ROOT))) == [
        "hostPID: true",
        "volume llm-exporter-pod-resources: type ['hostPath'] not allowed",
    ]


def test_existing_service_account_and_no_rbac() -> None:
    docs = render(
        {"kubernetes": {"enabled": True, "rbac": {"create": False}, "serviceAccount": {"create": False, "name": "gpu-reader"}}}
    )
    assert not RBAC_KINDS & {d["kind"] for d in docs}
    assert _pod(docs)["serviceAccountName"] == "gpu-reader"


BAD = [
    ({"kubernetes": {"enabled": True, "podLabels": [f"l{i}" for i in range(9)]}}, "podLabels"),
    ({"kubernetes": {"podLabels": ["a/b/c"]}}, "podLabels"),
    ({"kubernetes": {"discovery": {"from": "etcd"}}}, "from"),
    ({"kubernetes": {"enable": True}}, "enable"),
    ({"kubernetes": {"podResources": {"hostPath": "relative"}}}, "hostPath"),
]


@pytest.mark.parametrize(("values", "where"), BAD, ids=[w for _, w in BAD])
def test_schema_rejects_bad_kubernetes_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as err:
        render_raw(values)
    assert where in str(err.value)


def test_sidecar_mode_refuses_it() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="daemonset mode only"):
        render_raw({"mode": "sidecar", "sidecar": {"podSelector": {"app": "x"}}, "kubernetes": {"enabled": True}})


def test_the_exporter_accepts_what_the_chart_writes(tmp_path: Path) -> None:
    from exporter.cli import build_parser
    from exporter.config import load_config

    docs = render(ON)
    container = _pod(docs)["containers"][0]
    config_map = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-config"))
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    args = [a.replace("$(NODE_IP)", "10.0.0.7") for a in container["args"]]
    args = [f"--config={path}" if a.startswith("--config=") else a for a in args]
    cfg = load_config(build_parser(args).parse_args(args), environ={"NODE_NAME": "gpu-node-1"})
    k = cfg.kubernetes
    assert k is not None
    assert k.enabled and k.discovers and k.gpu_labels and k.node_name == "gpu-node-1"
    assert k.pod_resources_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert k.pod_labels == (("team", "label_team"), ("app.kubernetes.io/name", "label_app_kubernetes_io_name"))
    assert (k.interval, k.discovery_interval, k.process_sampler, k.pods_url) == (10, 30, True, "")
    kubelet = render(KUBELET)
    kargs = [a.replace("$(NODE_IP)", "10.0.0.7") for a in _pod(kubelet)["containers"][0]["args"]]
    kmap = next(d for d in by_kind(kubelet, "ConfigMap") if d["metadata"]["name"].endswith("-config"))
    path.write_text(kmap["data"]["config.yaml"])
    kargs = [f"--config={path}" if a.startswith("--config=") else a for a in kargs]
    kk = load_config(build_parser(kargs).parse_args(kargs), environ={"NODE_NAME": "gpu-node-1"}).kubernetes
    assert kk is not None
    assert kk.pods_url == "https://10.0.0.7:10250/pods" and kk.tls_verify is False


def test_the_annotations_are_documented() -> None:
    keys = (
        "llm-layer-exporter.io/scrape",
        "llm-layer-exporter.io/port",
        "llm-layer-exporter.io/path",
        "llm-layer-exporter.io/engine",
    )
    notes = render_raw(ON)["llm-layer-exporter/templates/NOTES.txt"]
    for text in (notes, (ROOT / "docs" / "kubernetes.md").read_text(), (CHART / "values.yaml").read_text()):
        for key in keys:
            assert key in text
