"""Serving-pod discovery against a local HTTP server serving recorded kubelet /pods JSON:
annotated pods become engines (scraped, labelled namespace/pod), an annotation removed
removes the source, a bad annotation is one log line, the process is found by cgroup."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.collector import render_text
from exporter.kubernetes.discovery import DiscoverySource, Target, target_of
from exporter.kubernetes.pods import PodDirectory, PodLister, parse_pod_list
from exporter.kubernetes.settings import KubernetesConfig
from exporter.runner import LoopThread, RunnerGroup
from exporter.samples import SourceError
from exporter.store import SnapshotStore
from tests.support.k8s import (
    BROKEN,
    FIXTURES,
    LLAMA,
    NODE,
    SGLANG,
    LocalHTTP,
    cgroup_v2,
    local_pods,
    parse_pod,
    pods_json,
    runtime_id,
    write_proc,
)
from tests.support.waiting import wait_until

ENGINE_FIXTURES = Path(__file__).resolve().parents[1] / "engines" / "fixtures"
LLAMA_SOURCE = "engine:inference/llama-70b-0"
SGLANG_SOURCE = "engine:inference/sglang-qwen-7d9f6c5b8-tq2lm"


# --------------------------------------------------------------------------- the pod list and the annotations


def test_the_recorded_pod_list_parses() -> None:
    pods, skipped = parse_pod_list((FIXTURES / "kubelet_pods.json").read_bytes(), NODE)
    assert skipped == {} and len(pods) == 10
    llama = next(p for p in pods if p.uid == LLAMA)
    assert (llama.namespace, llama.name, llama.phase, llama.ip) == ("inference", "llama-70b-0", "Running", "10.244.3.17")
    assert [c.name for c in llama.containers] == ["vllm", "log-shipper"]
    assert llama.containers[0].ports == (8000,) and llama.containers[0].runtime_id == runtime_id(pods_json(), LLAMA, "vllm")
    assert llama.container_by_runtime_id(llama.containers[1].runtime_id) == "log-shipper"
    assert parse_pod_list((FIXTURES / "kubelet_pods.json").read_bytes(), NODE, max_pods=3) == (pods[:3], {"too_many_pods": 7})
    assert parse_pod_list((FIXTURES / "kubelet_pods.json").read_bytes(), "another-node")[0] == []


@pytest.mark.parametrize("body", [b"<html>", b"[]", b'{"items": 3}'])
def test_a_bad_pod_list_is_a_parse_error(body: bytes) -> None:
    with pytest.raises(SourceError) as err:
        parse_pod_list(body)
    assert err.value.reason == "parse"


def test_targets_from_the_recorded_annotations() -> None:
    found = {}
    for item in pods_json()["items"]:
        pod = parse_pod(item)
        assert pod is not None
        found[pod.name] = target_of(pod)
    assert found["llama-70b-0"] == Target(LLAMA, "inference", "llama-70b-0", "http://10.244.3.17:8000/metrics", "vllm", "vllm")
    # no port annotation: the first declared containerPort; the path annotation is used
    assert found["sglang-qwen-7d9f6c5b8-tq2lm"] == Target(
        SGLANG, "inference", "sglang-qwen-7d9f6c5b8-tq2lm", "http://10.244.3.22:30000/metrics", "sglang", "sglang"
    )
    assert isinstance(found["broken-port-5c6d9f7b4-hx8wz"], str) and "'http'" in found["broken-port-5c6d9f7b4-hx8wz"]
    assert found["llama-70b-1"] is None, "Pending: not scraped yet"
    assert found["node-exporter-q7r2t"] is None, 'scrape: "false"'
    assert found["nvidia-device-plugin-daemonset-x8k2p"] is None, "not annotated"


def _pod(**annotations: str) -> dict[str, Any]:
    item: dict[str, Any] = next(i for i in pods_json()["items"] if i["metadata"]["uid"] == LLAMA)
    item["metadata"]["annotations"] = {"llm-layer-exporter.io/scrape": "true", **annotations}
    return item


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        ({"llm-layer-exporter.io/port": "70000"}, "not a port number"),
        ({"llm-layer-exporter.io/path": "metrics"}, "not an absolute URL path"),
        ({"llm-layer-exporter.io/engine": "ollama"}, "not one of"),
    ],
)
def test_bad_annotations_say_what_is_wrong(annotations: dict[str, str], problem: str) -> None:
    pod = parse_pod(_pod(**annotations))
    assert pod is not None
    result = target_of(pod)
    assert isinstance(result, str) and problem in result and "inference/llama-70b-0" in result


def test_the_port_annotation_picks_the_container() -> None:
    pod = parse_pod(_pod(**{"llm-layer-exporter.io/port": "2020", "llm-layer-exporter.io/engine": "TGI"}))
    assert pod is not None
    target = target_of(pod)
    assert isinstance(target, Target) and target.container == "log-shipper" and target.engine == "tgi"
    assert target.url == "http://10.244.3.17:2020/metrics"


# --------------------------------------------------------------------------- discovery while serving


@pytest.fixture
def cluster() -> Iterator[tuple[LocalHTTP, LocalHTTP, LocalHTTP]]:
    """The API (a kubelet /pods) and two engines, all on 127.0.0.1."""
    with LocalHTTP() as api, LocalHTTP() as vllm, LocalHTTP() as sglang:
        vllm.set("/metrics", (ENGINE_FIXTURES / "vllm-0.33-v1-2dp.prom").read_text())
        sglang.set("/metrics", (ENGINE_FIXTURES / "sglang-0.5.23-colon-2dp.prom").read_text())
        api.set("/pods", local_pods({LLAMA: vllm.port, SGLANG: sglang.port}))
        yield api, vllm, sglang


@pytest.fixture
def engine_labels() -> Iterator[None]:
    undo = KubernetesConfig(enabled=True, node_name=NODE).apply_labels()
    yield
    undo()


def _group(api: LocalHTTP, store: SnapshotStore, **kw: Any) -> tuple[RunnerGroup, DiscoverySource]:
    directory = PodDirectory(PodLister(api.url("/pods"), NODE, timeout=2.0), min_age=0.0)
    discovery = DiscoverySource(
        directory, interval=0.2, timeout=2.0, engine_interval=0.3, engine_timeout=0.25, remove_wait=2.0, **kw
    )
    group = RunnerGroup(store, watch_period=0.1)
    group.add(discovery)
    return group, discovery


def _pod_list_calls(api: LocalHTTP) -> int:
    return sum(1 for path, _ in api.requests if path.startswith("/pods"))


def test_annotated_pods_become_labelled_engines_and_go_away(
    cluster: tuple[LocalHTTP, LocalHTTP, LocalHTTP], engine_labels: None, caplog: pytest.LogCaptureFixture
) -> None:
    api, vllm, sglang = cluster
    store = SnapshotStore()
    group, discovery = _group(api, store, process_sampler=False)
    with caplog.at_level(logging.INFO, logger="exporter.kubernetes.discovery"):
        group.start()
        try:
            wait_until(
                lambda: store.snapshot().source_up(LLAMA_SOURCE) and store.snapshot().source_up(SGLANG_SOURCE),
                15,
                "both annotated engines up",
            )
            assert {t.url.split(":")[1] for t in discovery.targets.values()} == {"//127.0.0.1"}
            snap = store.snapshot()
            running = snap.samples("llm_scheduler_requests_running", server="inference/llama-70b-0")
            assert running and all(p.labels["namespace"] == "inference" and p.labels["pod"] == "llama-70b-0" for p in running)
            assert snap.samples("llm_engine_info", pod="sglang-qwen-7d9f6c5b8-tq2lm", engine="sglang")
            text = render_text(snap.points).decode()
            assert 'namespace="inference",pod="llama-70b-0",rank="' in text, "namespace and pod are rendered"

            # several refreshes later the bad annotation has been logged once
            calls = _pod_list_calls(api)
            wait_until(lambda: _pod_list_calls(api) >= calls + 3, 10, "three more pod-list reads")
            bad = [r for r in caplog.records if "broken-port" in r.getMessage()]
            assert len(bad) == 1 and bad[0].levelno == logging.WARNING

            # the annotation removed: the source and its series go
            doc = local_pods({LLAMA: vllm.port, SGLANG: sglang.port})
            sg = next(i for i in doc["items"] if i["metadata"]["uid"] == SGLANG)
            del sg["metadata"]["annotations"]["llm-layer-exporter.io/scrape"]
            api.set("/pods", doc)
            wait_until(lambda: SGLANG_SOURCE not in store.states(), 10, "sglang's source removed")
            assert not store.snapshot().find("llm_engine_info", pod="sglang-qwen-7d9f6c5b8-tq2lm")
            assert SGLANG_SOURCE not in {r.name for r in group.runners}
            assert store.snapshot().source_up(LLAMA_SOURCE), "the other engine keeps running"

            # a pod list that fails: discovery is down, the engines found before stay
            api.set("/pods", b"oops", status=500)
            wait_until(lambda: not store.snapshot().source_up("kubernetes:discovery"), 10, "discovery down on the failing list")
            error = store.states()["kubernetes:discovery"].last_error
            assert error is not None and error.reason == "http_status"
            assert store.snapshot().source_up(LLAMA_SOURCE)

            # the pod deleted (and the list back): its engine goes too
            doc["items"] = [i for i in doc["items"] if i["metadata"]["uid"] != LLAMA]
            api.set("/pods", doc)
            wait_until(lambda: LLAMA_SOURCE not in store.states(), 10, "llama's source removed")
        finally:
            group.stop()
    assert not [r for r in group.runners if not isinstance(r, LoopThread) or r._thread.is_alive()]
    assert any("stopped scraping inference/sglang" in r.getMessage() for r in caplog.records)


def test_a_fixed_annotation_is_scraped_and_a_rebroken_one_logged_again(
    cluster: tuple[LocalHTTP, LocalHTTP, LocalHTTP], engine_labels: None, caplog: pytest.LogCaptureFixture
) -> None:
    api, vllm, _ = cluster
    store = SnapshotStore()
    group, _ = _group(api, store, process_sampler=False)
    with caplog.at_level(logging.WARNING, logger="exporter.kubernetes.discovery"):
        group.start()
        try:
            wait_until(lambda: any("broken-port" in r.getMessage() for r in caplog.records), 10, "the broken-port warning")
            api.set("/pods", local_pods({BROKEN: vllm.port}))  # fixed: now points at the vLLM fixture
            broken = "engine:inference/broken-port-5c6d9f7b4-hx8wz"
            wait_until(lambda: store.snapshot().source_up(broken), 10, "the fixed pod scraped")
            api.set("/pods", local_pods())  # broken again
            wait_until(lambda: broken not in store.states(), 10, "the rebroken pod's source removed")
            wait_until(
                lambda: len([r for r in caplog.records if "broken-port" in r.getMessage()]) == 2,
                10,
                "the broken-port warning logged again",
            )
        finally:
            group.stop()


def test_the_process_sampler_finds_the_pid_through_the_cgroup(
    cluster: tuple[LocalHTTP, LocalHTTP, LocalHTTP], engine_labels: None, tmp_path: Path
) -> None:
    api, _, _ = cluster
    proc = tmp_path / "proc"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        # the real process, seen through a proc root whose cgroup file puts it in llama-70b-0's vllm container
        write_proc(proc, sleeper.pid, cgroup_v2(LLAMA, runtime_id(pods_json(), LLAMA, "vllm")), ppid=1, comm="sleep")
        store = SnapshotStore()
        group, _ = _group(api, store, process_sampler=True, process_interval=0.2, proc_root=str(proc))
        group.start()
        try:
            name = "process:inference/llama-70b-0"
            wait_until(lambda: store.snapshot().source_up(name), 15, "the process source up")
            threads = store.snapshot().samples("llm_process_threads", server="inference/llama-70b-0")
            assert threads and threads[0].value >= 1 and threads[0].labels["pod"] == "llama-70b-0"
            # sglang's container has no process under the proc root: down with process_gone, not a crash
            sg = "process:inference/sglang-qwen-7d9f6c5b8-tq2lm"
            wait_until(
                lambda: sg in store.states() and store.states()[sg].last_error is not None, 10, "sglang's process source failing"
            )
            error = store.states()[sg].last_error
            assert error is not None and error.reason == "process_gone"
        finally:
            group.stop()
    finally:
        sleeper.kill()
        sleeper.wait(5)


def test_an_unbound_discovery_is_an_error_not_a_crash(cluster: tuple[LocalHTTP, LocalHTTP, LocalHTTP]) -> None:
    api, _, _ = cluster
    discovery = DiscoverySource(PodDirectory(PodLister(api.url("/pods"), NODE)))
    with pytest.raises(SourceError):
        discovery.sample()


def test_the_token_is_sent_over_https_only(cluster: tuple[LocalHTTP, LocalHTTP, LocalHTTP], tmp_path: Path) -> None:
    api, _, _ = cluster
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    PodLister(api.url("/pods"), NODE, token_file=str(token)).list()
    assert all("Authorization" not in headers for _, headers in api.requests)


def test_the_api_server_url_selects_the_node() -> None:
    from exporter.kubernetes.pods import api_server_url

    url = api_server_url("gpu-node-1", {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    assert url == "https://10.96.0.1:443/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-node-1&resourceVersion=0"
    with pytest.raises(SourceError) as err:
        api_server_url("gpu-node-1", {})
    assert err.value.reason == "connection"
