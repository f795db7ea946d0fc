"""What the Kubernetes tests run against: a real gRPC PodResources server on a unix socket,
a local HTTP server for the pod list and engine /metrics, a proc root of cgroup files,
fake GPUs (tests/fakes/pynvml_fake.py), and the hostile pod lists of issue 25 (a 31 MiB
list, 110 pods with 256 KiB of annotations each, a deeply nested pod, ports in non-ASCII
digits). Everything started here is stopped by its context manager; every address is
127.0.0.1. Moved from tests/kubernetes/ (issue 24: one kit); waits are
tests/support/waiting.py's."""

from __future__ import annotations

import copy
import json
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc

from exporter.kubernetes.kubelet_api import api_pb2, api_pb2_grpc
from exporter.kubernetes.pods import Pod, parse_pod_list
from tests.fakes.pynvml_fake import MIB, FakeGpu, FakeMig, FakeNvml

FIXTURES = Path(__file__).resolve().parents[1] / "kubernetes" / "fixtures"
NODE = "gpu-node-1"

# GPUs of the fixture node: 0-1 held by llama-70b-0, 2 split by MIG, 3 time-sliced, 4 idle
UUID = [
    "GPU-8a3f0c41-1d2e-4b7a-9c55-2e6f1a0b3c4d",
    "GPU-2b7e5d90-4c1a-4e8f-a3b2-7d6c5e4f3a21",
    "GPU-c41d2e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
    "GPU-d9e8f7a6-b5c4-4d3e-9f2a-1b0c9d8e7f6a",
    "GPU-0f1e2d3c-4b5a-4968-8776-5a4b3c2d1e0f",
]
MIG_SMALL = "MIG-5e4d3c2b-1a09-5f8e-9d7c-6b5a4f3e2d1c"
MIG_LARGE = "MIG-7a6b5c4d-3e2f-5a1b-8c9d-0e1f2a3b4c5d"

# pod UIDs of tests/kubernetes/fixtures/kubelet_pods.json
LLAMA = "7c1e4f0a-2b3d-4e5f-8a9b-0c1d2e3f4a5b"
SGLANG = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d"
BROKEN = "3f2e1d0c-9b8a-4c7d-8e6f-5a4b3c2d1e0f"
MIG_SMALL_POD = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
MIG_LARGE_POD = "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e"
NOTEBOOK = "4c5d6e7f-8a9b-4c0d-9e1f-2a3b4c5d6e7f"
EMBED = "6e7f8a9b-0c1d-4e2f-8a3b-4c5d6e7f8a9b"

# host PIDs NVML reports (cgroup files for them are written by write_gpu_proc)
PID_LLAMA, PID_LLAMA_WORKER, PID_MIG_SMALL, PID_MIG_LARGE = 41001, 41002, 42001, 43001
PID_NOTEBOOK, PID_NOTEBOOK_2, PID_EMBED, PID_HOST, PID_GONE = 44001, 44002, 45001, 46001, 47001


def pods_json() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / "kubelet_pods.json").read_text())
    return doc


def runtime_id(pods: dict[str, Any], uid: str, container: str) -> str:
    """The containerd ID (64 hex) of a container in the fixture."""
    pod = next(p for p in pods["items"] if p["metadata"]["uid"] == uid)
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container)
    return str(status["containerID"]).split("://", 1)[1]


def local_pods(ports: dict[str, int] | None = None) -> dict[str, Any]:
    """The fixture with every pod, host and port address turned into 127.0.0.1 and the given
    pod -> port annotations, so that nothing a test discovers points off this machine."""
    doc = copy.deepcopy(pods_json())
    for item in doc["items"]:
        status = item["status"]
        status["hostIP"] = "127.0.0.1"
        status["hostIPs"] = [{"ip": "127.0.0.1"}]
        if "podIP" in status:
            status["podIP"] = "127.0.0.1"
            status["podIPs"] = [{"ip": "127.0.0.1"}]
        port = (ports or {}).get(item["metadata"]["uid"])
        if port is not None:
            item["metadata"].setdefault("annotations", {})["llm-layer-exporter.io/port"] = str(port)
    return doc


def cgroup_v2(uid: str, container_id: str, qos: str = "burstable") -> str:
    """A systemd-driver, containerd, cgroup v2 line for a container of pod ``uid``."""
    u = uid.replace("-", "_")
    return f"0::/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice/cri-containerd-{container_id}.scope\n"


def write_proc(root: Path, pid: int, cgroup: str, ppid: int = 1, comm: str = "python3") -> None:
    """``<root>/<pid>/cgroup`` and ``stat`` as the kernel writes them (the fields we read)."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "cgroup").write_text(cgroup)
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 0 0 0\n")


# --------------------------------------------------------------------------- the kubelet's PodResources


def allocation(namespace: str, pod: str, containers: dict[str, list[tuple[str, list[str]]]]) -> Any:
    return api_pb2.PodResources(
        name=pod,
        namespace=namespace,
        containers=[
            api_pb2.ContainerResources(
                name=name, devices=[api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in devs]
            )
            for name, devs in containers.items()
        ],
    )


def node_allocations() -> Any:
    """What the kubelet of the fixture node answers: exclusive GPUs, MIG devices, a shared GPU."""
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            allocation("inference", "llama-70b-0", {"vllm": [("nvidia.com/gpu", [UUID[0], UUID[1]])], "log-shipper": []}),
            allocation("inference", "mig-small-0", {"app": [("nvidia.com/mig-1g.18gb", [MIG_SMALL])]}),
            allocation("inference", "mig-large-0", {"app": [("nvidia.com/mig-3g.71gb", [MIG_LARGE])]}),
            allocation(
                "team-a", "notebook-1", {"jupyter": [("nvidia.com/gpu", [UUID[3] + "::0"]), ("example.com/fpga", ["fpga-0"])]}
            ),
            allocation("team-b", "embed-2", {"embedder": [("nvidia.com/gpu", [UUID[3] + "::1"])]}),
            allocation("inference", "sglang-qwen-7d9f6c5b8-tq2lm", {"sglang": []}),
            allocation("kube-system", "nvidia-device-plugin-daemonset-x8k2p", {"nvidia-device-plugin-ctr": []}),
        ]
    )


class _Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]  # generated, unchecked (pyproject)
    def __init__(self, server: PodResourcesServer) -> None:
        self.server = server

    def List(self, request: Any, context: Any) -> Any:
        self.server.calls += 1
        if self.server.delay:
            time.sleep(self.server.delay)
        if self.server.abort is not None:
            context.abort(self.server.abort[0], self.server.abort[1])
        return self.server.response


class PodResourcesServer:
    """A real gRPC server implementing ``v1.PodResourcesLister/List`` on a unix socket."""

    def __init__(self, socket_path: Path, response: Any = None, register: bool = True) -> None:
        self.socket_path = socket_path
        self.response = response if response is not None else node_allocations()
        self.abort: tuple[grpc.StatusCode, str] | None = None
        self.delay = 0.0
        self.calls = 0
        self._register = register
        self._server: Any = None

    def __enter__(self) -> PodResourcesServer:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        if self._register:
            api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        self._server.add_insecure_port("unix:" + str(self.socket_path))
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=0).wait(5)


# --------------------------------------------------------------------------- HTTP: the pod list, engines


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    content_type: str = "application/json"
    #: sent with Transfer-Encoding: chunked (as the kubelet's Go server streams a large list), 64 KiB a chunk
    chunked: bool = False


@dataclass
class LocalHTTP:
    """A threaded HTTP server on 127.0.0.1 with mutable routes; records request headers."""

    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    port: int = 0
    _httpd: Any = None
    _thread: Any = None

    def set(
        self,
        path: str,
        body: bytes | str | dict[str, Any],
        status: int = 200,
        content_type: str | None = None,
        chunked: bool = False,
    ) -> None:
        if isinstance(body, dict):
            data, ctype = json.dumps(body).encode(), "application/json"
        elif isinstance(body, str):
            data, ctype = body.encode(), "text/plain; version=0.0.4"
        else:
            data, ctype = body, "application/octet-stream"
        self.routes[path] = Route(data, status, content_type or ctype, chunked)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> LocalHTTP:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                outer.requests.append((self.path, dict(self.headers.items())))
                route = outer.routes.get(path)
                if route is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(route.status)
                self.send_header("Content-Type", route.content_type)
                if not route.chunked:
                    self.send_header("Content-Length", str(len(route.body)))
                    self.end_headers()
                    try:
                        self.wfile.write(route.body)
                    except OSError:  # the client gave up (its timeout, its cap) and hung up
                        self.close_connection = True
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                body, step = memoryview(route.body), 64 * 1024
                try:
                    for at in range(0, len(body), step):
                        piece = body[at : at + step]
                        self.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:  # the client stopped reading at its cap and hung up
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


# --------------------------------------------------------------------------- GPUs and processes


def node_gpus() -> list[FakeGpu]:
    """GPUs 0-1 (llama), 2 (MIG: two devices), 3 (time-sliced: notebook + embedder + a host process), 4 idle."""
    return [
        FakeGpu(uuid=UUID[0], processes=[(PID_LLAMA, 70_000 * MIB)]),
        FakeGpu(uuid=UUID[1], processes=[(PID_LLAMA_WORKER, 69_000 * MIB)]),
        FakeGpu(
            uuid=UUID[2],
            mig_capable=True,
            mig_enabled=True,
            mig_devices=[FakeMig(MIG_SMALL, [(PID_MIG_SMALL, 9_000 * MIB)]), FakeMig(MIG_LARGE, [(PID_MIG_LARGE, 40_000 * MIB)])],
        ),
        FakeGpu(
            uuid=UUID[3],
            processes=[
                (PID_NOTEBOOK, 6_000 * MIB),
                (PID_NOTEBOOK_2, 1_000 * MIB),
                (PID_EMBED, 3_000 * MIB),
                (PID_HOST, 500 * MIB),
                (PID_GONE, None),
            ],
        ),
        FakeGpu(uuid=UUID[4], mig_capable=True),
    ]


def write_gpu_proc(root: Path) -> None:
    """The cgroup files of the processes node_gpus() reports (PID_GONE has none: it exited)."""
    pods = pods_json()
    write_proc(root, PID_LLAMA, cgroup_v2(LLAMA, runtime_id(pods, LLAMA, "vllm")))
    write_proc(root, PID_LLAMA_WORKER, cgroup_v2(LLAMA, runtime_id(pods, LLAMA, "vllm")), ppid=PID_LLAMA)
    write_proc(root, PID_MIG_SMALL, cgroup_v2(MIG_SMALL_POD, runtime_id(pods, MIG_SMALL_POD, "app")))
    write_proc(root, PID_MIG_LARGE, cgroup_v2(MIG_LARGE_POD, runtime_id(pods, MIG_LARGE_POD, "app")))
    write_proc(root, PID_NOTEBOOK, cgroup_v2(NOTEBOOK, runtime_id(pods, NOTEBOOK, "jupyter"), "besteffort"))
    write_proc(root, PID_NOTEBOOK_2, cgroup_v2(NOTEBOOK, runtime_id(pods, NOTEBOOK, "jupyter"), "besteffort"), ppid=PID_NOTEBOOK)
    u = EMBED.replace("-", "_")  # Guaranteed QoS: no QoS level in the path
    write_proc(
        root, PID_EMBED, f"0::/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{runtime_id(pods, EMBED, 'embedder')}.scope\n"
    )
    write_proc(root, PID_HOST, "0::/system.slice/ollama.service\n")


def fake_nvml(gpus: list[FakeGpu] | None = None, **kw: Any) -> FakeNvml:
    return FakeNvml(gpus if gpus is not None else node_gpus(), **kw)


# --------------------------------------------------------------------------- hostile pod lists (issue 25)

BLOB = "tenant.example.com/blob"
#: the issue's cases: a 31 MiB pod list, and 110 pods (the kubelet's default maximum) with 256 KiB of annotations each
BIG_LIST_BYTES = 31 * 1024 * 1024
FLOOD_PODS, FLOOD_ANNOTATION_BYTES = 110, 256 * 1024


def tenant_pod(index: int, annotations: dict[str, str] | None = None, ip: str = "127.0.0.1") -> dict[str, Any]:
    """A Running pod of the fixture's shape (llama-70b-0's), with its own UID and name and ``annotations``."""
    item: dict[str, Any] = copy.deepcopy(next(i for i in pods_json()["items"] if i["metadata"]["uid"] == LLAMA))
    meta = item["metadata"]
    meta["uid"] = f"00000000-0000-4000-8000-{index:012d}"
    meta["name"] = f"tenant-{index}"
    meta["namespace"] = "tenants"
    meta["annotations"] = dict(annotations or {})
    item["status"]["podIP"] = ip
    item["status"]["podIPs"] = [{"ip": ip}]
    return item


def with_pods(doc: dict[str, Any], extra: list[dict[str, Any]]) -> dict[str, Any]:
    """``doc`` (a PodList) with ``extra`` items appended (a copy)."""
    out = dict(doc)
    out["items"] = list(doc["items"]) + extra
    return out


def annotation_flood(base: dict[str, Any], pods: int = FLOOD_PODS, each: int = FLOOD_ANNOTATION_BYTES) -> bytes:
    """``base`` plus ``pods`` annotated tenant pods carrying ``each`` bytes of annotations apiece."""
    blob = "x" * (each - 64)
    extra = [
        tenant_pod(i, {"llm-layer-exporter.io/scrape": "true", "llm-layer-exporter.io/port": "9", BLOB: blob})
        for i in range(pods)
    ]
    return json.dumps(with_pods(base, extra)).encode()


def big_pod_list(base: dict[str, Any], total: int = BIG_LIST_BYTES) -> bytes:
    """``base`` plus tenant pods with long environment values, ``total`` bytes or a little more."""
    filler = {"name": "PAD", "value": "p" * (60 * 1024)}
    sample = tenant_pod(10_000)
    sample["spec"]["containers"][0]["env"] = [filler] * 8
    each = len(json.dumps(sample)) + 2
    n = max(0, -(-(total - len(json.dumps(base))) // each))
    extra = []
    for i in range(n):
        pod = copy.deepcopy(sample)
        pod["metadata"]["uid"] = f"00000000-0000-4000-9000-{i:012d}"
        pod["metadata"]["name"] = f"padded-{i}"
        extra.append(pod)
    return json.dumps(with_pods(base, extra)).encode()


def deep_pod_list(base: dict[str, Any], depth: int = 1_000_000) -> bytes:
    """``base`` with one pod whose spec holds ``depth`` nested arrays (a RecursionError for json.loads)."""
    doc = with_pods(base, [tenant_pod(20_000)])
    text = json.dumps(doc).encode()
    marker = b'"spec": {'
    at = text.rindex(marker) + len(marker)
    return text[:at] + b'"deep": ' + b"[" * depth + b"]" * depth + b", " + text[at:]


#: port annotations that str.isdigit() accepts and int() turns into a number (or a ValueError: '²')
NON_ASCII_PORTS = ("８０８０", "٨٠", "²")


def parse_pod(item: Any) -> Pod | None:
    """One PodList item given as Python objects, read as the exporter reads a pod list; None when left out."""
    pods, _ = parse_pod_list(json.dumps({"items": [item]}).encode())
    return pods[0] if pods else None
