"""The kubelet's PodResources API: which container holds which GPU on this node.

Why this API: it is the kubelet's own record of what each device plugin
allocated (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, time-sliced
replicas), served on a local unix socket, with no API-server round trip and
no RBAC; dcgm-exporter reads the same socket. One ``v1.PodResourcesLister/List``
call per sample, over a channel kept between samples.

Device IDs, as the NVIDIA device plugin hands them out:

- ``GPU-<uuid>`` (``deviceIDStrategy: uuid``, the default) or ``<index>`` (``index``);
- ``MIG-<uuid>`` for a MIG device (the mixed strategy's ``nvidia.com/mig-*`` resources
  and the single strategy's ``nvidia.com/gpu``);
- ``<id>::<n>`` for replica ``n`` of a time-sliced (shared) GPU: the suffix is
  dropped, so every pod sharing the GPU maps to the same device.

Faults (each a ``SourceError``, never a crash; the channel reconnects on its own):

- socket missing (no kubelet, no hostPath mount) -> ``file_missing``;
- socket not writable by us (the kubelet's socket is root-only) -> ``connection``,
  with the fix in the message;
- kubelet down or restarting (UNAVAILABLE) -> ``connection``; no answer within the
  timeout -> ``timeout``; an older kubelet without the method -> ``not_supported``;
  an answer over ``MAX_MESSAGE_BYTES`` -> ``too_large``.

Bounded: the answer is capped at ``MAX_MESSAGE_BYTES`` by gRPC itself, and at most
``MAX_PODS`` pods and ``MAX_ALLOCATIONS`` device allocations are kept (the rest
are counted in ``Allocations.skipped``).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from exporter.samples import SourceError

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
#: largest List answer accepted (a node of 110 pods answers a few hundred KiB)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_PODS = 1024
MAX_ALLOCATIONS = 4096
#: resource names whose devices are GPUs (the NVIDIA device plugin's, MIG and shared included)
GPU_RESOURCE_PREFIXES: tuple[str, ...] = ("nvidia.com/",)


@dataclass(frozen=True, slots=True)
class Allocation:
    """One device allocated to one container; ``device_id`` has no ``::<replica>`` suffix."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    #: the kubelet handed this device out as one replica of a time-sliced GPU
    shared: bool = False


@dataclass
class Allocations:
    """What one List call returned: the GPU allocations kept, and how many were not."""

    items: list[Allocation] = field(default_factory=list)
    skipped: int = 0


def is_gpu_resource(name: str, prefixes: tuple[str, ...] = GPU_RESOURCE_PREFIXES) -> bool:
    return name.startswith(prefixes)


def allocations_from_response(response: Any, prefixes: tuple[str, ...] = GPU_RESOURCE_PREFIXES) -> Allocations:
    """The GPU allocations of a ``ListPodResourcesResponse``, deduplicated and bounded."""
    out = Allocations()
    seen: set[Allocation] = set()
    for i, pod in enumerate(response.pod_resources):
        if i >= MAX_PODS:
            out.skipped += len(response.pod_resources) - MAX_PODS
            break
        for container in pod.containers:
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, prefixes):
                    continue
                for raw in devices.device_ids:
                    device, sep, _replica = raw.partition("::")
                    alloc = Allocation(pod.namespace, pod.name, container.name, devices.resource_name, device, bool(sep))
                    if alloc in seen:
                        continue
                    if len(out.items) >= MAX_ALLOCATIONS:
                        out.skipped += 1
                        continue
                    seen.add(alloc)
                    out.items.append(alloc)
    return out


class PodResourcesClient:
    """A ``List`` client on the kubelet's unix socket; one channel, reopened after the socket goes away."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: Any = None
        self._stub: Any = None

    def _open(self) -> Any:
        import grpc

        from exporter.kubernetes.kubelet_api import api_pb2_grpc

        target = "unix:" + os.path.abspath(self.socket_path)
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", 1024 * 1024),
            # reconnect within seconds of a kubelet restart, not after minutes of backoff
            ("grpc.initial_reconnect_backoff_ms", 500),
            ("grpc.max_reconnect_backoff_ms", 5000),
            ("grpc.enable_http_proxy", 0),
        ]
        self._channel = grpc.insecure_channel(target, options=options)
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def list(self) -> Allocations:
        """The GPU allocations now; raises ``SourceError`` (see the module docstring)."""
        import grpc

        from exporter.kubernetes.kubelet_api import api_pb2

        path = self.socket_path
        if not os.path.exists(path):
            self.close()
            raise SourceError(
                "file_missing", f"kubelet pod-resources socket {path} not found (mount /var/lib/kubelet/pod-resources)"
            )
        if not os.access(path, os.R_OK | os.W_OK):
            raise SourceError(
                "connection",
                f"no permission to connect to {path}: the kubelet's socket is root-only; run the exporter as root (Helm: kubernetes.podResources.runAsRoot)",
            )
        with self._lock:
            stub = self._stub or self._open()
            try:
                response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
            except grpc.RpcError as err:
                raise _rpc_error(err, path) from None
        return allocations_from_response(response)

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = None


def _rpc_error(err: Any, path: str) -> SourceError:
    import grpc

    code = err.code() if callable(getattr(err, "code", None)) else None
    details = (err.details() if callable(getattr(err, "details", None)) else "") or ""
    details = details[:200]
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return SourceError("timeout", f"kubelet pod-resources List on {path}: no answer in time")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return SourceError(
            "not_supported", f"kubelet pod-resources on {path}: v1 List not implemented (kubelet older than 1.20?)"
        )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return SourceError("too_large", f"kubelet pod-resources List on {path}: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        hint = "; the kubelet's socket is root-only: run the exporter as root" if "ermission denied" in details else ""
        return SourceError("connection", f"kubelet pod-resources on {path} unavailable: {details}{hint}")
    name = code.name if code is not None else "unknown"
    return SourceError("internal", f"kubelet pod-resources List on {path}: {name} {details}")


__all__ = ["DEFAULT_SOCKET", "Allocation", "Allocations", "PodResourcesClient", "allocations_from_response", "is_gpu_resource"]
