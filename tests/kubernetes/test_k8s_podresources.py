"""The PodResources client against a real gRPC server on a unix socket: allocations, and every
fault a source error (never a crash)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from exporter.kubernetes.kubelet_api import api_pb2
from exporter.kubernetes.podresources import MAX_ALLOCATIONS, Allocation, PodResourcesClient
from exporter.samples import SourceError
from tests.support.k8s import MIG_LARGE, MIG_SMALL, UUID, PodResourcesServer, allocation


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "kubelet.sock"


def test_lists_gpu_allocations_shared_replicas_folded(sock: Path) -> None:
    with PodResourcesServer(sock) as server:
        client = PodResourcesClient(str(sock), timeout=2.0)
        try:
            found = client.list()
            again = client.list()  # the channel is kept
        finally:
            client.close()
    assert server.calls == 2 and again.items == found.items and found.skipped == 0
    assert set(found.items) == {
        Allocation("inference", "llama-70b-0", "vllm", "nvidia.com/gpu", UUID[0]),
        Allocation("inference", "llama-70b-0", "vllm", "nvidia.com/gpu", UUID[1]),
        Allocation("inference", "mig-small-0", "app", "nvidia.com/mig-1g.18gb", MIG_SMALL),
        Allocation("inference", "mig-large-0", "app", "nvidia.com/mig-3g.71gb", MIG_LARGE),
        Allocation("team-a", "notebook-1", "jupyter", "nvidia.com/gpu", UUID[3], shared=True),
        Allocation("team-b", "embed-2", "embedder", "nvidia.com/gpu", UUID[3], shared=True),
    }, "non-GPU resources (example.com/fpga) and pods without devices are left out"


def test_missing_socket_is_file_missing(sock: Path) -> None:
    client = PodResourcesClient(str(sock), timeout=0.5)
    with pytest.raises(SourceError) as err:
        client.list()
    assert err.value.reason == "file_missing" and str(sock) in err.value.message
    client.close()


def test_kubelet_errors_are_source_errors(sock: Path) -> None:
    with PodResourcesServer(sock) as server:
        client = PodResourcesClient(str(sock), timeout=0.5)
        try:
            server.abort = (grpc.StatusCode.UNAVAILABLE, "kubelet is restarting")
            with pytest.raises(SourceError) as err:
                client.list()
            assert err.value.reason == "connection" and "restarting" in err.value.message
            server.abort = (grpc.StatusCode.INTERNAL, "boom")
            with pytest.raises(SourceError) as err:
                client.list()
            assert err.value.reason == "internal"
            server.abort, server.delay = None, 1.0
            with pytest.raises(SourceError) as err:
                client.list()
            assert err.value.reason == "timeout"
            server.delay = 0.0
            assert client.list().items, "recovers on the next call"
        finally:
            client.close()


def test_a_kubelet_without_list_is_not_supported(sock: Path) -> None:
    with PodResourcesServer(sock, register=False):
        client = PodResourcesClient(str(sock), timeout=1.0)
        try:
            with pytest.raises(SourceError) as err:
                client.list()
        finally:
            client.close()
    assert err.value.reason == "not_supported"


def test_a_socket_nobody_listens_on_is_connection(sock: Path) -> None:
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))  # the file exists, nothing accepts (a kubelet that died)
    try:
        client = PodResourcesClient(str(sock), timeout=1.0)
        with pytest.raises(SourceError) as err:
            client.list()
        client.close()
    finally:
        s.close()
    assert err.value.reason in ("connection", "timeout")


def test_allocations_are_bounded(sock: Path) -> None:
    many = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            allocation("ns", f"p{i}", {"c": [("nvidia.com/gpu", [f"GPU-{i}-{j}" for j in range(8)])]}) for i in range(600)
        ]
    )
    with PodResourcesServer(sock, response=many):
        client = PodResourcesClient(str(sock), timeout=5.0)
        try:
            found = client.list()
        finally:
            client.close()
    assert len(found.items) == MAX_ALLOCATIONS and found.skipped == 600 * 8 - MAX_ALLOCATIONS
