"""The shipped stubs (exporter/kubernetes/kubelet_api/api_pb2*.py) are what api.proto compiles to,
and the proto keeps the kubelet's wire names and numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

from exporter.kubernetes.kubelet_api import api_pb2, api_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
PROTO = "exporter/kubernetes/kubelet_api/api.proto"


def _compiled(tmp_path: Path) -> descriptor_pb2.FileDescriptorProto:
    out = tmp_path / "api.pb"
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--descriptor_set_out={out}", PROTO],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    assert len(files) == 1
    for message in files[0].message_type:  # the Python generator leaves json_name out of what it embeds
        for f in message.field:
            f.ClearField("json_name")
    return files[0]


def test_shipped_module_matches_the_proto(tmp_path: Path) -> None:
    shipped = descriptor_pb2.FileDescriptorProto.FromString(api_pb2.DESCRIPTOR.serialized_pb)
    assert shipped == _compiled(tmp_path), "stale stubs: run scripts/gen_podresources.sh"


def test_grpc_stub_calls_the_kubelets_method(tmp_path: Path) -> None:
    generated = tmp_path / "gen"
    generated.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", f"--grpc_python_out={generated}", PROTO],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    fresh = (generated / PROTO.replace(".proto", "_pb2_grpc.py")).read_text()
    shipped = Path(api_pb2_grpc.__file__).read_text()
    drop = ("GRPC_GENERATED_VERSION = ",)  # the generator's own version may be newer than the one that wrote the file
    same = [line for line in fresh.splitlines() if not line.startswith(drop)]
    assert same == [line for line in shipped.splitlines() if not line.startswith(drop)], (
        "stale stubs: run scripts/gen_podresources.sh"
    )
    assert "'/v1.PodResourcesLister/List'" in shipped


def test_wire_names_and_numbers_are_the_kubelets() -> None:
    """Field numbers of k8s.io/kubelet/pkg/apis/podresources/v1/api.proto (a renumbering would read garbage)."""
    d = api_pb2.DESCRIPTOR
    assert d.package == "v1"
    assert [m.name for m in d.services_by_name["PodResourcesLister"].methods] == ["List"]
    numbers = {
        "ListPodResourcesResponse": {"pod_resources": 1},
        "PodResources": {"name": 1, "namespace": 2, "containers": 3},
        "ContainerResources": {"name": 1, "devices": 2},
        "ContainerDevices": {"resource_name": 1, "device_ids": 2},
    }
    for message, fields in numbers.items():
        assert {f.name: f.number for f in d.message_types_by_name[message].fields} == fields


def test_a_newer_kubelets_extra_fields_are_skipped() -> None:
    """cpu_ids (3), memory (4), dynamic_resources (5) and topology (3 of ContainerDevices) of a
    newer kubelet parse as unknown fields."""
    device = api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-1"]).SerializeToString()
    topology = b"\x1a\x04\x0a\x02\x08\x01"  # field 3 (TopologyInfo{nodes: [{ID: 1}]})
    container = (
        api_pb2.ContainerResources(name="c").SerializeToString() + b"\x12" + bytes([len(device + topology)]) + device + topology
    )
    container += b"\x1a\x02\x01\x02"  # cpu_ids, packed
    parsed = api_pb2.ContainerResources.FromString(container)
    assert parsed.name == "c" and list(parsed.devices[0].device_ids) == ["GPU-1"]
