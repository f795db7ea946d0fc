"""The pods of this node: from the kubelet's ``/pods`` or from the API server.

Why a pod list at all: the PodResources API names pods but not their UIDs,
labels, IPs or annotations, and a process's cgroup names only its pod's UID.
Discovery (annotations, pod IP, ports) and per-process GPU attribution (UID ->
namespace/pod, runtime container ID -> container name) both read this one list,
kept in a ``PodDirectory`` and fetched at most once per refresh.

Where it comes from (``--kubernetes-pods-url``):

- ``""`` (default): the API server, in-cluster (``KUBERNETES_SERVICE_HOST``/``_PORT``),
  ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>&resourceVersion=0``: the
  node's pods only, served from the API server's watch cache. RBAC: ``get``/``list``
  on ``pods`` (the Helm chart's ClusterRole). Chosen as the default because
  ``nodes/proxy``, which the kubelet's authenticated ``/pods`` needs, also grants
  exec into every pod of the node.
- a URL: the kubelet's ``/pods`` as is (``https://$(NODE_IP):10250/pods`` with
  ``nodes/proxy``, or the read-only ``http://$(NODE_IP):10255/pods`` where enabled).
- ``none``: no pod list (no discovery; GPU attribution by PodResources only).

Both answer a ``PodList``. The service-account token is re-read on every request
(projected tokens rotate) and sent only over HTTPS. Every request has one
deadline and a byte cap (``exporter/engines/fetch.py``); at most ``MAX_PODS`` pods
are kept, the rest counted. Faults are ``SourceError``: ``connection``,
``timeout``, ``http_status`` (401/403: RBAC), ``parse``, ``too_large``,
``file_missing`` (no token).
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from exporter import __version__
from exporter.samples import SourceError

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_TOKEN_FILE = f"{SERVICE_ACCOUNT_DIR}/token"
DEFAULT_CA_FILE = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
#: largest pod list read (110 pods with their specs and statuses are a few MiB)
MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_PODS = 512
#: most containers, ports, labels and annotations kept per pod
MAX_CONTAINERS = 64
MAX_PORTS = 64
MAX_LABELS = 256
MAX_VALUE_CHARS = 1024
_RUNTIME_SCHEMES = ("containerd://", "cri-o://", "docker://", "cri-dockerd://")


@dataclass(frozen=True, slots=True)
class Container:
    """One container of a pod: its ports and its runtime ID (64 hex, "" before it started)."""

    name: str
    ports: tuple[int, ...] = ()
    runtime_id: str = ""


@dataclass(frozen=True)
class Pod:
    """What this exporter needs of one pod."""

    uid: str
    namespace: str
    name: str
    node: str = ""
    phase: str = ""
    ip: str = ""
    terminating: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    containers: tuple[Container, ...] = ()

    def container_by_runtime_id(self, runtime_id: str) -> str:
        """The name of the container with this runtime ID ("" when none has it)."""
        for c in self.containers:
            if runtime_id and c.runtime_id == runtime_id:
                return c.name
        return ""


@dataclass
class PodList:
    """One fetch: the pods kept, how many were left out, when (monotonic)."""

    pods: list[Pod]
    skipped: int = 0
    fetched_at: float = 0.0
    by_uid: dict[str, Pod] = field(default_factory=dict)
    by_name: dict[tuple[str, str], Pod] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_uid = {p.uid: p for p in self.pods}
        self.by_name = {(p.namespace, p.name): p for p in self.pods}


def _text(value: Any) -> str:
    return value[:MAX_VALUE_CHARS] if isinstance(value, str) else ""


def _object(value: Any) -> dict[str, Any]:
    """A JSON object as such; anything else as an empty one."""
    return value if isinstance(value, dict) else {}


def _mapping(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    out: dict[str, str] = {}
    for k, v in value.items():
        if len(out) >= MAX_LABELS:
            break
        if isinstance(k, str) and isinstance(v, str):
            out[k[:MAX_VALUE_CHARS]] = v[:MAX_VALUE_CHARS]
    return out


def runtime_id(container_id: Any) -> str:
    """``containerd://<64 hex>`` -> ``<64 hex>`` (the ID a cgroup path carries)."""
    text = _text(container_id)
    for scheme in _RUNTIME_SCHEMES:
        if text.startswith(scheme):
            return text[len(scheme) :]
    return text.partition("://")[2] if "://" in text else ""


def parse_pod(item: Any) -> Pod | None:
    """One PodList item; None when it is not a pod object with a UID."""
    if not isinstance(item, dict):
        return None
    meta, spec, status = (_object(item.get(key)) for key in ("metadata", "spec", "status"))
    uid = _text(meta.get("uid"))
    if not uid or not _text(meta.get("name")):
        return None
    ids: dict[str, str] = {}
    statuses = status.get("containerStatuses")
    for cs in statuses if isinstance(statuses, list) else []:
        if isinstance(cs, dict) and isinstance(cs.get("name"), str):
            ids[cs["name"]] = runtime_id(cs.get("containerID"))
    containers: list[Container] = []
    specs = spec.get("containers")
    for c in (specs if isinstance(specs, list) else [])[:MAX_CONTAINERS]:
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            continue
        ports: list[int] = []
        raw_ports = c.get("ports")
        for p in (raw_ports if isinstance(raw_ports, list) else [])[:MAX_PORTS]:
            port = p.get("containerPort") if isinstance(p, dict) else None
            if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
                ports.append(port)
        containers.append(Container(c["name"][:MAX_VALUE_CHARS], tuple(ports), ids.get(c["name"], "")))
    return Pod(
        uid=uid.lower(),
        namespace=_text(meta.get("namespace")),
        name=_text(meta.get("name")),
        node=_text(spec.get("nodeName")),
        phase=_text(status.get("phase")),
        ip=_text(status.get("podIP")),
        terminating=bool(meta.get("deletionTimestamp")),
        labels=_mapping(meta.get("labels")),
        annotations=_mapping(meta.get("annotations")),
        containers=tuple(containers),
    )


def parse_pod_list(body: bytes, node: str = "", max_pods: int = MAX_PODS) -> tuple[list[Pod], int]:
    """Pods of a PodList body (only ``node``'s when given) and how many were left out."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise SourceError("parse", f"pod list is not JSON: {str(err)[:120]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise SourceError("parse", "pod list: expected a PodList object with items")
    pods: list[Pod] = []
    skipped = 0
    for item in data["items"]:
        pod = parse_pod(item)
        if pod is None or (node and pod.node and pod.node != node):
            continue
        if len(pods) >= max_pods:
            skipped += 1
            continue
        pods.append(pod)
    return pods, skipped


def api_server_url(node: str, environ: Mapping[str, str] | None = None) -> str:
    """The in-cluster API server's URL for ``node``'s pods; raises SourceError outside a cluster."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise SourceError("connection", "not in a cluster (KUBERNETES_SERVICE_HOST unset): set --kubernetes-pods-url")
    if not node:
        raise SourceError("malformed", "node name unknown: set NODE_NAME (downward API spec.nodeName) or --kubernetes-node-name")
    host = f"[{host}]" if ":" in host else host
    selector = quote(f"spec.nodeName={node}", safe="")
    return f"https://{host}:{port}/api/v1/pods?fieldSelector={selector}&resourceVersion=0"


class PodLister:
    """One bounded GET of the node's pod list (the kubelet's ``/pods`` or the API server's)."""

    def __init__(
        self,
        url: str = "",
        node: str = "",
        *,
        token_file: str = DEFAULT_TOKEN_FILE,
        ca_file: str | None = DEFAULT_CA_FILE,
        tls_verify: bool = True,
        timeout: float = 5.0,
        max_body_bytes: int = MAX_BODY_BYTES,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self.node = node
        self.token_file = token_file
        self.ca_file = ca_file
        self.tls_verify = tls_verify
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self._environ = environ
        self._tls: tuple[tuple[str | None, int], ssl.SSLContext] | None = None

    def target(self) -> str:
        return self.url or api_server_url(self.node, self._environ)

    def list(self) -> tuple[list[Pod], int]:
        """(pods, left out); raises ``SourceError``."""
        from exporter.engines.fetch import Request, get  # the bounded GET the engine scrapes use

        url = self.target()
        https = url.startswith("https:")
        headers = {"Accept": "application/json", "User-Agent": f"llm-layer-exporter/{__version__}"}
        if https:
            token = self._token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
        response = get(
            Request(
                url=url,
                timeout=self.timeout,
                max_body_bytes=self.max_body_bytes,
                headers=headers,
                tls=self._context() if https else None,
            )
        )
        if not 200 <= response.status < 300:
            hint = (
                " (RBAC: the exporter's ServiceAccount needs get/list on pods, or nodes/proxy for the kubelet)"
                if response.status in (401, 403)
                else ""
            )
            raise SourceError("http_status", f"pod list {url.split('?')[0]}: HTTP {response.status}{hint}")
        return parse_pod_list(bytes(response.body), self.node)

    def _token(self) -> str:
        """The service-account token, read now (rotation); "" where none is mounted and the URL is a kubelet's."""
        try:
            with open(self.token_file, encoding="utf-8") as f:
                token = f.read(64 * 1024).strip()
        except OSError as err:
            if self.url:  # a kubelet URL may need no token
                return ""
            raise SourceError(
                "file_missing", f"cannot read the service-account token {self.token_file}: {err.strerror}"
            ) from None
        if token and not all(33 <= ord(c) <= 126 for c in token):
            raise SourceError("malformed", f"service-account token {self.token_file} holds characters not allowed in a header")
        return token

    def _context(self) -> ssl.SSLContext:
        ca = self.ca_file if self.ca_file and os.path.exists(self.ca_file) else None
        try:
            key = (ca, os.stat(ca).st_mtime_ns if ca else 0)
        except OSError:
            key = (None, 0)
        if self._tls is not None and self._tls[0] == key:
            return self._tls[1]
        try:
            context = ssl.create_default_context(cafile=key[0]) if key[0] else ssl.create_default_context()
        except (OSError, ssl.SSLError) as err:
            raise SourceError("malformed", f"CA bundle {ca}: not a PEM bundle ({type(err).__name__})") from None
        if not self.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self._tls = (key, context)
        return context


class PodDirectory:
    """The latest pod list, shared by discovery and attribution; fetched at most once per ``min_age``.

    Why shared: both need the same list, and a second GET per refresh would double
    the load on the API server for nothing.
    """

    def __init__(self, lister: PodLister, clock: Callable[[], float] = time.monotonic, min_age: float = 5.0) -> None:
        self.lister = lister
        self._clock = clock
        self.min_age = min_age
        self._lock = threading.Lock()
        self._latest: PodList | None = None
        self._error: SourceError | None = None
        self._error_at: float | None = None

    def refresh(self) -> PodList:
        """Fetch now, unless the last fetch (or failure) is younger than ``min_age``; raises ``SourceError``."""
        with self._lock:
            now = self._clock()
            if self._latest is not None and now - self._latest.fetched_at < self.min_age:
                return self._latest
            if self._error is not None and self._error_at is not None and now - self._error_at < self.min_age:
                raise SourceError(self._error.reason, self._error.message)
            try:
                pods, skipped = self.lister.list()
            except SourceError as err:
                self._error, self._error_at = err.detached(), now
                raise
            self._error = self._error_at = None
            self._latest = PodList(pods, skipped, now)
            return self._latest

    def current(self, max_age: float) -> PodList:
        """The latest list if younger than ``max_age`` seconds, else a fresh one; raises ``SourceError``."""
        with self._lock:
            latest = self._latest
        if latest is not None and self._clock() - latest.fetched_at < max_age:
            return latest
        return self.refresh()

    def latest(self) -> PodList | None:
        """The last list fetched, however old (None before the first)."""
        with self._lock:
            return self._latest


__all__ = [
    "Container",
    "Pod",
    "PodDirectory",
    "PodList",
    "PodLister",
    "api_server_url",
    "parse_pod",
    "parse_pod_list",
    "runtime_id",
]
