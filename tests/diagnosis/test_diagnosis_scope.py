"""One verdict per engine over its own GPUs and process (issue 20, item 1), and its JSON/metrics.

The scenes of issue 20's first bullet are built the way the other diagnosis tests build
theirs (tests/diagnosis/diag_points.py): each is first judged as one service over the whole
node (the old way, which gets it wrong) and then per engine scope.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from exporter.diagnosis.engine import DiagnosisEngine, Verdict
from exporter.diagnosis.fanout import STALE_CYCLES, NodeDiagnosis, NodeVerdict
from exporter.diagnosis.scope import EngineSpec, ProcessGpus, parse_visible_devices, resolve, scoped
from exporter.samples import Point, Sample
from exporter.schema import SPECS
from exporter.store import Snapshot, SourceState
from tests.diagnosis.diag_points import GIB, engine, gpu, histogram, process, samples
from tests.fakes.pynvml_fake import FakeGpu, FakeNvml

if TYPE_CHECKING:
    from exporter.config import Config


def as_server(points: list[Point], server: str) -> list[Point]:
    """diag_points' engine series (server "sim") re-labelled as engine ``server``."""
    return [replace(p, labels={**p.labels, "server": server}) if "server" in p.labels else p for p in points]


def overloaded_a_throttled_b(i: int) -> list[Point]:
    """Engine A over capacity on GPU 0 (compute-bound, 30 waiting, TTFT 4 s); engine B healthy
    on GPU 1, which runs hot and throttles (clock at 71 % of max, power cap and thermal reasons)."""
    n = 30 * (i + 1)
    a = [
        *engine(waiting=30, running=16, kv=0.5),
        histogram("llm_request_ttft_seconds", [4.0] * n),
        histogram("llm_scheduler_queue_seconds", [3.0] * n),
    ]
    b = [*engine(waiting=0, running=4, kv=0.3), histogram("llm_request_ttft_seconds", [0.2] * n)]
    return [
        *gpu(0, util=0.99, sm=0.92, tensor=0.9, dram=0.3, mem_used=100 * GIB, power=600),
        *gpu(1, util=0.95, sm=0.9, tensor=0.3, dram=0.4, mem_used=100 * GIB, power=700, clock=1400e6, temp=90,
             reasons=("sw_power_cap", "hw_thermal_slowdown")),
        *as_server(a, "A"),
        *as_server(b, "B"),
    ]  # fmt: skip


def host_bound_a_busy_b(i: int) -> list[Point]:
    """Engine A batch-1 and host-bound (a thread at a full core, its GPU 0 at 10 % SM, TTFT 4 s);
    engine B healthy and busy on GPU 1 (SM 95 %)."""
    n = 30 * (i + 1)
    a = [
        *engine(waiting=6, running=1, kv=0.1),
        histogram("llm_request_ttft_seconds", [4.0] * n),
        histogram("llm_scheduler_queue_seconds", [3.0] * n),
        *process(1.0, demand=1.0),
    ]
    b = [*engine(waiting=0, running=24, kv=0.6), histogram("llm_request_ttft_seconds", [0.3] * n), *process(0.5, demand=0.5)]
    return [
        *gpu(0, util=0.35, sm=0.1, tensor=0.02, dram=0.1, mem_used=60 * GIB, power=200),
        *gpu(1, util=0.99, sm=0.95, tensor=0.7, dram=0.5, mem_used=120 * GIB, power=650),
        *as_server(a, "A"),
        *as_server(b, "B"),
    ]


TWO = [EngineSpec("A", ("0",)), EngineSpec("B", ("1",))]


def judge(
    scene: Callable[[int], list[Point]], cycles: int = 6, specs: Sequence[EngineSpec] = TWO, **kw: Any
) -> tuple[Verdict, NodeVerdict]:
    """(the whole node judged as one service, the per-engine NodeVerdict) after ``cycles``."""
    whole = DiagnosisEngine()
    node = NodeDiagnosis(engines=specs, **kw)
    for i in range(cycles):
        snap = Snapshot(1000.0 + i, scene(i), {})
        old = whole.observe(snap)
        new = node.observe(snap)
    return old, new


# --------------------------------------------------------------------------- the scenes


def test_a_throttled_gpu_of_engine_b_is_never_engine_a_primary() -> None:
    old, new = judge(overloaded_a_throttled_b)
    # judged as one service, the hot GPU 1 is a cause of A's queue (with the old ranking, the
    # primary: issue 20); which cause wins there is the ranking's business, that it is a
    # candidate at all is the scope's
    assert "power_or_thermal_throttling" in old.holding
    assert any("on GPU 1" in c.summary for c in old.bottlenecks if c.cause == "power_or_thermal_throttling")
    a, b = new.engines["A"], new.engines["B"]
    assert a.state == "degraded" and a.primary is not None
    assert a.primary.cause == "compute_bound" and a.primary.summary.endswith("on GPU 0"), a.primary
    assert "power_or_thermal_throttling" not in a.holding
    assert all('gpu="1"' not in k for c in a.bottlenecks for k in c.evidence)
    # B's users are fine: healthy, its throttled GPU a warning of B's, not a bottleneck
    assert b.state == "healthy" and b.primary is None
    assert [(c.cause, c.role) for c in b.bottlenecks] == [("power_or_thermal_throttling", "warning")]


def test_a_host_bound_engine_beside_a_busy_one_keeps_its_serial_host_ceiling() -> None:
    old, new = judge(host_bound_a_busy_b)
    # as one service: the busy GPU 1 hides A's idle SMs and the two pods read as one TP group
    assert old.primary is not None and old.primary.cause != "serial_host_ceiling"
    assert "gpu_imbalance" in old.holding
    a, b = new.engines["A"], new.engines["B"]
    assert a.primary is not None and a.primary.cause == "serial_host_ceiling", a.primary
    for v in (a, b):
        assert "gpu_imbalance" not in v.holding
        assert "kv_fragmentation_or_capacity_misjudged" not in v.holding
    assert b.state == "healthy"


# --------------------------------------------------------------------------- where the GPUs come from


def _snap(points: list[Point], sources: dict[str, SourceState] | None = None) -> Snapshot:
    return Snapshot(1000.0, points, sources or {})


TWO_GPUS = [*gpu(0, util=0.5), *gpu(1, util=0.5)]


def test_configured_gpus_by_index_or_uuid_come_first() -> None:
    pod = Sample("llm_gpu_pod_info", {"gpu": "0", "uuid": "GPU-0", "namespace": "ns", "pod": "a", "container": "c"}, 1.0)
    scopes = resolve([EngineSpec("ns/a", ("GPU-1",)), EngineSpec("b", ("0", "7"))], _snap([*TWO_GPUS, pod]))
    assert (scopes["ns/a"].gpus, scopes["ns/a"].origin, scopes["ns/a"].notice) == (("1",), "config", None)
    assert scopes["b"].gpus == ("0", "7") and scopes["b"].origin == "config"
    assert scopes["b"].notice == "engine b: configured GPU(s) 7 not reported by the GPU source"


def test_kubernetes_attribution_gives_a_pods_gpus() -> None:
    info = [
        Sample("llm_gpu_pod_info", {"gpu": "1", "uuid": "GPU-1", "namespace": "ml", "pod": "llama", "container": "c"}, 1.0),
        Sample("llm_gpu_pod_info", {"gpu": "0", "uuid": "GPU-0", "namespace": "ml", "pod": "other", "container": "c"}, 1.0),
    ]
    # a discovered engine is named <namespace>/<pod>; a configured one is matched by its series' pod labels
    labelled = Sample("llm_scheduler_requests_waiting", {"server": "mine", "namespace": "ml", "pod": "other"}, 0.0)
    scopes = resolve([EngineSpec("ml/llama"), EngineSpec("mine")], _snap([*TWO_GPUS, *info, labelled]))
    assert (scopes["ml/llama"].gpus, scopes["ml/llama"].origin) == (("1",), "kubernetes")
    assert (scopes["mine"].gpus, scopes["mine"].origin) == (("0",), "kubernetes")


@pytest.fixture
def engine_process() -> Iterator[tuple[int, int]]:
    """A real process tree: a Python root (CUDA_VISIBLE_DEVICES=GPU-1) with one child; (root, child) PIDs."""
    code = "import subprocess, time; c = subprocess.Popen(['sleep', '30']); print(c.pid, flush=True); time.sleep(30)"
    env = {"CUDA_VISIBLE_DEVICES": "GPU-1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-c", code, "scope-test-marker-7c1"], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        yield proc.pid, child
    finally:
        proc.kill()
        proc.wait(timeout=10)
        subprocess.run(["kill", str(child)], check=False, capture_output=True)


def test_nvml_process_list_names_the_gpus_of_the_engines_process_tree(engine_process: tuple[int, int]) -> None:
    root, child = engine_process
    nvml = FakeNvml([FakeGpu(uuid="GPU-0", processes=[(999999, 1 << 30)]), FakeGpu(uuid="GPU-1", processes=[(child, 1 << 30)])])
    finder = ProcessGpus(nvml=nvml)
    assert child in [c.pid for c in psutil.Process(root).children()]  # printed after it started
    scope = resolve([EngineSpec("e", pid=root)], _snap(TWO_GPUS), finder)["e"]
    assert (scope.gpus, scope.origin, scope.notice) == (("1",), "process", None)


def test_cuda_visible_devices_of_the_process_when_nvml_is_absent(engine_process: tuple[int, int]) -> None:
    root, _ = engine_process
    finder = ProcessGpus(use_nvml=False)
    by_substring = resolve([EngineSpec("e", process="scope-test-marker-7c1")], _snap(TWO_GPUS), finder)["e"]
    by_pid = resolve([EngineSpec("f", pid=root)], _snap(TWO_GPUS), finder)["f"]
    for scope in (by_substring, by_pid):
        assert (scope.gpus, scope.origin) == (("1",), "process")


@pytest.mark.parametrize(
    ("value", "gpus"),
    [("0,1", ("0", "1")), ("1", ("1",)), ("GPU-1", ("1",)), ("GPU-", ()), ("", ()), ("-1", ()), ("1,-1,0", ("1",))],
)
def test_cuda_visible_devices_reads_like_cuda(value: str, gpus: tuple[str, ...]) -> None:
    """Indexes or unique UUID prefixes; CUDA stops at the first invalid entry ("-1" hides every GPU)."""
    assert parse_visible_devices(value, {"GPU-0": "0", "GPU-1": "1"}) == gpus


def test_without_any_source_an_engine_gets_every_gpu_with_a_notice() -> None:
    scopes = resolve([EngineSpec("e", pid=2**22 + 12345)], _snap(TWO_GPUS), ProcessGpus(use_nvml=False))
    assert (scopes["e"].gpus, scopes["e"].origin) == (("0", "1"), "node")
    assert scopes["e"].notice is not None and "every GPU of the node (0, 1)" in scopes["e"].notice
    one = resolve([EngineSpec("e")], _snap(gpu(0, util=0.5)))["e"]
    assert (one.gpus, one.origin, one.notice) == (("0",), "node", None)  # one GPU: nothing guessed


def test_a_scoped_snapshot_holds_the_engine_its_gpus_and_no_other_engines_sources() -> None:
    up, down = SourceState("x", 1.0), SourceState("y", 1.0)
    sources = {"gpu": up, "engine:A": up, "engine:B": down, "process:B": down, "kubernetes:discovery": up}
    points = [
        *TWO_GPUS,
        *as_server(engine(), "A"),
        *as_server(engine(), "B"),
        Sample("llm_parallel_group_gpus", {"group": "all"}, 2),
    ]
    view = scoped(_snap(points, sources), "A", ["0"], ["A", "B"])
    assert {p.labels.get("server") for p in view.points} == {None, "A"}
    assert {p.labels["gpu"] for p in view.points if "gpu" in p.labels} == {"0"}
    assert not view.find("llm_parallel_group_gpus")
    assert sorted(view.sources) == ["engine:A", "gpu", "kubernetes:discovery"]


# --------------------------------------------------------------------------- fan-out, JSON, metrics


def test_a_gpu_no_engine_uses_is_judged_for_hardware_warnings_only() -> None:
    def scene(i: int) -> list[Point]:
        hot = gpu(2, util=0.9, sm=0.9, tensor=0.9, dram=0.3, power=700, clock=1300e6, reasons=("hw_thermal_slowdown",))
        return [*overloaded_a_throttled_b(i), *hot]

    _, node = judge(scene, specs=[EngineSpec("A", ("0",)), EngineSpec("B", ("1",))])
    assert node.spare_gpus == ("2",)
    assert [(c.cause, c.role) for c in node.spare_warnings] == [("power_or_thermal_throttling", "warning")]
    assert "on GPU 2" in node.spare_warnings[0].summary
    for v in node.engines.values():
        assert all("GPU 2" not in c.summary for c in v.bottlenecks)


def test_every_engine_gets_labelled_series_and_the_node_body_takes_the_worst() -> None:
    clock = [5000.0]
    node = NodeDiagnosis(engines=TWO, interval=1.0, clock=lambda: clock[0])
    for i in range(6):
        node.observe(Snapshot(1000.0 + i, overloaded_a_throttled_b(i), {}))
    pts = samples(node.latest.points())
    for p in pts:
        assert "engine" in p.labels and set(p.labels) == set(SPECS[p.name].labels), p
    state = {(p.labels["engine"], p.labels["state"]): p.value for p in pts if p.name == "llm_service_state"}
    assert state[("A", "degraded")] == 1 and state[("B", "healthy")] == 1
    primary = {(p.labels["engine"], p.labels["cause"]) for p in pts if p.name == "llm_bottleneck_primary" and p.value == 1}
    assert primary == {("A", "compute_bound")}

    body = node.body()
    assert body is not None
    assert (body["state"], body["engine"], body["primary"]["cause"]) == ("degraded", "A", "compute_bound")
    assert body["engines"]["B"]["state"] == "healthy" and body["age_seconds"] == 0.0
    one = node.body("B")
    assert one is not None and "engines" not in one and one["state"] == "healthy"
    assert set(one) == set(node.latest.engines["B"].as_dict()) | {"age_seconds"}
    assert node.body("nope") is None
    # no cycle for more than three of them: unknown, with a notice saying why
    clock[0] += STALE_CYCLES * 1.0 + 0.5
    stale = node.body()
    assert stale is not None and stale["state"] == "unknown" and stale["primary"] is None
    assert stale["notices"][0].startswith("verdict is 4 s old, more than 3 diagnosis cycles of 1 s")
    assert all(v["state"] == "unknown" for v in stale["engines"].values())


def test_one_engine_keeps_the_old_body_and_a_node_without_engines_labels_engine_empty() -> None:
    node = NodeDiagnosis(engines=[EngineSpec("sim")])
    for i in range(3):
        node.observe(Snapshot(1000.0 + i, [*gpu(0, util=0.5, sm=0.4, tensor=0.1, dram=0.3), *engine()], {}))
    body = node.body()
    assert body is not None and set(body) == set(node.latest.engines["sim"].as_dict()) | {"age_seconds"}
    gpu_only = NodeDiagnosis()
    gpu_only.observe(Snapshot(1000.0, gpu(0, util=0.5), {}))
    assert {p.labels["engine"] for p in gpu_only.latest.points()} == {""}
    gpu_body = gpu_only.body()
    assert gpu_body is not None and gpu_body["state"] == "unknown"


def test_a_discovered_engine_is_judged_and_forgotten_when_its_source_goes() -> None:
    up = SourceState("x", 1.0)
    node = NodeDiagnosis()
    node.observe(Snapshot(1000.0, [*gpu(0, util=0.5), *as_server(engine(), "ns/p")], {"engine:ns/p": up}))
    assert list(node.latest.engines) == ["ns/p"] and node.engine("ns/p") is not None
    node.observe(Snapshot(1001.0, gpu(0, util=0.5), {}))
    assert list(node.latest.engines) == [""] and node.engine("ns/p") is None


# --------------------------------------------------------------------------- configuration


def _load(argv: list[str], environ: dict[str, str] | None = None) -> Config:
    import argparse

    from exporter.config import add_serve_arguments, load_config

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return load_config(parser.parse_args(argv), environ or {})


def test_engine_gpus_by_flag_environment_and_file(tmp_path: Path) -> None:
    cfg = _load(["--engine", "http://127.0.0.1:1", "--engine-gpus", "1, GPU-ab12"])
    assert cfg.engines[0].gpus == ("1", "GPU-ab12")
    cfg = _load(["--engine", "http://127.0.0.1:1"], {"LLM_EXPORTER_ENGINE_GPUS": "0,0,3"})
    assert cfg.engines[0].gpus == ("0", "3")
    path = tmp_path / "c.yaml"
    path.write_text(
        "engines:\n  - {url: 'http://127.0.0.1:1', name: a, gpus: [0, 'GPU-x']}\n  - {url: 'http://127.0.0.1:2', name: b}\n"
    )
    cfg = _load(["--config", str(path)])
    assert [e.gpus for e in cfg.engines] == [("0", "GPU-x"), ()]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--engine-gpus", "0"], "--engine-gpus: needs an --engine to attach to"),
        (
            ["--engine", "http://127.0.0.1:1", "--engine-gpus", "zero"],
            "--engine-gpus: expected GPU indexes (0, 1, ...) or UUIDs (GPU-...), got 'zero'",
        ),
        (
            ["--engine", "http://127.0.0.1:1", "--engine-gpus", "-1"],
            "--engine-gpus: expected GPU indexes (0, 1, ...) or UUIDs (GPU-...), got '-1'",
        ),
    ],
)
def test_a_bad_engine_gpus_setting_is_one_named_line(argv: list[str], message: str) -> None:
    from exporter.errors import UsageError

    with pytest.raises(UsageError) as err:
        _load(argv)
    assert str(err.value) == message


def test_a_bad_gpus_entry_in_the_file_names_the_engine(tmp_path: Path) -> None:
    from exporter.errors import UsageError

    path = tmp_path / "c.yaml"
    path.write_text("engines:\n  - {url: 'http://127.0.0.1:1', gpus: []}\n")
    with pytest.raises(UsageError) as err:
        _load(["--config", str(path)])
    assert str(err.value) == f"{path}: engines[0]: gpus: expected a non-empty list of GPU indexes or UUIDs"


def test_a_process_s_gpus_are_looked_up_again_only_after_the_refresh() -> None:
    looks: list[str] = []
    now = [0.0]

    def find_pid(spec: EngineSpec) -> int | None:
        looks.append(spec.name)
        return None  # not found: the lookup falls through to the node's GPUs

    finder = ProcessGpus(use_nvml=False, refresh=30.0, clock=lambda: now[0], find_pid=find_pid)
    for t in (0.0, 10.0, 29.9, 30.0, 31.0):
        now[0] = t
        scope = resolve([EngineSpec("e", process="vllm serve")], _snap(TWO_GPUS), finder)["e"]
        assert scope.origin == "node"
    assert looks == ["e", "e"]  # at 0 s and at 30 s


def test_discovered_pods_are_judged_on_the_gpus_kubernetes_attributes() -> None:
    up = SourceState("x", 1.0)
    info = [
        Sample("llm_gpu_pod_info", {"gpu": g, "uuid": f"GPU-{g}", "namespace": "ml", "pod": p, "container": "c"}, 1.0)
        for g, p in (("0", "a"), ("1", "b"))
    ]
    node = NodeDiagnosis()

    def scene(i: int) -> list[Point]:
        points = overloaded_a_throttled_b(i)  # engines A and B become the discovered pods ml/a and ml/b
        renamed = [
            replace(p, labels={**p.labels, "server": "ml/" + p.labels["server"].lower()}) if "server" in p.labels else p
            for p in points
        ]
        return [*renamed, *info]

    for i in range(6):
        node.observe(Snapshot(1000.0 + i, scene(i), {"engine:ml/a": up, "engine:ml/b": up}))
    verdicts, scopes = node.latest.engines, node.latest.scopes
    assert {n: (s.gpus, s.origin) for n, s in scopes.items()} == {"ml/a": (("0",), "kubernetes"), "ml/b": (("1",), "kubernetes")}
    assert verdicts["ml/a"].primary is not None and verdicts["ml/a"].primary.cause == "compute_bound"
    assert verdicts["ml/b"].state == "healthy"
