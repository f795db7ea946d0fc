"""Hostile pod lists (issue 25, items 5 and 6): bounded reads, one bad pod never the node's discovery.

Every case is served by a real HTTP server on 127.0.0.1 (tests/support/k8s.py)
and read by the real ``PodLister`` (the engine path's bounded GET): the 31 MiB
list, 110 pods with 256 KiB of annotations each, port annotations in non-ASCII
digits, a document nested a million levels deep, and bad pods among good ones
across refreshes. Each asserts the counted reason, the good pods discovered and
no traceback in the log. Memory is measured with ``tracemalloc`` around the read.
"""

from __future__ import annotations

import gc
import json
import logging
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.collector import render_text
from exporter.kubernetes.discovery import SKIPPED, DiscoverySource, target_of
from exporter.kubernetes.podjson import JsonError, Reader, TooDeep
from exporter.kubernetes.pods import MAX_BODY_BYTES, PodDirectory, PodLister, parse_pod_list
from exporter.kubernetes.settings import KubernetesConfig
from exporter.runner import RunnerGroup
from exporter.samples import SourceError
from exporter.schema import KUBERNETES_POD_SKIP_REASONS
from exporter.store import SnapshotStore
from tests.support import k8s
from tests.support.waiting import wait_until

MIB = 1024 * 1024
ENGINE_FIXTURES = Path(__file__).resolve().parents[1] / "engines" / "fixtures"
LLAMA_SOURCE = "engine:inference/llama-70b-0"
SGLANG_SOURCE = "engine:inference/sglang-qwen-7d9f6c5b8-tq2lm"


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage() or "internal" in r.getMessage()]
    assert not bad, [r.getMessage()[:200] for r in bad]


def _read(lister: PodLister) -> tuple[object, int]:
    """(pods and reasons, or the SourceError) and the peak of Python allocations while reading."""
    gc.collect()
    tracemalloc.start()
    try:
        try:
            got: object = lister.list()
        except SourceError as err:
            got = err
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- the reader


def test_the_reader_steps_over_values_it_does_not_read() -> None:
    r = Reader(b' {"a": [1, {"b": "x\\"}"}, [], {}], "k": "v\\u00e9", "n": -12, "f": 1.5e3, "t": true} ')
    seen: dict[str, object] = {}
    for key in r.members():
        if key == "k":
            seen[key] = r.string(64)
        elif key in ("n", "f"):
            seen[key] = r.integer()
        else:
            r.skip()
    assert seen == {"k": "vé", "n": -12, "f": None} and r.at_end()


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b'{"a": "open', "unterminated string"),
        (b'{"a": [1, 2', "ended inside a value"),
        (b'{"a" 1}', "expected ':'"),
        (b'{"a": "\\x"}', "bad string"),
        (b'{"a": "\xff"}', "bad string"),
    ],
)
def test_the_reader_names_what_is_wrong(body: bytes, what: str) -> None:
    r = Reader(body)
    with pytest.raises(JsonError, match=what):
        for key in r.members():
            if key == "a":
                r.string(64) if r.peek() == 0x22 else r.skip()


def test_a_million_levels_are_refused_at_the_limit_not_recursed() -> None:
    r = Reader(b"[" * 1_000_000 + b"]" * 1_000_000, max_depth=64)
    with pytest.raises(TooDeep, match="nested deeper than 64 levels"):
        r.skip()
    assert r.pos < 100, "refused at the first level too deep, not after reading on"


def test_a_long_string_is_not_built_when_over_its_limit() -> None:
    body = b'{"big": "' + b"x" * (4 * MIB) + b'", "small": "ok"}'
    r = Reader(body)
    gc.collect()
    tracemalloc.start()
    try:
        got = {key: r.string(1024) for key in r.members()}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == {"big": None, "small": "ok"}
    assert peak < 256 * 1024, f"{peak} bytes allocated to step over a 4 MiB string"


# --------------------------------------------------------------------------- the pod list, read from a real HTTP server


@pytest.fixture
def api() -> Iterator[k8s.LocalHTTP]:
    with k8s.LocalHTTP() as server:
        yield server


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_31_mib_pod_list_is_refused_at_the_byte_cap(api: k8s.LocalHTTP, chunked: bool) -> None:
    body = k8s.big_pod_list(k8s.local_pods(), k8s.BIG_LIST_BYTES)
    assert len(body) >= k8s.BIG_LIST_BYTES > MAX_BODY_BYTES
    api.set("/pods", body, content_type="application/json", chunked=chunked)
    got, peak = _read(PodLister(api.url("/pods"), k8s.NODE, timeout=5.0))
    assert isinstance(got, SourceError) and got.reason == "too_large", got
    assert "--kubernetes-pods-max-bytes" in got.message and "\n" not in got.message
    # a declared length over the cap is refused unread; a chunked body is read up to the cap, not past it
    bound = 2 * MAX_BODY_BYTES + 2 * MIB if chunked else 2 * MIB
    assert peak < bound, f"{peak / MIB:.1f} MiB allocated to refuse a {len(body) / MIB:.0f} MiB list"


def test_110_pods_with_256_kib_of_annotations_each(api: k8s.LocalHTTP) -> None:
    body = k8s.annotation_flood(k8s.local_pods())
    api.set("/pods", body, content_type="application/json")
    # at the default cap the list (28 MiB) is refused whole
    got, _ = _read(PodLister(api.url("/pods"), k8s.NODE, timeout=5.0))
    assert isinstance(got, SourceError) and got.reason == "too_large"
    # with a cap that lets it through, each tenant pod's annotations are ignored and counted, the good pods read
    got, peak = _read(PodLister(api.url("/pods"), k8s.NODE, timeout=5.0, max_body_bytes=32 * MIB))
    assert isinstance(got, tuple), got
    pods, skipped = got
    assert skipped == {"annotations_too_large": k8s.FLOOD_PODS}
    by_name = {p.name: p for p in pods}
    assert len(pods) == 10 + k8s.FLOOD_PODS and by_name["tenant-0"].annotations == {}
    assert by_name["llama-70b-0"].annotations["llm-layer-exporter.io/scrape"] == "true"
    assert peak < len(body) + 4 * MIB, f"{peak / MIB:.1f} MiB for a {len(body) / MIB:.1f} MiB body (read, not built)"


def test_a_deeply_nested_document_is_a_named_parse_error(api: k8s.LocalHTTP) -> None:
    api.set("/pods", k8s.deep_pod_list(k8s.local_pods()), content_type="application/json")
    got, peak = _read(PodLister(api.url("/pods"), k8s.NODE, timeout=5.0))
    assert isinstance(got, SourceError) and got.reason == "parse", got
    assert "nested deeper than 64 levels" in got.message
    assert peak < 4 * MIB


@pytest.mark.parametrize("port", k8s.NON_ASCII_PORTS)
def test_a_port_in_non_ascii_digits_is_a_bad_annotation(port: str) -> None:
    pod = k8s.parse_pod(k8s.tenant_pod(1, {"llm-layer-exporter.io/scrape": "true", "llm-layer-exporter.io/port": port}))
    assert pod is not None
    problem = target_of(pod)
    assert isinstance(problem, str) and "ASCII digits" in problem and "tenants/tenant-1" in problem


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (42, "malformed"),
        ({"metadata": {"name": "no-uid"}}, "malformed"),
        ({"metadata": {"uid": "u1", "name": "n", "labels": {f"k{i}": "v" * 60 for i in range(400)}}}, "labels_too_large"),
    ],
)
def test_one_bad_item_is_counted_not_the_list(item: object, reason: str) -> None:
    doc = k8s.with_pods(k8s.local_pods(), [item])  # type: ignore[list-item]
    pods, skipped = parse_pod_list(json.dumps(doc).encode(), k8s.NODE)
    assert skipped == {reason: 1}
    assert {k8s.LLAMA, k8s.SGLANG} <= {p.uid for p in pods}


def test_only_the_allow_listed_labels_are_read() -> None:
    body = json.dumps(k8s.local_pods()).encode()
    pods, _ = parse_pod_list(body, k8s.NODE, label_keys=frozenset({"team"}))
    llama = next(p for p in pods if p.uid == k8s.LLAMA)
    assert llama.labels == {"team": "llm-platform"}


# --------------------------------------------------------------------------- discovery while serving


@pytest.fixture
def engines() -> Iterator[tuple[k8s.LocalHTTP, k8s.LocalHTTP]]:
    with k8s.LocalHTTP() as vllm, k8s.LocalHTTP() as sglang:
        vllm.set("/metrics", (ENGINE_FIXTURES / "vllm-0.33-v1-2dp.prom").read_text())
        sglang.set("/metrics", (ENGINE_FIXTURES / "sglang-0.5.23-colon-2dp.prom").read_text())
        yield vllm, sglang


@pytest.fixture
def engine_labels() -> Iterator[None]:
    undo = KubernetesConfig(enabled=True, node_name=k8s.NODE).apply_labels()
    yield
    undo()


def _skipped(store: SnapshotStore) -> dict[str, float]:
    return {p.labels["reason"]: p.value for p in store.snapshot().samples(SKIPPED)}


def _last_reason(store: SnapshotStore, source: str) -> str | None:
    """The reason of ``source``'s last error (None: it has none)."""
    error = store.states()[source].last_error
    return error.reason if error is not None else None


def _list_reads(api: k8s.LocalHTTP) -> int:
    return sum(1 for path, _ in api.requests if path.startswith("/pods"))


def test_bad_pods_never_stop_discovery_across_refreshes(
    api: k8s.LocalHTTP,
    engines: tuple[k8s.LocalHTTP, k8s.LocalHTTP],
    engine_labels: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    vllm, sglang = engines
    bad = [
        k8s.tenant_pod(i, {"llm-layer-exporter.io/scrape": "true", "llm-layer-exporter.io/port": port})
        for i, port in enumerate(k8s.NON_ASCII_PORTS)
    ]
    bad.append(k8s.tenant_pod(9, {"llm-layer-exporter.io/scrape": "true", "tenant.example.com/blob": "x" * (100 * 1024)}))
    bad.append(42)  # type: ignore[arg-type]
    # first: llama only, among the bad pods
    first = k8s.local_pods({k8s.LLAMA: vllm.port, k8s.SGLANG: sglang.port})
    sg = next(i for i in first["items"] if i["metadata"]["uid"] == k8s.SGLANG)
    del sg["metadata"]["annotations"]["llm-layer-exporter.io/scrape"]
    api.set("/pods", k8s.with_pods(first, bad))
    store = SnapshotStore()
    directory = PodDirectory(PodLister(api.url("/pods"), k8s.NODE, timeout=2.0), min_age=0.0)
    discovery = DiscoverySource(
        directory, interval=0.2, timeout=2.0, engine_interval=0.5, engine_timeout=2.0, process_sampler=False
    )
    group = RunnerGroup(store, watch_period=0.1)
    group.add(discovery)
    with caplog.at_level(logging.INFO):
        group.start()
        try:
            wait_until(lambda: store.snapshot().source_up(LLAMA_SOURCE), 15, "llama discovered beside the bad pods")
            assert store.snapshot().source_up("kubernetes:discovery")
            # the bad pods are counted on every list read
            reads = _list_reads(api)
            wait_until(lambda: _list_reads(api) >= reads + 3, 10, "three more list reads")

            def bad_pods_counted() -> dict[str, float] | None:
                c = _skipped(store)
                return c if c and c["bad_annotation"] >= 6 else None

            counted = wait_until(bad_pods_counted, 10, "bad pods counted")
            assert counted["annotations_too_large"] >= 2 and counted["malformed"] >= 2
            assert set(counted) == set(KUBERNETES_POD_SKIP_REASONS)
            text = render_text(store.snapshot().points).decode()
            assert f'{SKIPPED}{{reason="bad_annotation"}}' in text

            # next: sglang annotated, llama's pod gone; the bad pods stay: both changes are made
            second = k8s.local_pods({k8s.SGLANG: sglang.port})
            second["items"] = [i for i in second["items"] if i["metadata"]["uid"] != k8s.LLAMA]
            api.set("/pods", k8s.with_pods(second, bad))
            wait_until(lambda: store.snapshot().source_up(SGLANG_SOURCE), 15, "sglang added while the bad pods exist")
            wait_until(lambda: LLAMA_SOURCE not in store.states(), 10, "llama removed while the bad pods exist")

            # a deeply nested list, then a 31 MiB one: discovery down with the named reason, sglang kept
            api.set("/pods", k8s.deep_pod_list(second), content_type="application/json")
            wait_until(lambda: not store.snapshot().source_up("kubernetes:discovery"), 10, "discovery down on the deep list")
            assert _last_reason(store, "kubernetes:discovery") == "parse"
            api.set("/pods", k8s.big_pod_list(second), content_type="application/json")
            wait_until(
                lambda: _last_reason(store, "kubernetes:discovery") == "too_large",
                10,
                "too_large on the 31 MiB list",
            )
            # the last good view stays: sglang still discovered (its runner kept), whatever its last scrape
            assert SGLANG_SOURCE in store.states() and SGLANG_SOURCE in {r.name for r in group.runners}
        finally:
            group.stop()
    _no_traceback(caplog)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "tenants/tenant-" in r.getMessage()]
    assert len(lines) == len(bad) - 1, lines  # one line per bad pod, not one per refresh (the 42 is one list line)
    assert any("ASCII digits" in line for line in lines) and any("over 64 KiB" in line for line in lines)
