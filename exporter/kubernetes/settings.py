"""The --kubernetes settings: flags > LLM_EXPORTER_* environment > the ``kubernetes:`` config section.

Why a module of its own: exporter/config.py keeps one small hook
(``add_arguments`` and ``load``), so the Kubernetes options live, parse and fail
here with the same one-line, exit-status-2 errors as every other setting.

Flags (environment ``LLM_EXPORTER_<DEST>``, config file ``kubernetes: {<key>: ...}``):

========================================  ======================  =====================================
flag                                      config key              meaning
========================================  ======================  =====================================
``--kubernetes``                          ``enabled``             DaemonSet mode: GPU -> pod attribution and serving-pod discovery
``--kubernetes-pod-labels``               ``pod_labels``          pod labels to copy (comma-separated allow-list, at most 8)
``--kubernetes-gpu-labels``               ``gpu_labels``          also put namespace/pod/container on the GPU series
``--kubernetes-pod-resources-socket``     ``pod_resources_socket`` the kubelet's PodResources socket
``--kubernetes-pods-url``                 ``pods_url``            "" API server (default), a kubelet ``/pods`` URL, or ``none``
``--kubernetes-pods-max-bytes``           ``pods_max_bytes``      largest pod list read, in bytes (default 8 MiB; over it: ``too_large``)
``--kubernetes-node-name``                ``node_name``           this node (default ``$NODE_NAME``)
``--kubernetes-discovery``                ``discovery``           discover annotated serving pods (default true)
``--kubernetes-discovery-interval``       ``discovery_interval``  seconds between pod-list refreshes (default 30)
``--kubernetes-interval``                 ``interval``            seconds between GPU attribution samples (default 10)
``--kubernetes-process-sampler``          ``process_sampler``     per-thread CPU of discovered pods' processes (default true; needs hostPID)
``--kubernetes-proc-root``                ``proc_root``           where the host's processes are (default /proc)
``--kubernetes-tls-verify``               ``tls_verify``          verify the API server's / kubelet's certificate (default true)
``--kubernetes-token-file``               ``token_file``          service-account token (default: the mounted one)
``--kubernetes-ca-file``                  ``ca_file``             CA bundle (default: the mounted one)
========================================  ======================  =====================================

Pod labels become ``label_<name>`` Prometheus labels (``app.kubernetes.io/name`` ->
``label_app_kubernetes_io_name``, as kube-state-metrics names them) on
``llm_gpu_pod_info``, ``llm_gpu_process_memory_used_bytes`` and, with
``--kubernetes-gpu-labels``, the GPU series. Never all labels: an allow-list of at
most ``MAX_POD_LABELS``, and start-up fails if any series would reach
``MAX_SERIES_LABELS`` labels counting ``__name__`` and the ``TARGET_LABELS`` a scrape adds.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.errors import UsageError
from exporter.kubernetes.podresources import DEFAULT_SOCKET
from exporter.kubernetes.pods import DEFAULT_CA_FILE, DEFAULT_TOKEN_FILE
from exporter.schema import GPU_LABELS, KUBERNETES_ENGINE_LABELS, KUBERNETES_POD_LABELS, SPECS, extend_labels
from exporter.values import (
    ENV_PREFIX,
    boolean,
    interval_seconds,
    parsed,
    positive_int,
    redacted_url,
    section_keys,
    shown,
    string,
)

MAX_POD_LABELS = 8
#: --kubernetes-pods-max-bytes: default (exporter/kubernetes/pods.py MAX_BODY_BYTES) and range
DEFAULT_PODS_MAX_BYTES = 8 * 1024 * 1024
MIN_PODS_MAX_BYTES, MAX_PODS_MAX_BYTES = 64 * 1024, 256 * 1024 * 1024
#: Prometheus' per-series label limit the issue keeps every series under
MAX_SERIES_LABELS = 20
#: labels a scrape adds: job, instance and the chart's node relabeling
TARGET_LABELS = 3
INFO = "llm_gpu_pod_info"
PROCESS_MEMORY = "llm_gpu_process_memory_used_bytes"
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass
class KubernetesConfig:
    """Every --kubernetes setting, parsed."""

    enabled: bool = False
    #: (pod label key, Prometheus label name), in the order given
    pod_labels: tuple[tuple[str, str], ...] = ()
    gpu_labels: bool = False
    pod_resources_socket: str = DEFAULT_SOCKET
    #: "" = the API server in-cluster; a URL = the kubelet's /pods; "none" = no pod list
    pods_url: str = ""
    #: largest pod list read (exporter/kubernetes/pods.py MAX_BODY_BYTES)
    pods_max_bytes: int = DEFAULT_PODS_MAX_BYTES
    node_name: str = ""
    discovery: bool = True
    discovery_interval: float = 30.0
    interval: float = 10.0
    process_sampler: bool = True
    proc_root: str = "/proc"
    tls_verify: bool = True
    token_file: str = DEFAULT_TOKEN_FILE
    ca_file: str = DEFAULT_CA_FILE

    @property
    def pod_list(self) -> bool:
        """Whether a pod list is read at all (discovery and per-process attribution need it)."""
        return self.pods_url != "none"

    @property
    def discovers(self) -> bool:
        return self.enabled and self.discovery and self.pod_list

    def label_plan(self) -> dict[str, tuple[str, ...]]:
        """metric name -> the labels this configuration adds to it."""
        copied = tuple(name for _, name in self.pod_labels)
        plan: dict[str, tuple[str, ...]] = {}
        if not self.enabled:
            return plan
        if self.discovers:
            for s in SPECS.values():
                if s.origin in ("engine", "process"):
                    plan[s.name] = KUBERNETES_ENGINE_LABELS
        if copied:
            plan[INFO] = copied
            plan[PROCESS_MEMORY] = copied
        if self.gpu_labels:
            for name in gpu_series_names():
                plan[name] = KUBERNETES_POD_LABELS + copied
        return plan

    def apply_labels(self) -> Callable[[], None]:
        """Extend the schema as ``label_plan`` says (at start-up); returns the undo."""
        undos = [extend_labels([name], extra) for name, extra in self.label_plan().items()]

        def undo() -> None:
            for u in reversed(undos):
                u()

        return undo


def gpu_series_names() -> list[str]:
    """The GPU series --kubernetes-gpu-labels labels: every metric keyed by (gpu, uuid) but ours."""
    return [s.name for s in SPECS.values() if s.labels[: len(GPU_LABELS)] == GPU_LABELS and s.name not in (INFO, PROCESS_MEMORY)]


def prometheus_label(key: str) -> str:
    """``app.kubernetes.io/name`` -> ``label_app_kubernetes_io_name`` (kube-state-metrics' naming)."""
    return "label_" + re.sub(r"[^A-Za-z0-9_]", "_", key)


def pod_label_keys(value: Any) -> tuple[tuple[str, str], ...]:
    """A comma-separated string or a list of Kubernetes label keys -> (key, Prometheus name) pairs."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value if v.strip()]
    else:
        raise ValueError(f"expected a comma-separated list of pod label keys, got {shown(value)}")
    out: list[tuple[str, str]] = []
    names: dict[str, str] = {}
    for key in items:
        prefix, sep, name = key.rpartition("/")
        if not _LABEL_NAME.match(name) or (sep and (not prefix or len(prefix) > 253 or not _LABEL_PREFIX.match(prefix))):
            raise ValueError(f"{shown(key)} is not a Kubernetes label key ([prefix/]name)")
        label = prometheus_label(key)
        if label in names and names[label] != key:
            raise ValueError(f"{names[label]!r} and {key!r} both become the label {label}")
        if label not in names:
            names[label] = key
            out.append((key, label))
    if len(out) > MAX_POD_LABELS:
        raise ValueError(f"at most {MAX_POD_LABELS} pod labels (an allow-list, never all of them), got {len(out)}")
    return tuple(out)


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a path, got {shown(value)}")
    return value.strip()


def _pods_url(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected an http(s) URL, none, or empty, got {shown(value)}")
    text = value.strip()
    if text in ("", "none", "apiserver"):
        return "" if text == "apiserver" else text
    if not re.match(r"^https?://[^/\s]+(/\S*)?$", text):
        raise ValueError(
            f"expected an http(s) URL (the kubelet's /pods), none, or empty for the API server, got {redacted_url(value)}"
        )
    return text


def _pods_max_bytes(value: Any) -> int:
    n = positive_int(value)
    if not MIN_PODS_MAX_BYTES <= n <= MAX_PODS_MAX_BYTES:
        raise ValueError(f"expected {MIN_PODS_MAX_BYTES} to {MAX_PODS_MAX_BYTES} bytes, got {n}")
    return n


#: config key -> its value parser
PARSERS: dict[str, Callable[[Any], Any]] = {
    "enabled": boolean,
    "pod_labels": pod_label_keys,
    "gpu_labels": boolean,
    "pod_resources_socket": _path,
    "pods_url": _pods_url,
    "pods_max_bytes": _pods_max_bytes,
    "node_name": string,
    "discovery": boolean,
    "discovery_interval": interval_seconds,
    "interval": interval_seconds,
    "process_sampler": boolean,
    "proc_root": _path,
    "tls_verify": boolean,
    "token_file": _path,
    "ca_file": _path,
}


#: config key -> (flag, help)
FLAGS: dict[str, tuple[str, str]] = {
    "enabled": (
        "--kubernetes",
        "DaemonSet mode: attribute GPUs to pods (kubelet PodResources) and discover annotated serving pods",
    ),
    "pod_labels": (
        "--kubernetes-pod-labels",
        "pod label keys copied onto llm_gpu_pod_info and per-process memory (comma-separated allow-list, at most 8)",
    ),
    "gpu_labels": (
        "--kubernetes-gpu-labels",
        "also label the GPU series of GPUs held by one container with namespace, pod, container",
    ),
    "pod_resources_socket": (
        "--kubernetes-pod-resources-socket",
        f"the kubelet's PodResources socket (default {DEFAULT_SOCKET})",
    ),
    "pods_url": (
        "--kubernetes-pods-url",
        "where the node's pods are listed: empty for the API server (default), the kubelet's /pods URL, or none",
    ),
    "pods_max_bytes": (
        "--kubernetes-pods-max-bytes",
        f"largest pod list read, {MIN_PODS_MAX_BYTES}-{MAX_PODS_MAX_BYTES} bytes (default {DEFAULT_PODS_MAX_BYTES}: 8 MiB); a larger one is refused as too_large",
    ),
    "node_name": ("--kubernetes-node-name", "this node's name (default: $NODE_NAME)"),
    "discovery": ("--kubernetes-discovery", 'scrape pods annotated llm-layer-exporter.io/scrape: "true" (default true)'),
    "discovery_interval": ("--kubernetes-discovery-interval", "seconds between two pod-list refreshes, 0.1-3600 (default 30)"),
    "interval": ("--kubernetes-interval", "seconds between two GPU attribution samples, 0.1-3600 (default 10)"),
    "process_sampler": (
        "--kubernetes-process-sampler",
        "sample the serving process of discovered pods, found by cgroup (default true; needs hostPID)",
    ),
    "proc_root": ("--kubernetes-proc-root", "where the host's /proc is (default /proc, with hostPID: true)"),
    "tls_verify": ("--kubernetes-tls-verify", "verify the API server's or kubelet's certificate (default true)"),
    "token_file": ("--kubernetes-token-file", f"service-account token (default {DEFAULT_TOKEN_FILE})"),
    "ca_file": ("--kubernetes-ca-file", f"CA bundle for the API server or kubelet (default {DEFAULT_CA_FILE})"),
}
_METAVARS = {
    "pod_labels": "KEYS",
    "pod_resources_socket": "PATH",
    "pods_url": "URL",
    "pods_max_bytes": "BYTES",
    "node_name": "NAME",
    "discovery": "BOOL",
    "discovery_interval": "SECONDS",
    "interval": "SECONDS",
    "process_sampler": "BOOL",
    "proc_root": "PATH",
    "tls_verify": "BOOL",
    "token_file": "PATH",
    "ca_file": "PATH",
}
#: switches that may be given without a value (``--kubernetes`` means ``--kubernetes=true``)
_SWITCHES = ("enabled", "gpu_labels")


def _dest(key: str) -> str:
    return "kubernetes" if key == "enabled" else f"kubernetes_{key}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("kubernetes (DaemonSet mode; docs/kubernetes.md)")
    for key, (flag, help_text) in FLAGS.items():
        if key in _SWITCHES:
            group.add_argument(flag, dest=_dest(key), nargs="?", const="true", default=None, metavar="BOOL", help=help_text)
        else:
            group.add_argument(flag, dest=_dest(key), default=None, metavar=_METAVARS.get(key, "VALUE"), help=help_text)


def load(args: argparse.Namespace, environ: Mapping[str, str], raw: Any, where: str | None) -> KubernetesConfig:
    """The Kubernetes settings from flags, environment and the ``kubernetes:`` section; UsageError names the bad one."""
    parsers = PARSERS
    cfg = KubernetesConfig()
    if raw is not None:
        if not isinstance(raw, dict):
            raise UsageError(f"{where}: kubernetes: expected a mapping")
        section = section_keys(raw, set(parsers), f"{where}: kubernetes")
        for key, value in section.items():
            setattr(cfg, key, parsed(parsers[key], value, f"{where}: kubernetes.{key}"))
    for key, parse in parsers.items():
        env_name = ENV_PREFIX + _dest(key).upper()
        if environ.get(env_name):
            setattr(cfg, key, parsed(parse, environ[env_name], env_name))
        value = getattr(args, _dest(key), None)
        if value is not None:
            setattr(cfg, key, parsed(parse, value, FLAGS[key][0]))
    if not cfg.node_name:
        cfg.node_name = environ.get("NODE_NAME", "")
    if not cfg.enabled:
        return cfg
    if cfg.discovers and not cfg.pods_url and not cfg.node_name:
        raise UsageError(
            "--kubernetes: the node name is unknown: set NODE_NAME (downward API spec.nodeName) or --kubernetes-node-name"
        )
    for name, extra in cfg.label_plan().items():
        total = len(SPECS[name].labels) + len([e for e in extra if e not in SPECS[name].labels]) + TARGET_LABELS + 1
        if total >= MAX_SERIES_LABELS:
            raise UsageError(
                f"--kubernetes-pod-labels: {name} would carry {total} labels (with __name__ and {TARGET_LABELS} target labels); "
                f"keep every series under {MAX_SERIES_LABELS}: copy fewer pod labels"
            )
    return cfg


__all__ = [
    "FLAGS",
    "MAX_POD_LABELS",
    "KubernetesConfig",
    "add_arguments",
    "gpu_series_names",
    "load",
    "pod_label_keys",
    "prometheus_label",
]
