import pytest

from exporter.collector import ExpositionCache, families_from_points, wants_openmetrics
from exporter.samples import HistogramSample, Point, Sample
from exporter.store import SnapshotStore


def test_render_is_cached_per_store_version() -> None:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    store.record_success("gpu", [Sample("llm_gpu_power_watts", {"gpu": "0", "uuid": "u"}, 100)], 0.0)
    cache = ExpositionCache(store)
    first = cache.render()
    assert cache.render() is first  # same bytes object: nothing re-rendered
    store.record_success("gpu", [Sample("llm_gpu_power_watts", {"gpu": "0", "uuid": "u"}, 200)], 0.0)
    second = cache.render()
    assert second is not first and b'llm_gpu_power_watts{gpu="0",uuid="u"} 200.0' in second


def test_unknown_names_are_dropped_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    store.record_success("gpu", [Sample("vllm:num_requests_running", {}, 1)], 0.0)
    cache = ExpositionCache(store)
    body = cache.render()
    store.record_success("gpu", [Sample("vllm:num_requests_running", {}, 2)], 0.0)
    cache.render()
    assert b"vllm:" not in body
    assert sum("not declared in exporter.schema" in r.message for r in caplog.records) == 1


def test_families_follow_schema_order_and_fill_missing_labels() -> None:
    fams = families_from_points(
        [
            Sample("llm_scheduler_requests_waiting", {"server": "a", "engine": "vllm"}, 2),
            Sample("llm_gpu_power_watts", {"gpu": "0", "uuid": "u"}, 100),
            Sample("llm_scheduler_requests_waiting", {"server": "a", "engine": "vllm"}, 9),  # duplicate series
            HistogramSample("llm_request_e2e_seconds", {"server": "a"}, ((1.0, 1), (float("inf"), 1)), 0.5, 1),
        ]
    )
    assert [f.name for f in fams] == ["llm_gpu_power_watts", "llm_scheduler_requests_waiting", "llm_request_e2e_seconds"]
    waiting = fams[1].samples
    assert len(waiting) == 1 and waiting[0].value == 2
    assert waiting[0].labels == {"server": "a", "engine": "vllm", "model": "", "rank": ""}


def test_openmetrics_negotiation() -> None:
    assert wants_openmetrics("application/openmetrics-text; version=1.0.0")
    assert wants_openmetrics("text/plain;q=0.5, application/openmetrics-text;q=1")
    assert not wants_openmetrics("text/plain")
    assert not wants_openmetrics(None)


def test_direct_renderer_writes_exactly_what_prometheus_client_writes() -> None:
    from prometheus_client.exposition import generate_latest

    from exporter.collector import _FamiliesCollector, render_text

    eng = {"server": 'we"ird\\srv\nx', "engine": "vllm", "model": "", "rank": "0"}
    points: list[Point] = [
        Sample("llm_gpu_info", {"gpu": "0", "uuid": "GPU-1", "name": "H200", "source": "nvml"}, 1),
        Sample("llm_gpu_power_watts", {"gpu": "0", "uuid": "GPU-1"}, float("nan")),
        Sample("llm_gpu_sm_clock_hertz", {"gpu": "0", "uuid": "GPU-1"}, 1.98e9),
        Sample("llm_gpu_energy_joules_total", {"gpu": "0", "uuid": "GPU-1"}, float("inf")),
        Sample("llm_exporter_build_info", {"version": "1", "python_version": "3"}, 1),
        Sample("llm_requests_finished_total", {**eng, "reason": "stop"}, 12),
        Sample("llm_requests_finished_total", {**eng, "reason": "stop"}, 99),  # duplicate: first wins
        Sample("llm_bottleneck_score", {"layer": "memory"}, float("nan")),
        HistogramSample("llm_request_ttft_seconds", eng, ((0.005, 1), (2.5, 3), (float("inf"), 4)), 1e-7, 4),
        HistogramSample("llm_gpu_power_watts", {"gpu": "1"}, ((1.0, 1), (float("inf"), 1)), 1, 1),  # wrong type: dropped
        Sample("llm_request_ttft_seconds", eng, 3),  # a plain sample of a histogram: dropped
        Sample("not_in_schema", {}, 1),
    ]
    expected = generate_latest(_FamiliesCollector(families_from_points(points)))
    assert render_text(points) == expected
