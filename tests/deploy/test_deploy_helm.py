"""The Helm chart, rendered and linted by Helm's own Go code (helm-python-sdk 0.2.2 wraps
the Helm v4 SDK), its core objects validated by kubernetes-validate --strict, its
prometheus-operator objects checked structurally and with promtool, its config file read
by the exporter's own config loader."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import helm_python
import pytest
import yaml

from tests.deploy.deploy_helpers import (
    CHART,
    CRD_KINDS,
    KUBERNETES_VERSION,
    ROOT,
    SIDECAR_EXAMPLE,
    by_kind,
    dashboard_sources,
    one,
    pod_security_violations,
    render,
    render_raw,
    run,
    sidecar_parent,
    tool,
)

TOKEN = {"name": "vllm-metrics-token", "key": "token"}

VARIANTS: dict[str, dict[str, Any] | None] = {
    "default": None,
    "daemonset": {
        "mode": "daemonset",
        "hostPID": True,
        "gpu": {"source": "dcgm:$(NODE_IP):5555", "runtimeClassName": "nvidia", "interval": 2},
        "engines": [
            {
                "url": "http://vllm.inference.svc:8000/metrics",
                "name": "llama",
                "type": "vllm",
                "process": "vllm",
                "bearerTokenSecret": TOKEN,
            },
            {
                "url": "https://sglang.inference.svc:30000",
                "name": "sglang",
                "type": "sglang",
                "tlsVerify": True,
                "caBundleConfigMap": {"name": "serving-ca", "key": "ca.crt"},
                "interval": 10,
                "maxSeries": 5000,
            },
            {
                "url": "http://tgi.inference.svc:8080/metrics",
                "name": "tgi",
                "type": "tgi",
                "followRedirects": True,
                "basicAuth": {"username": "scraper", "passwordSecret": {"name": "tgi-auth", "key": "password"}},
                "probe": {"interval": "15s", "max_tokens": 8, "timeout": "10s"},
            },
        ],
        "groups": {"tp0": [0, 1], "tp1": [2, 3]},
        "diagnosis": {"slo_ttft_p95_seconds": 0.5, "kv_usage_full": 0.85},
        "metrics": {"exclude": ["llm_gpu_throttle_*", "llm_gpu_energy_joules_total"]},
        "extraArgs": ["--log-level=debug"],
    },
    "sidecar": {
        "mode": "sidecar",
        "sidecar": {"podSelector": {"app.kubernetes.io/name": "vllm"}},
        "engines": [{"url": "http://127.0.0.1:8000/metrics", "name": "vllm", "process": "vllm"}],
        "podMonitor": {"enabled": True},
    },
    "with-monitoring": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboards": {"enabled": True, "annotations": {"grafana_folder": "LLM"}},
        "engines": [{"url": "http://vllm.inference.svc:8000/metrics", "name": "vllm"}],
    },
}


def _kinds(docs: list[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs}


# --------------------------------------------------------------------------- lint and schema


@pytest.mark.parametrize("variant", VARIANTS)
def test_lint_strict_has_no_findings_above_info(variant: str) -> None:
    report = helm_python.lint(CHART, VARIANTS[variant], strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


BAD_VALUES = [
    ({"mode": "foo"}, "/mode"),
    ({"mode": "sidecar"}, "podSelector"),
    ({"mode": "sidecar", "sidecar": {"podSelector": {}}}, "podSelector"),
    ({"engines": [{"name": "no-url"}]}, "url"),
    ({"engines": [{"url": "vllm:8000"}]}, "/engines/0/url"),
    ({"engines": [{"url": "http://a:1", "type": "ollama"}]}, "/engines/0/type"),
    ({"engines": [{"url": "http://a:1", "bearerTokenSecret": {"name": "x"}}]}, "key"),
    ({"engines": [{"url": "http://a:1", "interval": 0.01}]}, "interval"),
    ({"engines": [{"url": "http://a:1", "basicAuth": {"username": "u"}}]}, "passwordSecret"),
    ({"engines": [{"url": "http://a:1", "probe": {"api": "grpc"}}]}, "probe"),
    ({"engines": [{"url": "http://a:1", "bearer_token_file": "/x"}]}, "bearer_token_file"),
    ({"gpu": {"source": "cuda"}}, "/gpu/source"),
    ({"gpu": {"dcgmExporterUrl": "gpu-node:9400"}}, "/gpu/dcgmExporterUrl"),
    ({"port": "9750"}, "/port"),
    ({"diagnosis": {"slo_ttft_p95_seconds": "fast"}}, "slo_ttft_p95_seconds"),
    ({"metrics": {"exclude": ["llm gpu"]}}, "/metrics/exclude/0"),
    ({"metrics": {"exclude": "llm_gpu_*"}}, "/metrics/exclude"),
    ({"serviceMonitor": {"interval": "15 seconds"}}, "/serviceMonitor/interval"),
    ({"replicas": 3}, "replicas"),
    ({"probes": {"scheme": "TCP"}}, "/probes/scheme"),
]


@pytest.mark.parametrize(("values", "where"), BAD_VALUES, ids=[w for _, w in BAD_VALUES])
def test_schema_rejects_bad_values(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as err:
        render_raw(values)
    assert where in str(err.value)
    report = helm_python.lint(CHART, values)
    assert report["errors"], "lint must report the schema violation too"


def test_schema_is_strict_at_every_object_level() -> None:
    """Every object of the schema with named properties refuses unknown keys (free-form
    Kubernetes passthroughs such as affinity are typed "object" without properties)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    loose: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if "properties" in node and node.get("type") == "object" and node.get("additionalProperties") is not False:
                loose.append(path or "/")
            for key, child in node.items():
                walk(child, f"{path}/{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{path}/{i}")

    walk(schema, "")
    assert loose == []
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) <= set(schema["properties"])


# --------------------------------------------------------------------------- what each mode renders


def test_default_is_a_daemonset_with_config_and_service_only() -> None:
    docs = render()
    assert _kinds(docs) == {"DaemonSet", "ConfigMap", "Service"}
    assert len(by_kind(docs, "ConfigMap")) == 1


def test_sidecar_mode_renders_no_workload() -> None:
    docs = render(VARIANTS["sidecar"])
    assert _kinds(docs) == {"ConfigMap", "Service", "PodMonitor"}
    service = one(docs, "Service")
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "vllm"}
    assert one(docs, "PodMonitor")["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "vllm"}


def test_monitoring_objects_are_switched_by_their_values() -> None:
    docs = render(VARIANTS["with-monitoring"])
    assert {"ServiceMonitor", "PrometheusRule"} <= _kinds(docs)
    assert "PodMonitor" not in _kinds(docs)
    dashboards = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["labels"].get("grafana_dashboard") == "1"]
    assert dashboards, "dashboards.enabled renders the dashboard ConfigMaps"
    for key in ("serviceMonitor", "prometheusRule", "dashboards"):
        off = dict(cast(dict[str, Any], VARIANTS["with-monitoring"]))
        off[key] = {"enabled": False}
        kinds = [d["kind"] for d in render(off)]
        if key == "dashboards":
            assert kinds.count("ConfigMap") == 1
        else:
            assert {"serviceMonitor": "ServiceMonitor", "prometheusRule": "PrometheusRule"}[key] not in kinds


def test_service_and_pod_monitor_together_are_refused() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="pick one"):
        render_raw({"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}})


def test_service_monitor_needs_the_service() -> None:
    with pytest.raises(helm_python.HelmRenderError, match="service.enabled"):
        render_raw({"serviceMonitor": {"enabled": True}, "service": {"enabled": False}})


# --------------------------------------------------------------------------- validation


def _core(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] not in CRD_KINDS]


def _kubernetes_validate(docs: list[dict[str, Any]], tmp_path: Path) -> None:
    path = tmp_path / "core.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    result = run(tool("kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, "--quiet", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_core_objects_pass_kubernetes_validate_strict(variant: str, tmp_path: Path) -> None:
    core = _core(render(VARIANTS[variant]))
    assert core
    _kubernetes_validate(core, tmp_path)


def test_kubernetes_validate_catches_a_broken_object(tmp_path: Path) -> None:
    """The validator is not a no-op on what we feed it."""
    ds = one(render(), "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = "yes"
    with pytest.raises(AssertionError):
        _kubernetes_validate([ds], tmp_path)


DURATION = r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"


def _check_scrape_endpoint(ep: dict[str, Any], values_jobname: str = "llm-layer-exporter") -> None:
    import re

    assert set(ep) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "tlsConfig", "relabelings", "metricRelabelings"}
    assert ep["port"] == "llm-exporter" and ep["path"] == "/metrics" and ep["scheme"] in ("http", "https")
    assert re.match(DURATION, ep["interval"]) and re.match(DURATION, ep["scrapeTimeout"])
    job = [r for r in ep["relabelings"] if r.get("targetLabel") == "job"]
    assert job == [{"action": "replace", "targetLabel": "job", "replacement": values_jobname}]
    for r in ep["relabelings"]:
        assert r["action"] in (
            "replace",
            "keep",
            "drop",
            "labelmap",
            "labeldrop",
            "labelkeep",
            "hashmod",
            "lowercase",
            "uppercase",
        )


@pytest.mark.parametrize("variant", ["with-monitoring", "sidecar"])
def test_prometheus_operator_objects_are_well_formed(variant: str) -> None:
    docs = render(VARIANTS[variant])
    crds = [d for d in docs if d["kind"] in CRD_KINDS]
    assert crds
    workload_ports = {
        p["name"] for d in by_kind(docs, "DaemonSet") for c in d["spec"]["template"]["spec"]["containers"] for p in c["ports"]
    }
    for obj in crds:
        assert obj["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
        assert obj["metadata"]["name"] and obj["metadata"]["namespace"] == "monitoring"
        spec = obj["spec"]
        if obj["kind"] == "ServiceMonitor":
            assert set(spec) == {"selector", "namespaceSelector", "endpoints"}
            service = one(docs, "Service")
            assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
            assert [p["name"] for p in service["spec"]["ports"]] == ["llm-exporter"]
            for ep in spec["endpoints"]:
                _check_scrape_endpoint(ep)
        elif obj["kind"] == "PodMonitor":
            assert set(spec) == {"selector", "namespaceSelector", "podMetricsEndpoints"}
            for ep in spec["podMetricsEndpoints"]:
                _check_scrape_endpoint(ep)
        else:
            assert set(spec) == {"groups"}
        if workload_ports:
            assert "llm-exporter" in workload_ports


def test_prometheus_rule_passes_promtool(tmp_path: Path) -> None:
    rule = one(render(VARIANTS["with-monitoring"]), "PrometheusRule")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    result = run(tool("promtool"), "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- rules and dashboards equal their sources


def _rule_sources() -> list[Path]:
    files = sorted((ROOT / "alerts").glob("*_rules.yml"))
    assert files, "alerts/*_rules.yml missing"
    return files


def test_prometheus_rule_groups_equal_alerts() -> None:
    rule = one(render(VARIANTS["with-monitoring"]), "PrometheusRule")
    expected = [g for f in _rule_sources() for g in yaml.safe_load(f.read_text())["groups"]]
    assert rule["spec"]["groups"] == expected
    # the alert templates in annotations ({{ $labels.x }}) survive Helm untouched
    assert "{{ $labels." in "".join(f.read_text() for f in _rule_sources())
    assert "{{ $labels." in json.dumps(rule["spec"]["groups"])


def test_dashboard_configmaps_equal_dashboards() -> None:
    sources = {p.name: p.read_bytes().decode("utf-8") for p in dashboard_sources()}
    assert sources, "no dashboards to compare"
    maps = [
        d for d in by_kind(render(VARIANTS["with-monitoring"]), "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]
    ]
    rendered: dict[str, str] = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"] == {"grafana_folder": "LLM"}
        assert len(cm["data"]) == 1
        rendered.update(cm["data"])
    assert rendered.keys() == sources.keys()
    for name, text in sources.items():
        assert rendered[name] == text, f"{name}: the ConfigMap differs from the dashboard"
        json.loads(rendered[name])


# --------------------------------------------------------------------------- security and GPU access


def _pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return pod


def test_daemonset_meets_the_restricted_pod_security_profile() -> None:
    pod = _pod(render())
    assert pod_security_violations(pod) == []
    assert pod["automountServiceAccountToken"] is False
    container = pod["containers"][0]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]


def test_host_pid_is_the_only_exception_and_only_when_asked() -> None:
    pod = _pod(render(VARIANTS["daemonset"]))
    assert pod_security_violations(pod) == ["hostPID: true"]


def test_the_checker_sees_what_it_should() -> None:
    # null removes a default in Helm's value merge
    unset = dict.fromkeys(
        ("runAsNonRoot", "seccompProfile", "capabilities", "allowPrivilegeEscalation", "readOnlyRootFilesystem")
    )
    pod = _pod(
        render(
            {
                "securityContext": {**unset, "privileged": True},
                "podSecurityContext": {"runAsNonRoot": None, "seccompProfile": None},
            }
        )
    )
    found = pod_security_violations(pod)
    assert "llm-layer-exporter: privileged" in found
    assert "llm-layer-exporter: runAsNonRoot is not true" in found
    assert any("seccompProfile" in f for f in found) and any("ALL" in f for f in found)


def test_gpu_access_without_privileges_or_gpu_requests() -> None:
    pod = _pod(render(VARIANTS["daemonset"]))
    container = pod["containers"][0]
    assert pod["runtimeClassName"] == "nvidia"
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    # taking nvidia.com/gpu would take the GPUs away from the inference servers
    for section in ("requests", "limits"):
        assert not any("nvidia.com" in k for k in container["resources"].get(section, {}))
    default_pod = _pod(render())
    assert "runtimeClassName" not in default_pod and "hostPID" not in default_pod


# --------------------------------------------------------------------------- the exporter reads what the chart writes


def _serve_args(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The container's args after Kubernetes' $(VAR) expansion."""
    out = []
    for arg in container["args"]:
        for key, value in env.items():
            arg = arg.replace(f"$({key})", value)
        out.append(arg)
    return out


def test_config_file_and_args_are_accepted_by_the_exporter(tmp_path: Path) -> None:
    from exporter.cli import build_parser
    from exporter.config import load_config
    from exporter.diagnosis.thresholds import Thresholds

    docs = render(VARIANTS["daemonset"])
    pod = _pod(docs)
    container = pod["containers"][0]
    config_map = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-config"))
    text = config_map["data"]["config.yaml"]

    # Lay the pod's mounts out under tmp_path: the config volume and the engine files.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["llm-exporter-config"]["configMap"]["name"] == config_map["metadata"]["name"]
    config_dir = tmp_path / mounts["llm-exporter-config"].lstrip("/")
    config_dir.mkdir(parents=True)
    for name, mount in mounts.items():
        projected = volumes[name].get("projected")
        for source in (projected or {}).get("sources", []):
            for item in next(iter(source.values()))["items"]:
                path = tmp_path / mount.lstrip("/") / item["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("secret-or-ca\n")
    (config_dir / "config.yaml").write_text(text.replace(": /etc/", f": {tmp_path}/etc/"))

    args = _serve_args(container, {"NODE_IP": "10.0.0.7", "NODE_NAME": "gpu-node-1"})
    assert args[0] == "serve"
    args = [a.replace("--config=/etc/", f"--config={tmp_path}/etc/") for a in args]
    parsed = build_parser(args).parse_args(args)
    cfg = load_config(parsed, environ={})
    assert cfg.gpu_source == "dcgm:10.0.0.7:5555"
    assert cfg.port == 9750 and cfg.gpu_interval == 2 and cfg.log_level == "debug"
    llama, sglang, tgi = cfg.engines
    assert (llama.name, llama.type, llama.process) == ("llama", "vllm", "vllm")
    assert llama.bearer_token_file and Path(llama.bearer_token_file).read_text() == "secret-or-ca\n"
    assert sglang.ca_bundle and Path(sglang.ca_bundle).is_file() and sglang.bearer_token_file is None
    assert sglang.url == "https://sglang.inference.svc:30000/metrics" and sglang.interval == 10 and sglang.max_series == 5000
    assert tgi.follow_redirects and tgi.basic_auth_username == "scraper" and tgi.bearer_token_file is None
    assert tgi.basic_auth_password_file and Path(tgi.basic_auth_password_file).read_text() == "secret-or-ca\n"
    assert tgi.probe is not None and tgi.probe.interval == 15 and tgi.probe.max_tokens == 8 and llama.probe is None
    assert "tgi-auth" not in text and "secret-or-ca" not in text  # the config names the file, never the secret
    assert cfg.groups == {"tp0": [0, 1], "tp1": [2, 3]}
    thresholds = Thresholds.from_mapping(cfg.diagnosis)
    assert thresholds.slo_ttft_p95_seconds == 0.5 and thresholds.kv_usage_full == 0.85
    assert cfg.metrics.exclude == ("llm_gpu_throttle_*", "llm_gpu_energy_joules_total") and cfg.metrics.include == ()


def test_the_nodes_dcgm_exporter_is_read_through_the_charts_environment() -> None:
    """gpu.dcgmExporterUrl becomes LLM_EXPORTER_DCGM_EXPORTER_URL (after $(NODE_IP)), which the
    exporter's config reads and ``auto`` turns into the dcgm-exporter source, here against a fake
    dcgm-exporter serving a recorded H200 row."""
    from exporter.cli import build_parser
    from exporter.config import load_config
    from exporter.gpu import build_gpu_source
    from exporter.gpu.dcgm_exporter import DcgmExporterSource
    from exporter.gpu.replay import bundled_trace, parse_trace
    from tests.support.dcgm_exporter_text import GpuRow
    from tests.support.dcgm_exporter_text import render as dcgm_text
    from tests.support.fake_engine import FakeEngine

    docs = render({"gpu": {"dcgmExporterUrl": "http://$(NODE_IP):9400"}})
    container = _pod(docs)["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    names = [e["name"] for e in container["env"]]
    # Kubernetes expands $(NODE_IP) only from variables defined before it
    assert names.index("NODE_IP") < names.index("LLM_EXPORTER_DCGM_EXPORTER_URL")
    assert "--gpu-source=auto" in container["args"]
    path = bundled_trace("serving")
    reading = parse_trace(path.read_text(encoding="utf-8"), str(path))[100]
    with FakeEngine(dcgm_text([GpuRow(reading)])) as fake:
        # the fake stands where the node's dcgm-exporter is: NODE_IP 127.0.0.1, its port
        url = env["LLM_EXPORTER_DCGM_EXPORTER_URL"].replace("$(NODE_IP):9400", f"127.0.0.1:{fake.port}")
        args = ["serve", "--gpu-source=auto"]
        cfg = load_config(build_parser(args).parse_args(args), environ={"LLM_EXPORTER_DCGM_EXPORTER_URL": url})
        source = build_gpu_source(cfg.gpu_source, cfg.gpu_interval, cfg.gpu_timeout, dcgm_exporter_url=cfg.dcgm_exporter_url)
        assert isinstance(source, DcgmExporterSource)
        points = source.sample().points
    info = [p.labels for p in points if p.name == "llm_gpu_info"]
    assert info == [{"gpu": "0", "uuid": reading["uuid"], "name": "NVIDIA H200", "source": "dcgm-exporter"}]


def test_a_dcgm_exporter_gpu_source_is_passed_as_the_containers_argument() -> None:
    """gpu.source dcgm-exporter:URL (the chart's other way to name the node's dcgm-exporter) reaches the
    container as --gpu-source, where Kubernetes expands $(NODE_IP) and the exporter reads it as that source."""
    from exporter.gpu import parse_spec

    docs = render({"gpu": {"source": "dcgm-exporter:http://$(NODE_IP):9400"}})
    container = _pod(docs)["containers"][0]
    args = [a for a in container["args"] if a.startswith("--gpu-source=")]
    assert args == ["--gpu-source=dcgm-exporter:http://$(NODE_IP):9400"]
    names = [e["name"] for e in container["env"]]
    assert "NODE_IP" in names and "LLM_EXPORTER_DCGM_EXPORTER_URL" not in names
    expanded = args[0].split("=", 1)[1].replace("$(NODE_IP)", "10.0.0.7")
    assert parse_spec(expanded) == ("dcgm-exporter", "http://10.0.0.7:9400/metrics")


def test_default_slos_agree_with_the_alerts() -> None:
    """alerts/config.yaml says: keep the diagnosis SLOs equal to the alert SLOs."""
    from exporter.diagnosis.thresholds import Thresholds

    slo = yaml.safe_load((ROOT / "alerts" / "config.yaml").read_text())["slo"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for diagnosis in (
        values["diagnosis"],
        yaml.safe_load((ROOT / "deploy" / "compose" / "exporter.yml").read_text())["diagnosis"],
    ):
        t = Thresholds.from_mapping(diagnosis)
        assert (t.slo_ttft_p95_seconds, t.slo_itl_p95_seconds) == (slo["ttft_seconds"], slo["itl_seconds"])


def test_job_name_is_the_alerts_exporter_job() -> None:
    job = yaml.safe_load((ROOT / "alerts" / "config.yaml").read_text())["exporter_job"]
    assert yaml.safe_load((CHART / "values.yaml").read_text())["jobName"] == job


def test_chart_app_version_is_the_package_version() -> None:
    # the [project] table's version line (tomllib is 3.11+, and mypy checks as 3.10)
    found = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert found is not None, "pyproject.toml has no version line"
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["appVersion"] == found.group(1)


# --------------------------------------------------------------------------- the sidecar example


def test_sidecar_example_renders_and_validates(tmp_path: Path) -> None:
    parent = sidecar_parent(tmp_path)
    docs = render(chart=parent, name="demo", namespace="ml")
    assert "DaemonSet" not in _kinds(docs)
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    names = [c["name"] for c in pod["containers"]]
    assert names == ["vllm", "llm-layer-exporter"]
    sidecar = pod["containers"][1]
    assert "readinessProbe" not in sidecar, "a sidecar's readiness would gate the serving pod"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert not any(e["name"] == "NVIDIA_VISIBLE_DEVICES" for e in sidecar["env"]), "the pod's own GPUs, not all of them"
    assert {v["name"] for v in pod["volumes"]} == {m["name"] for m in sidecar["volumeMounts"]}
    assert pod_security_violations(pod, containers=["llm-layer-exporter"]) == []
    config = next(d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-config"))
    assert {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} == {config["metadata"]["name"]}
    monitor = one(docs, "PodMonitor")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert {"PrometheusRule"} <= _kinds(docs)
    _kubernetes_validate(_core(docs), tmp_path)


def test_sidecar_template_refuses_daemonset_mode(tmp_path: Path) -> None:
    parent = sidecar_parent(tmp_path)
    with pytest.raises(helm_python.HelmRenderError, match="mode: sidecar"):
        render_raw({"llm-layer-exporter": {"mode": "daemonset"}}, chart=parent)


def test_docs_show_the_sidecar_example_verbatim() -> None:
    docs = (ROOT / "docs" / "deployment.md").read_text()
    for rel in ("templates/deployment.yaml", "values.yaml"):
        text = (SIDECAR_EXAMPLE / rel).read_text()
        assert text.strip() in docs, f"docs/deployment.md does not show deploy/examples/helm-sidecar/{rel} as it is"
