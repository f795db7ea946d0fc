"""The --kubernetes settings: flags > environment > config file, the pod-label allow-list, the
label limit, and what `serve` builds from them."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import schema
from exporter.cli import build_parser
from exporter.collector import render_text
from exporter.config import Config, load_config
from exporter.errors import UsageError
from exporter.kubernetes.pods import pod_list_min_age
from exporter.kubernetes.settings import (
    MAX_SERIES_LABELS,
    TARGET_LABELS,
    KubernetesConfig,
    gpu_series_names,
    pod_label_keys,
    prometheus_label,
)
from exporter.samples import Sample
from exporter.sources import Source
from tests.support.k8s import NODE, LocalHTTP, PodResourcesServer, fake_nvml, local_pods, write_gpu_proc
from tests.support.waiting import wait_until


def _load(argv: list[str], env: dict[str, str] | None = None) -> Config:
    argv = ["serve", "--gpu-source", "none", *argv]
    return load_config(build_parser(argv).parse_args(argv), environ=env or {})


def _kubernetes(argv: list[str], env: dict[str, str] | None = None) -> KubernetesConfig:
    k = _load(argv, env).kubernetes
    assert k is not None  # load_config always sets it
    return k


@pytest.fixture
def restore_schema() -> Iterator[None]:
    before = dict(schema.SPECS)
    yield
    schema.SPECS.clear()
    schema.SPECS.update(before)
    schema.LABELS_VERSION += 1


def test_off_by_default() -> None:
    k = _kubernetes([])
    assert not k.enabled and k.label_plan() == {}


def test_flags_environment_and_file(tmp_path: Path) -> None:
    k = _kubernetes(["--kubernetes", "--kubernetes-pod-labels", "team,app.kubernetes.io/name"], {"NODE_NAME": NODE})
    assert k.enabled and k.node_name == NODE and k.discovers and not k.gpu_labels
    assert k.pod_labels == (("team", "label_team"), ("app.kubernetes.io/name", "label_app_kubernetes_io_name"))
    env = {
        "LLM_EXPORTER_KUBERNETES": "true",
        "LLM_EXPORTER_KUBERNETES_GPU_LABELS": "true",
        "LLM_EXPORTER_KUBERNETES_PODS_URL": "none",
    }
    k = _kubernetes([], env)
    assert k.enabled and k.gpu_labels and not k.pod_list and not k.discovers
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "kubernetes:\n  enabled: true\n  node_name: n1\n  pod_labels: [team]\n  discovery_interval: 15\n  pods_url: http://127.0.0.1:10255/pods\n"
    )
    k = _kubernetes(["--config", str(cfg), "--kubernetes-discovery-interval", "20"])
    assert (k.node_name, k.pod_labels, k.discovery_interval, k.pods_url) == (
        "n1",
        (("team", "label_team"),),
        20.0,
        "http://127.0.0.1:10255/pods",
    )


@pytest.mark.parametrize(
    ("argv", "env", "where"),
    [
        (["--kubernetes", "--kubernetes-pod-labels", "a/b/c"], {"NODE_NAME": NODE}, "--kubernetes-pod-labels"),
        (["--kubernetes", "--kubernetes-pod-labels", ",".join(f"l{i}" for i in range(9))], {"NODE_NAME": NODE}, "at most 8"),
        (["--kubernetes", "--kubernetes-pod-labels", "a.b,a_b"], {"NODE_NAME": NODE}, "both become"),
        (["--kubernetes"], {}, "node name"),
        (["--kubernetes=maybe"], {}, "--kubernetes"),
        (["--kubernetes", "--kubernetes-pods-url", "ftp://x"], {"NODE_NAME": NODE}, "--kubernetes-pods-url"),
        (["--kubernetes", "--kubernetes-discovery-interval", "0"], {"NODE_NAME": NODE}, "--kubernetes-discovery-interval"),
        (["--kubernetes", "--kubernetes-pods-max-bytes", "1000"], {"NODE_NAME": NODE}, "--kubernetes-pods-max-bytes"),
        (["--kubernetes", "--kubernetes-pods-max-bytes", "9" * 400], {"NODE_NAME": NODE}, "--kubernetes-pods-max-bytes"),
        (["--kubernetes", "--kubernetes-pods-max-bytes", "８０００００"], {"NODE_NAME": NODE}, "--kubernetes-pods-max-bytes"),
        ([], {"LLM_EXPORTER_KUBERNETES_PODS_MAX_BYTES": "8MiB"}, "LLM_EXPORTER_KUBERNETES_PODS_MAX_BYTES"),
    ],
)
def test_bad_settings_are_one_line(argv: list[str], env: dict[str, str], where: str) -> None:
    with pytest.raises(UsageError) as err:
        _load(argv, env)
    assert where in str(err.value) and "\n" not in str(err.value)


def test_the_pod_list_cap_is_8_mib_by_default_and_settable() -> None:
    from exporter.kubernetes.pods import MAX_BODY_BYTES
    from exporter.kubernetes.settings import DEFAULT_PODS_MAX_BYTES

    assert _kubernetes(["--kubernetes"], {"NODE_NAME": NODE}).pods_max_bytes == DEFAULT_PODS_MAX_BYTES == MAX_BODY_BYTES
    assert MAX_BODY_BYTES == 8 * 1024 * 1024
    k = _kubernetes(["--kubernetes", "--kubernetes-pods-max-bytes", "33554432"], {"NODE_NAME": NODE})
    assert k.pods_max_bytes == 32 * 1024 * 1024


def test_unknown_file_keys_are_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("kubernetes:\n  enable: true\n")
    with pytest.raises(UsageError, match="unknown setting"):
        _load(["--config", str(cfg)])


def test_prometheus_label_names() -> None:
    assert prometheus_label("app.kubernetes.io/name") == "label_app_kubernetes_io_name"
    assert pod_label_keys(" team , team ") == (("team", "label_team"),)


def test_every_series_stays_under_twenty_labels(restore_schema: None) -> None:
    """The worst case the limits allow: GPU labels on, 8 pod labels, discovery on."""
    longest = ",".join(f"example.com/l{i}" for i in range(8))
    k = _kubernetes(["--kubernetes", "--kubernetes-gpu-labels", "--kubernetes-pod-labels", longest], {"NODE_NAME": NODE})
    k.apply_labels()
    worst = max(len(s.labels) for s in schema.SPECS.values())
    assert worst + TARGET_LABELS + 1 < MAX_SERIES_LABELS
    assert schema.SPECS["llm_gpu_pod_info"].labels[:5] == ("gpu", "uuid", "namespace", "pod", "container")
    assert "label_example_com_l7" in schema.SPECS["llm_gpu_throttle_reason_active"].labels
    assert "namespace" in schema.SPECS["llm_engine_config_info"].labels and "pod" in schema.SPECS["llm_process_threads"].labels
    assert "pod" not in schema.SPECS["llm_bottleneck_score"].labels


def test_the_label_limit_refuses_what_would_pass_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import exporter.kubernetes.settings as settings

    monkeypatch.setattr(settings, "MAX_SERIES_LABELS", 12)
    with pytest.raises(UsageError, match="under 12"):
        _load(["--kubernetes", "--kubernetes-gpu-labels", "--kubernetes-pod-labels", "a,b,c,d"], {"NODE_NAME": NODE})


def test_extended_labels_render_sorted_and_undo(restore_schema: None) -> None:
    point = Sample(
        "llm_gpu_pod_info", {"gpu": "0", "uuid": "GPU-1", "namespace": "ns", "pod": "p", "container": "c", "label_team": "t"}, 1.0
    )
    assert "label_team" not in render_text([point]).decode()
    undo = KubernetesConfig(enabled=True, discovery=False, pod_labels=(("team", "label_team"),)).apply_labels()
    assert (
        'llm_gpu_pod_info{container="c",gpu="0",label_team="t",namespace="ns",pod="p",uuid="GPU-1"} 1.0'
        in render_text([point]).decode()
    )
    undo()
    assert "label_team" not in render_text([point]).decode()
    assert "llm_gpu_pod_info" not in gpu_series_names()


def _kubernetes_sources(cfg: Config) -> list[Source]:
    """What `serve` adds for ``cfg.kubernetes``, with the fake GPUs (build_sources would find no NVML here)."""
    from exporter.kubernetes import build_kubernetes_sources

    assert cfg.kubernetes is not None
    return build_kubernetes_sources(
        cfg.kubernetes,
        [],
        engine_interval=cfg.engine_interval,
        engine_timeout=cfg.engine_timeout,
        engine_max_series=cfg.engine_max_series,
        process_interval=cfg.process_interval,
        nvml_module=fake_nvml(),
    )


def test_serve_builds_attribution_and_discovery(tmp_path: Path, restore_schema: None) -> None:
    """What `serve --kubernetes` wires, sampled through the real runner, store and collector."""
    from exporter.commands.serve import build_sources
    from exporter.runner import RunnerGroup
    from exporter.store import SnapshotStore

    proc = tmp_path / "proc"
    write_gpu_proc(proc)
    sock = tmp_path / "kubelet.sock"
    with PodResourcesServer(sock), LocalHTTP() as api:
        api.set("/pods", local_pods())
        cfg = _load(
            [
                "--kubernetes",
                "--kubernetes-pod-resources-socket",
                str(sock),
                "--kubernetes-pods-url",
                api.url("/pods"),
                "--kubernetes-proc-root",
                str(proc),
                "--kubernetes-interval",
                "0.5",
                "--kubernetes-pod-labels",
                "team",
                "--kubernetes-discovery-interval",
                "0.5",
                "--kubernetes-process-sampler",
                "false",
            ],
            {"NODE_NAME": NODE},
        )
        store = SnapshotStore()
        sources, _ = build_sources(cfg, store)
        names = [s.name for s in sources]
        assert "kubernetes:gpu" in names and "kubernetes:discovery" in names
        # the same, with the fake GPUs (build_sources would find no NVML here)
        attributed = _kubernetes_sources(cfg)
        group = RunnerGroup(store, watch_period=0.1)
        for s in attributed:
            group.add(s)
        group.start()
        try:
            wait_until(
                lambda: bool(store.snapshot().find("llm_gpu_process_memory_used_bytes")), 10, "per-process memory published"
            )
            text = render_text(store.snapshot().points).decode()
        finally:
            group.stop()
    assert (
        'llm_gpu_pod_info{container="jupyter",gpu="3",label_team="research",namespace="team-a",pod="notebook-1",uuid="GPU-'
        in text
    )
    assert (
        'llm_gpu_process_memory_used_bytes{container="embedder",gpu="3",label_team="search",namespace="team-b",pod="embed-2"}'
        in text
    )


@pytest.mark.parametrize("interval, age", [(0.1, 0.05), (1.0, 0.5), (10.0, 5.0), (30.0, 5.0), (3600.0, 5.0)])
def test_the_pod_list_cache_follows_a_short_discovery_interval(interval: float, age: float) -> None:
    assert pod_list_min_age(interval) == pytest.approx(age)


def test_a_one_second_discovery_interval_reads_the_pod_list_about_every_second(tmp_path: Path, restore_schema: None) -> None:
    """`--kubernetes-discovery-interval` is what the kubelet sees: the shared pod list is not
    reused for a fixed 5 s (it was, so a 1 s interval read the list every 5 s).

    Consecutive reads were at least 5 s apart with the fixed cache; a loaded machine only
    stretches the gaps, so one gap under half of that can only come from the interval."""
    from exporter.runner import RunnerGroup
    from exporter.store import SnapshotStore

    with LocalHTTP() as api:
        api.set("/pods", local_pods())
        cfg = _load(
            [
                "--kubernetes",
                *("--kubernetes-pod-resources-socket", str(tmp_path / "none.sock")),
                *("--kubernetes-pods-url", api.url("/pods")),
                *("--kubernetes-discovery-interval", "1", "--kubernetes-process-sampler", "false"),
            ],
            {"NODE_NAME": NODE},
        )
        discovery = next(s for s in _kubernetes_sources(cfg) if s.name == "kubernetes:discovery")
        reads: list[float] = []
        api_requests = api.requests
        store = SnapshotStore()
        group = RunnerGroup(store, watch_period=0.1)
        group.add(discovery)
        group.start()
        try:

            def four_reads() -> bool:
                while len(reads) < len(api_requests):
                    reads.append(time.monotonic())
                return len(reads) >= 4

            wait_until(four_reads, 30, "four pod-list reads")
        finally:
            group.stop()
    gaps = [b - a for a, b in itertools.pairwise(reads)]
    assert min(gaps) < 2.5, f"pod-list reads {gaps} s apart with a 1 s discovery interval"
