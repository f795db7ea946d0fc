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
deadline and a byte cap (``MAX_BODY_BYTES``, ``--kubernetes-pods-max-bytes``;
``exporter/engines/fetch.py``).

Why bounded and selective: the list's strings are written by whoever may create
pods on the node (tenant input). The body is read by ``exporter/kubernetes/podjson.py``,
which builds only the fields below and steps over the rest (``managedFields``,
other annotations, ...) without building them; a document nested deeper than
``MAX_DEPTH`` levels is refused as ``parse`` (no pod is that deep: only a broken
or hostile kubelet writes it), never a ``RecursionError``. One bad pod is never
the list's fault: it is left out and counted by reason (``malformed``,
``too_many_pods`` over ``MAX_PODS``), or kept with a part ignored
(``annotations_too_large`` over ``MAX_ANNOTATION_BYTES``, ``labels_too_large``
over ``MAX_LABEL_BYTES``); the reasons are ``KUBERNETES_POD_SKIP_REASONS`` in
exporter/schema.py, counted by discovery (exporter/kubernetes/discovery.py). Faults of the
whole list are ``SourceError``: ``connection``, ``timeout``, ``http_status``
(401/403: RBAC), ``parse``, ``too_large``, ``file_missing`` (no token).
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from exporter import __version__
from exporter.kubernetes.podjson import JsonError, Reader, TooDeep
from exporter.samples import SourceError
from exporter.tlsclient import ClientTLS, TLSFiles

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_TOKEN_FILE = f"{SERVICE_ACCOUNT_DIR}/token"
DEFAULT_CA_FILE = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
#: largest pod list read by default (``--kubernetes-pods-max-bytes``): 110 pods with
#: their specs, statuses and managedFields are 1-3 MiB
MAX_BODY_BYTES = 8 * 1024 * 1024  # = settings.DEFAULT_PODS_MAX_BYTES (tests/kubernetes/test_k8s_settings.py pins it)
MAX_PODS = 512
#: a pod's annotations over this many bytes (the annotations object as JSON) are ignored
#: (the API server allows 256 KiB; serving pods carry a few hundred bytes)
MAX_ANNOTATION_BYTES = 64 * 1024
#: a pod's labels over this many bytes (as JSON) are ignored (a label value is at most 63 characters)
MAX_LABEL_BYTES = 16 * 1024
#: deepest nesting read (a pod is about 12 levels deep, managedFields included)
MAX_DEPTH = 64
#: the annotations discovery reads (exporter/kubernetes/discovery.py); no other is built
ANNOTATION_PREFIX = "llm-layer-exporter.io/"
MAX_OWN_ANNOTATIONS = 16
#: most containers, ports, labels and annotations kept per pod
MAX_CONTAINERS = 64
MAX_PORTS = 64
MAX_LABELS = 256
MAX_VALUE_CHARS = 1024
_RUNTIME_SCHEMES = ("containerd://", "cri-o://", "docker://", "cri-dockerd://")
_OBJECT, _ARRAY, _QUOTE = 0x7B, 0x5B, 0x22


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
    #: what of the pod was ignored (``annotations_too_large``, ``labels_too_large``)
    problems: tuple[str, ...] = ()

    def container_by_runtime_id(self, runtime_id: str) -> str:
        """The name of the container with this runtime ID ("" when none has it)."""
        for c in self.containers:
            if runtime_id and c.runtime_id == runtime_id:
                return c.name
        return ""


@dataclass
class PodList:
    """One fetch: the pods kept, the pods left out or read in part by reason, when (monotonic)."""

    pods: list[Pod]
    skipped: dict[str, int] = field(default_factory=dict)
    fetched_at: float = 0.0
    by_uid: dict[str, Pod] = field(default_factory=dict)
    by_name: dict[tuple[str, str], Pod] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_uid = {p.uid: p for p in self.pods}
        self.by_name = {(p.namespace, p.name): p for p in self.pods}


def runtime_id(container_id: Any) -> str:
    """``containerd://<64 hex>`` -> ``<64 hex>`` (the ID a cgroup path carries)."""
    text = container_id[:MAX_VALUE_CHARS] if isinstance(container_id, str) else ""
    for scheme in _RUNTIME_SCHEMES:
        if text.startswith(scheme):
            return text[len(scheme) :]
    return text.partition("://")[2] if "://" in text else ""


class _Fields:
    """What one item says, as it is read."""

    __slots__ = (
        "annotations",
        "containers",
        "ids",
        "ip",
        "labels",
        "name",
        "namespace",
        "node",
        "phase",
        "problems",
        "terminating",
        "uid",
    )

    def __init__(self) -> None:
        self.uid = self.name = self.namespace = self.node = self.phase = self.ip = ""
        self.problems: list[str] = []
        self.terminating = False
        self.labels: dict[str, str] = {}
        self.annotations: dict[str, str] = {}
        self.containers: list[tuple[str, tuple[int, ...]]] = []
        self.ids: dict[str, str] = {}


def _is_object(r: Reader) -> bool:
    """Whether the value here is an object; anything else is skipped (read as an empty one)."""
    if r.peek() == _OBJECT:
        return True
    r.skip()
    return False


def _is_array(r: Reader) -> bool:
    if r.peek() == _ARRAY:
        return True
    r.skip()
    return False


def _small_object(r: Reader, max_bytes: int) -> bool:
    """Whether the value here is an object of at most ``max_bytes`` (as JSON); a larger one, or
    any other value, is stepped over unread."""
    if not _is_object(r):
        return False
    start, depth = r.pos, r.depth
    r.skip()
    if r.pos - start > max_bytes:
        return False
    r.pos, r.depth = start, depth  # small: read it
    return True


def _labels(r: Reader, keys: frozenset[str] | None) -> dict[str, str] | None:
    """The pod's labels: only ``keys`` when given (the allow-list), else at most ``MAX_LABELS``;
    None when they are over ``MAX_LABEL_BYTES``."""
    out: dict[str, str] = {}
    if r.peek() != _OBJECT:
        r.skip()
        return out
    if not _small_object(r, MAX_LABEL_BYTES):
        return None
    for key in r.members(MAX_VALUE_CHARS):
        wanted = key is not None and (key in keys if keys is not None else len(out) < MAX_LABELS)
        if wanted and r.peek() == _QUOTE:
            value = r.string(MAX_VALUE_CHARS)
            if key is not None and value is not None:
                out[key] = value
        else:
            r.skip()
    return out


def _annotations(r: Reader, max_bytes: int) -> tuple[dict[str, str], bool]:
    """This exporter's annotations (``llm-layer-exporter.io/*``), and whether they were ignored as too large.

    Only our keys are built; the others are stepped over. The whole annotations
    object over ``max_bytes`` (as JSON), or one of ours over ``MAX_VALUE_CHARS``,
    makes the pod's annotations ignored.
    """
    kept: dict[str, str] = {}
    if r.peek() != _OBJECT:
        r.skip()
        return kept, False
    if not _small_object(r, max_bytes):
        return kept, True
    too_large = False
    for key in r.members(MAX_VALUE_CHARS):
        if key is not None and key.startswith(ANNOTATION_PREFIX) and len(kept) < MAX_OWN_ANNOTATIONS and r.peek() == _QUOTE:
            value = r.string(MAX_VALUE_CHARS)
            if value is None:
                too_large = True
            else:
                kept[key] = value
        else:
            r.skip()
    return ({}, True) if too_large else (kept, False)


def _metadata(r: Reader, f: _Fields, label_keys: frozenset[str] | None, max_annotation_bytes: int) -> None:
    for key in r.members():
        if key == "uid":
            f.uid = r.text(MAX_VALUE_CHARS).lower()
        elif key == "name":
            f.name = r.text(MAX_VALUE_CHARS)
        elif key == "namespace":
            f.namespace = r.text(MAX_VALUE_CHARS)
        elif key == "deletionTimestamp":
            f.terminating = r.present()
        elif key == "labels":
            labels = _labels(r, label_keys)
            if labels is None:
                f.problems.append("labels_too_large")
            f.labels = labels or {}
        elif key == "annotations":
            f.annotations, too_large = _annotations(r, max_annotation_bytes)
            if too_large:
                f.problems.append("annotations_too_large")
        else:
            r.skip()


def _ports(r: Reader) -> tuple[int, ...]:
    ports: list[int] = []
    for _ in r.elements():
        if len(ports) >= MAX_PORTS or r.peek() != _OBJECT:
            r.skip()
            continue
        for key in r.members():
            port = r.integer() if key == "containerPort" else None
            if port is not None and 0 < port < 65536:
                ports.append(port)
    return tuple(ports)


def _spec(r: Reader, f: _Fields) -> None:
    for key in r.members():
        if key == "nodeName":
            f.node = r.text(MAX_VALUE_CHARS)
        elif key == "containers" and _is_array(r):
            for _ in r.elements():
                if len(f.containers) >= MAX_CONTAINERS or r.peek() != _OBJECT:
                    r.skip()
                    continue
                name = ""
                ports: tuple[int, ...] = ()
                for field_name in r.members():
                    if field_name == "name":
                        name = r.text(MAX_VALUE_CHARS)
                    elif field_name == "ports" and _is_array(r):
                        ports = _ports(r)
                if name:
                    f.containers.append((name, ports))


def _status(r: Reader, f: _Fields) -> None:
    for key in r.members():
        if key == "phase":
            f.phase = r.text(MAX_VALUE_CHARS)
        elif key == "podIP":
            f.ip = r.text(MAX_VALUE_CHARS)
        elif key == "containerStatuses" and _is_array(r):
            for _ in r.elements():
                if len(f.ids) >= MAX_CONTAINERS or r.peek() != _OBJECT:
                    r.skip()
                    continue
                name = cid = ""
                for field_name in r.members():
                    if field_name == "name":
                        name = r.text(MAX_VALUE_CHARS)
                    elif field_name == "containerID":
                        cid = r.text(MAX_VALUE_CHARS)
                if name:
                    f.ids[name] = runtime_id(cid)


def _read_pod(r: Reader, label_keys: frozenset[str] | None, max_annotation_bytes: int) -> Pod | None:
    """One PodList item; None when it is not a pod object with a UID and a name (``malformed``)."""
    f = _Fields()
    if _is_object(r):
        for key in r.members():
            if key == "metadata" and _is_object(r):
                _metadata(r, f, label_keys, max_annotation_bytes)
            elif key == "spec" and _is_object(r):
                _spec(r, f)
            elif key == "status" and _is_object(r):
                _status(r, f)
    if not f.uid or not f.name:
        return None
    return Pod(
        uid=f.uid,
        namespace=f.namespace,
        name=f.name,
        node=f.node,
        phase=f.phase,
        ip=f.ip,
        terminating=f.terminating,
        labels=f.labels,
        annotations=f.annotations,
        containers=tuple(Container(name, ports, f.ids.get(name, "")) for name, ports in f.containers),
        problems=tuple(f.problems),
    )


def parse_pod_list(
    body: bytes | bytearray,
    node: str = "",
    max_pods: int = MAX_PODS,
    *,
    label_keys: frozenset[str] | None = None,
    max_annotation_bytes: int = MAX_ANNOTATION_BYTES,
) -> tuple[list[Pod], dict[str, int]]:
    """Pods of a PodList body (only ``node``'s when given), and the pods left out or read in part, by reason.

    Raises ``SourceError("parse")`` when the body is not a PodList (not JSON, or
    nested deeper than ``MAX_DEPTH``). One bad item is never the whole list's
    fault: it is counted (``malformed``, ``too_many_pods``) and left out; a pod
    with ``annotations_too_large`` or ``labels_too_large`` is kept without them.
    """
    r = Reader(body, MAX_DEPTH)
    pods: list[Pod] = []
    skipped: dict[str, int] = {}
    items = False
    try:
        if r.peek() != _OBJECT:
            raise SourceError("parse", "pod list: expected a PodList object with items")
        for key in r.members():
            if key == "items" and r.peek() == _ARRAY:
                items = True
                for _ in r.elements():
                    pod = _read_pod(r, label_keys, max_annotation_bytes)
                    if pod is not None and node and pod.node and pod.node != node:
                        continue
                    reasons: tuple[str, ...] = ("malformed",) if pod is None else pod.problems
                    if pod is not None and len(pods) >= max_pods:
                        reasons = ("too_many_pods",)
                    elif pod is not None:
                        pods.append(pod)
                    for reason in reasons:
                        skipped[reason] = skipped.get(reason, 0) + 1
            else:
                r.skip()
        if not r.at_end():
            raise JsonError(f"data after the PodList at byte {r.pos}")
    except TooDeep as err:
        raise SourceError("parse", f"pod list: {err}") from None
    except JsonError as err:
        raise SourceError("parse", f"pod list is not JSON: {str(err)[:120]}") from None
    if not items:
        raise SourceError("parse", "pod list: expected a PodList object with items")
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
        label_keys: frozenset[str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self.node = node
        self.token_file = token_file
        self.ca_file = ca_file
        self.tls_verify = tls_verify
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        #: the pod labels anyone reads (the allow-list); None keeps up to MAX_LABELS
        self.label_keys = label_keys
        self._environ = environ
        self._tls: ClientTLS | None = None

    def target(self) -> str:
        return self.url or api_server_url(self.node, self._environ)

    def list(self) -> tuple[list[Pod], dict[str, int]]:
        """(pods, left out or read in part by reason); raises ``SourceError``."""
        from exporter.engines.fetch import Request, get  # the bounded GET the engine scrapes use

        url = self.target()
        https = url.startswith("https:")
        headers = {"Accept": "application/json", "User-Agent": f"llm-layer-exporter/{__version__}"}
        if https:
            token = self._token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
        try:
            response = get(
                Request(
                    url=url,
                    timeout=self.timeout,
                    max_body_bytes=self.max_body_bytes,
                    headers=headers,
                    tls=self._context() if https else None,
                )
            )
        except SourceError as err:
            if err.reason != "too_large":
                raise
            raise SourceError(
                "too_large",
                f"pod list {url.split('?')[0]}: {err.message[:160]}; raise --kubernetes-pods-max-bytes if the node's pods need it",
            ) from None
        if not 200 <= response.status < 300:
            hint = (
                " (RBAC: the exporter's ServiceAccount needs get/list on pods, or nodes/proxy for the kubelet)"
                if response.status in (401, 403)
                else ""
            )
            raise SourceError("http_status", f"pod list {url.split('?')[0]}: HTTP {response.status}{hint}")
        return parse_pod_list(response.body, self.node, label_keys=self.label_keys)

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
        """The TLS settings, rebuilt when the CA bundle changes (rotation: exporter/tlsclient.py).

        A CA file that does not exist means the system store (outside a cluster, a kubelet URL)."""
        ca = self.ca_file if self.ca_file and os.path.exists(self.ca_file) else None
        if self._tls is None or self._tls.files.ca_file != ca:
            self._tls = ClientTLS(TLSFiles(ca_file=ca, verify=self.tls_verify, ca_key="CA bundle"))
        return self._tls.context()


#: the pod list is fetched at most this often at the default 30 s discovery interval
POD_LIST_MIN_AGE_S = 5.0


def pod_list_min_age(discovery_interval: float) -> float:
    """How young a shared pod list is reused: half the discovery interval, at most ``POD_LIST_MIN_AGE_S``.

    Why not a fixed 5 s: ``--kubernetes-discovery-interval 1`` would then refresh only every
    5 s, not what the flag says. Why half and not the interval itself: a refresh that comes a
    little early (timer jitter) must not find the last list still "young" and skip a cycle.
    The cap still rate-limits attribution's extra refreshes for a pod younger than the list.
    """
    return min(POD_LIST_MIN_AGE_S, 0.5 * discovery_interval)


class PodDirectory:
    """The latest pod list, shared by discovery and attribution; fetched at most once per ``min_age``.

    Why shared: both need the same list, and a second GET per refresh would double
    the load on the API server for nothing.
    """

    def __init__(
        self, lister: PodLister, clock: Callable[[], float] = time.monotonic, min_age: float = POD_LIST_MIN_AGE_S
    ) -> None:
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
    "POD_LIST_MIN_AGE_S",
    "Container",
    "Pod",
    "PodDirectory",
    "PodList",
    "PodLister",
    "api_server_url",
    "parse_pod_list",
    "pod_list_min_age",
    "runtime_id",
]
