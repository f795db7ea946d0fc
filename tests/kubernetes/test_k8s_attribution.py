"""GPU -> pod attribution end to end: a real gRPC PodResources server on a unix socket, fake
NVML GPUs and processes (MIG and a time-sliced GPU among them), cgroup files in a temp proc
root and the node's pod list from a local HTTP server."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from exporter.kubernetes.attribution import GpuPodSource, GpuSeriesLabels, NvmlDevices
from exporter.kubernetes.podresources import PodResourcesClient
from exporter.kubernetes.pods import PodDirectory, PodLister
from exporter.samples import Sample, SampleResult, SourceError
from tests.fakes.pynvml_fake import MIB, FakeNvml
from tests.support.k8s import (
    NODE,
    UUID,
    LocalHTTP,
    PodResourcesServer,
    fake_nvml,
    local_pods,
    write_gpu_proc,
)

KEYS = ("gpu", "uuid", "namespace", "pod", "container")


@dataclass
class Node:
    server: PodResourcesServer
    http: LocalHTTP
    nvml: FakeNvml
    proc: Path
    socket: Path

    def source(self, *, pods: bool = True, pod_labels: tuple[tuple[str, str], ...] = (), nvml: object = None) -> GpuPodSource:
        directory = PodDirectory(PodLister(self.http.url("/pods"), NODE, timeout=2.0), min_age=0.0) if pods else None
        return GpuPodSource(
            PodResourcesClient(str(self.socket), timeout=2.0),
            devices=NvmlDevices(nvml or self.nvml),
            directory=directory,
            proc_root=str(self.proc),
            pod_labels=pod_labels,
            interval=10.0,
            timeout=5.0,
        )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    proc = tmp_path / "proc"
    write_gpu_proc(proc)
    sock = tmp_path / "kubelet.sock"
    with PodResourcesServer(sock) as server, LocalHTTP() as http:
        http.set("/pods", local_pods())
        yield Node(server, http, fake_nvml(), proc, sock)


def _info(result: SampleResult) -> set[tuple[str, ...]]:
    return {tuple(p.labels[k] for k in KEYS) for p in result.points if p.name == "llm_gpu_pod_info"}


def _memory(result: SampleResult) -> dict[tuple[str, ...], float]:
    keys = ("gpu", "namespace", "pod", "container")
    return {
        tuple(p.labels[k] for k in keys): p.value
        for p in result.points
        if isinstance(p, Sample) and p.name == "llm_gpu_process_memory_used_bytes"
    }


def test_pod_info_for_exclusive_mig_and_shared_gpus(node: Node) -> None:
    source = node.source()
    try:
        result = source.sample()
    finally:
        source.close()
    assert result.partial_errors == []
    assert _info(result) == {
        ("0", UUID[0], "inference", "llama-70b-0", "vllm"),
        ("1", UUID[1], "inference", "llama-70b-0", "vllm"),
        # MIG devices: their physical GPU's index and UUID, one series per pod
        ("2", UUID[2], "inference", "mig-small-0", "app"),
        ("2", UUID[2], "inference", "mig-large-0", "app"),
        # a time-sliced GPU: every pod sharing it
        ("3", UUID[3], "team-a", "notebook-1", "jupyter"),
        ("3", UUID[3], "team-b", "embed-2", "embedder"),
    }
    assert all(isinstance(p, Sample) and p.value == 1.0 for p in result.points if p.name == "llm_gpu_pod_info")


def test_process_memory_is_attributed_per_container(node: Node) -> None:
    source = node.source()
    try:
        result = source.sample()
    finally:
        source.close()
    assert _memory(result) == {
        ("0", "inference", "llama-70b-0", "vllm"): 70_000 * MIB,
        ("1", "inference", "llama-70b-0", "vllm"): 69_000 * MIB,
        ("2", "inference", "mig-small-0", "app"): 9_000 * MIB,  # read from each MIG device's handle
        ("2", "inference", "mig-large-0", "app"): 40_000 * MIB,
        ("3", "team-a", "notebook-1", "jupyter"): 7_000 * MIB,  # two processes of one container, summed
        ("3", "team-b", "embed-2", "embedder"): 3_000 * MIB,  # Guaranteed QoS cgroup path
        ("3", "", "", ""): 500 * MIB,  # a host process; the exited one (memory not available) is left out
    }
    assert node.nvml.calls["nvmlDeviceGetComputeRunningProcesses"] == 2 + 2 + 1 + 1


def test_pod_labels_from_the_allow_list_only(node: Node) -> None:
    source = node.source(pod_labels=(("team", "label_team"), ("app.kubernetes.io/name", "label_app_kubernetes_io_name")))
    try:
        result = source.sample()
    finally:
        source.close()
    llama = [p for p in result.points if p.name == "llm_gpu_pod_info" and p.labels["pod"] == "llama-70b-0"]
    assert llama and all(
        p.labels["label_team"] == "llm-platform" and p.labels["label_app_kubernetes_io_name"] == "llama-70b" for p in llama
    )
    assert all("label_app_kubernetes_io_part_of" not in p.labels for p in result.points), "never all labels"
    host = [p for p in result.points if p.name == "llm_gpu_process_memory_used_bytes" and p.labels["pod"] == ""]
    assert host and host[0].labels["label_team"] == ""
    notebook = [p for p in result.points if p.name == "llm_gpu_process_memory_used_bytes" and p.labels["pod"] == "notebook-1"]
    assert notebook[0].labels["label_team"] == "research"


def test_without_a_pod_list_allocations_still_publish(node: Node) -> None:
    source = node.source(pods=False)
    try:
        result = source.sample()
    finally:
        source.close()
    assert len(_info(result)) == 6
    assert set(_memory(result)) == {(g, "", "", "") for g in "0123"}, "UIDs without a pod list name no pod"


def test_a_missing_socket_is_a_source_fault_and_recovers(node: Node, tmp_path: Path) -> None:
    other = tmp_path / "later.sock"
    source = GpuPodSource(PodResourcesClient(str(other), timeout=1.0), devices=NvmlDevices(node.nvml), proc_root=str(node.proc))
    try:
        with pytest.raises(SourceError) as err:
            source.sample()
        assert err.value.reason == "file_missing"
        with PodResourcesServer(other):
            assert len(_info(source.sample())) == 6
    finally:
        source.close()


def test_a_kubelet_error_fails_the_sample_and_the_next_one_recovers(node: Node) -> None:
    source = node.source()
    try:
        node.server.abort = (grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        with pytest.raises(SourceError) as err:
            source.sample()
        assert err.value.reason == "connection"
        node.server.abort = None
        assert len(_info(source.sample())) == 6
    finally:
        source.close()


def test_nvml_missing_is_a_partial_error(node: Node) -> None:
    source = node.source(nvml=FakeNvml([], library_missing=True))
    try:
        result = source.sample()
    finally:
        source.close()
    assert [e.reason for e in result.partial_errors] == ["library_not_found"]
    info = _info(result)
    assert ("", UUID[0], "inference", "llama-70b-0", "vllm") in info, "the device plugin's ID stands in as the uuid"
    assert _memory(result) == {}


def test_a_pod_list_failure_is_a_partial_error(node: Node) -> None:
    node.http.set("/pods", b"forbidden", status=403)
    source = node.source()
    try:
        result = source.sample()
    finally:
        source.close()
    assert [e.reason for e in result.partial_errors] == ["http_status"]
    assert "RBAC" in result.partial_errors[0].message
    assert len(_info(result)) == 6


def test_a_lost_gpu_is_a_partial_error(node: Node) -> None:
    source = node.source()
    try:
        source.sample()
        node.nvml.gpus[3].lost = True
        result = source.sample()
    finally:
        source.close()
    assert "gpu_lost" in [e.reason for e in result.partial_errors]
    assert ("0", "inference", "llama-70b-0", "vllm") in _memory(result)


class _GpuStub:
    """A GPU source: two series per GPU, as NVML's would be labelled."""

    name, interval, timeout = "gpu", 1.0, 0.9

    def sample(self) -> SampleResult:
        return SampleResult(
            [
                *(Sample("llm_gpu_utilization_ratio", {"gpu": str(i), "uuid": u}, 0.5) for i, u in enumerate(UUID)),
                Sample("llm_gpu_info", {"gpu": "0", "uuid": UUID[0], "name": "H200", "source": "nvml"}, 1.0),
            ]
        )

    def close(self) -> None:
        pass


def test_gpu_series_labels_only_for_exclusively_held_gpus(node: Node) -> None:
    source = node.source()
    wrapped = GpuSeriesLabels(_GpuStub(), source)
    try:
        assert {p.labels.get("pod") for p in wrapped.sample().points} == {None}, "no attribution yet: passed through"
        source.sample()
        points = wrapped.sample().points
    finally:
        source.close()
    util = {p.labels["gpu"]: p.labels for p in points if p.name == "llm_gpu_utilization_ratio"}
    assert (util["0"]["namespace"], util["0"]["pod"], util["0"]["container"]) == ("inference", "llama-70b-0", "vllm")
    assert util["1"]["pod"] == "llama-70b-0"
    for shared in ("2", "3", "4"):  # MIG-split, time-sliced, idle
        assert "pod" not in util[shared]
    assert wrapped.name == "gpu" and wrapped.interval == 1.0


def test_bad_nvml_process_reads_are_quiet(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    node.nvml.gpus[0].not_supported.add("nvmlDeviceGetComputeRunningProcesses")
    source = node.source()
    try:
        with caplog.at_level(logging.INFO, logger="exporter.kubernetes.attribution"):
            for _ in range(3):
                result = source.sample()
    finally:
        source.close()
    assert result.partial_errors == []
    assert ("0", "inference", "llama-70b-0", "vllm") not in _memory(result)
    assert len([r for r in caplog.records if "GPU 0" in r.getMessage()]) == 1, "logged once, not every sample"


def test_the_fake_nvml_calls_exist_in_nvidia_ml_py() -> None:
    """The fake re-implements only functions the real module has, with the errors it defines."""
    import pynvml

    for name in (
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlStructToFriendlyObject",
    ):
        assert callable(getattr(pynvml, name))
    for error in ("NVMLError_NotFound", "NVMLError_NoPermission", "NVMLError_NotSupported", "NVMLError_InvalidArgument"):
        assert issubclass(getattr(pynvml, error), pynvml.NVMLError)
    nvml = fake_nvml()
    nvml.nvmlInit()
    try:
        plain, mig, idle = (nvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 2, 4))
        with pytest.raises(pynvml.NVMLError_NotSupported):
            nvml.nvmlDeviceGetMigMode(plain)
        assert nvml.nvmlDeviceGetMigMode(idle) == [pynvml.NVML_DEVICE_MIG_DISABLE] * 2
        with pytest.raises(pynvml.NVMLError_NotFound):
            nvml.nvmlDeviceGetMigDeviceHandleByIndex(idle, 0)
        with pytest.raises(pynvml.NVMLError_NoPermission):
            nvml.nvmlDeviceGetComputeRunningProcesses(mig)
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            nvml.nvmlDeviceGetMigDeviceHandleByIndex(mig, 7)
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetMigDeviceHandleByIndex(mig, 1))
        assert [(p.pid, p.usedGpuMemory) for p in procs] == [(43001, 40_000 * MIB)]
        assert nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetMigDeviceHandleByIndex(mig, 0)).startswith("MIG-")
        gone = [
            p for p in nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(3)) if p.usedGpuMemory is None
        ]
        assert len(gone) == 1, "NVML_VALUE_NOT_AVAILABLE becomes None, as nvidia-ml-py does"
    finally:
        nvml.nvmlShutdown()


def test_the_real_nvml_source_wrapped(node: Node) -> None:
    """NvmlSource's own points (the fake GPUs' UUIDs) get the owner of GPU 0 and 1 only."""
    from exporter.gpu.nvml import NvmlSource

    source = node.source()
    gpu = GpuSeriesLabels(NvmlSource(1.0, 0.9, nvml=fake_nvml()), source)
    try:
        source.sample()
        points = gpu.sample().points
    finally:
        gpu.close()
        source.close()
    power = {p.labels["gpu"]: p.labels.get("pod") for p in points if p.name == "llm_gpu_power_watts"}
    assert power == {"0": "llama-70b-0", "1": "llama-70b-0", "2": None, "3": None, "4": None}
