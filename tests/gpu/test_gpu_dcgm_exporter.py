"""``dcgm-exporter:URL``: the node's dcgm-exporter read as a GPU source (exporter/gpu/dcgm_exporter.py).

The answers are rendered in dcgm-exporter's documented shape (tests/support/dcgm_exporter_text.py:
3.x and 4.x releases, the default collectors CSV and the one docs/gpu-sources.md asks for, a CSV
written with DCGM 4.6's renamed constants) and served by a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator

import pytest

from exporter.config import add_serve_arguments, load_config
from exporter.diagnosis.engine import DiagnosisEngine, Verdict
from exporter.errors import UsageError
from exporter.gpu import build_gpu_source, parse_spec
from exporter.gpu.dcgm_exporter import MAX_BODY_BYTES, DcgmExporterSource, gpus_from_exposition, reading_of
from exporter.gpu.fields import normalise
from exporter.gpu.replay import bundled_trace, parse_trace
from exporter.samples import Point, Sample, SourceError
from tests.diagnosis.diag_traces import snapshot, trace_rows
from tests.gpu.gpu_helpers import value
from tests.support.dcgm_exporter_text import INT64_NOT_SUPPORTED, Flavour, GpuRow, render
from tests.support.fake_engine import FakeEngine

H200 = {
    "gpu_name": "NVIDIA H200",
    "uuid": "GPU-b291c692-64b4-34e2-62c0-d8362a374b32",
    "nvml_gpu_util": 99.0,
    "nvml_mem_util": 41.0,
    "sm_util": 92.1,
    "sm_occupancy": 35.7,
    "tensor_util": 61.3,
    "dram_bw_util": 48.25,
    "fb_used_mib": 131072.0,
    "fb_total_mib": 143771.0,
    "power_w": 651.2,
    "power_limit_w": 700.0,
    "sm_clock_mhz": 1755.0,
    "sm_clock_max_mhz": 1980.0,
    "mem_clock_mhz": 3201.0,
    "temp_c": 61.0,
    "pcie_tx_mib_s": 1.5,
    "pcie_rx_mib_s": 2048.25,
    "nvlink_tx_mib_s": 10240.0,
    "nvlink_rx_mib_s": 9216.5,
    "energy_mj": 987654321.0,
    "throttle_reasons": 4,
}
SECOND = {**H200, "uuid": "GPU-00000000-0000-0000-0000-000000000001", "sm_util": 3.5}


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))


@pytest.fixture
def fake() -> Iterator[FakeEngine]:
    with FakeEngine(render([GpuRow(H200)])) as engine:
        yield engine


def test_every_release_and_naming_maps_onto_the_same_reading() -> None:
    flavours: tuple[Flavour, ...] = ("3.x", "4.x", "dcgm-4.6")
    for flavour in flavours:
        gpus, partial = gpus_from_exposition(render([GpuRow(H200), GpuRow(SECOND, index=1)], flavour), "x")
        assert partial == []
        assert [g.index for g in gpus] == [0, 1], flavour
        # every key round-trips exactly (ratios through Decimal, MiB/s through bytes/s, the memory
        # total from used + free + reserved)
        assert normalise(reading_of(gpus[0])) == normalise(H200), flavour
        assert normalise(reading_of(gpus[1]))["sm_util"] == 3.5


def test_the_default_collectors_csv_lacks_sm_active_and_occupancy(caplog: pytest.LogCaptureFixture) -> None:
    with FakeEngine(render([GpuRow(H200)], fields="default")) as engine:
        source = DcgmExporterSource(engine.url, 1.0, 0.9)
        with caplog.at_level(logging.INFO, logger="exporter.gpu.dcgm_exporter"):
            points = source.sample().points
            source.sample()
        said = [r.getMessage() for r in caplog.records]
        # one warning line naming the two classes and the CSV lines to add; not repeated
        assert len(said) == 1 and caplog.records[0].levelno == logging.WARNING, said
        assert "llm_gpu_sm_active_ratio, llm_gpu_sm_occupancy_ratio" in said[0]
        assert "DCGM_FI_PROF_SM_ACTIVE, gauge" in said[0] and "DCGM_FI_PROF_SM_OCCUPANCY, gauge" in said[0]
        flags = {
            p.labels["metric"]: p.value
            for p in points
            if isinstance(p, Sample) and p.name == "llm_gpu_profiling_metric_available"
        }
        assert flags == {
            "llm_gpu_sm_active_ratio": 0.0,
            "llm_gpu_sm_occupancy_ratio": 0.0,
            "llm_gpu_tensor_active_ratio": 1.0,
            "llm_gpu_dram_active_ratio": 1.0,
        }
        assert value(points, "llm_gpu_profiling_available") == 1.0
        assert value(points, "llm_gpu_sm_active_ratio") is None  # absent, never 0
        assert value(points, "llm_gpu_tensor_active_ratio") == 0.613
        # the operator adds the lines: one line says so
        caplog.clear()
        engine.set(body=render([GpuRow(H200)], fields="full"))
        with caplog.at_level(logging.INFO, logger="exporter.gpu.dcgm_exporter"):
            points = source.sample().points
        assert [r.getMessage() for r in caplog.records] == [
            f"dcgm-exporter at {engine.url} now publishes all four profiling classes"
        ]
        assert value(points, "llm_gpu_sm_active_ratio") == 0.921


def test_points_are_those_of_the_other_sources(fake: FakeEngine) -> None:
    points = DcgmExporterSource(fake.url, 1.0, 0.9).sample().points
    gpu = {"gpu": "0", "uuid": str(H200["uuid"])}
    assert value(points, "llm_gpu_info", **gpu, source="dcgm-exporter", name="NVIDIA H200") == 1.0
    assert value(points, "llm_gpu_memory_total_bytes", **gpu) == 143771 * 1024 * 1024
    assert value(points, "llm_gpu_pcie_receive_bytes_per_second", **gpu) == 2048.25 * 1024 * 1024
    assert value(points, "llm_gpu_sm_clock_hertz", **gpu) == 1755e6
    assert value(points, "llm_gpu_energy_joules_total", **gpu) == 987654.321
    assert value(points, "llm_gpu_throttle_reason_active", **gpu, reason="sw_power_cap") == 1.0


#: an A100 node with one MIG instance, typed in the label shape NVIDIA's GPU Operator documentation
#: shows for dcgm-exporter (``gpu``, ``UUID``, ``device``, ``pci_bus_id``, ``modelName``, ``Hostname``,
#: the driver version as a label, ``GPU_I_PROFILE`` / ``GPU_I_ID`` on the instance's lines), with
#: untyped lines as older releases serve them; numbers of our own
DOCUMENTED_SHAPE = """\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA A100-SXM4-40GB",Hostname="node-a",DCGM_FI_DRIVER_VERSION="550.54.15"} 1410
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",Hostname="node-a"} 30000
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",Hostname="node-a"} 10000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",Hostname="node-a"} 0.981234
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",Hostname="node-a"} 0.812500
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",Hostname="node-a"} 0.625000
DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",Hostname="node-a"} 2097152
DCGM_FI_PROF_PCIE_RX_BYTES{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",Hostname="node-a"} 104857600
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",GPU_I_PROFILE="1g.5gb",GPU_I_ID="13",Hostname="node-a"} 0.100000
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-1a2b3c4d-0000-1111-2222-333344445555",device="nvidia0",GPU_I_PROFILE="1g.5gb",GPU_I_ID="13",Hostname="node-a"} 0.050000
"""


def test_the_documented_label_shape_with_a_mig_instance_reads_the_physical_gpu() -> None:
    gpus, partial = gpus_from_exposition(DOCUMENTED_SHAPE, "dcgm-exporter")
    assert partial == [] and len(gpus) == 1
    reading = reading_of(gpus[0])
    assert reading["uuid"] == "GPU-1a2b3c4d-0000-1111-2222-333344445555"
    assert reading["gpu_name"] == "NVIDIA A100-SXM4-40GB"
    assert reading["tensor_util"] == pytest.approx(81.25) and reading["dram_bw_util"] == pytest.approx(62.5)
    assert reading["pcie_tx_mib_s"] == pytest.approx(2.0) and reading["pcie_rx_mib_s"] == pytest.approx(100.0)
    assert reading["fb_used_mib"] == 10000 and reading["fb_total_mib"] == 40000
    assert reading["sm_clock_mhz"] == 1410


def test_blank_sentinels_and_mig_instances_are_not_read() -> None:
    text = render([GpuRow({**H200, "temp_c": INT64_NOT_SUPPORTED}, mig=[{**H200, "sm_util": 1.0}])])
    gpus, _ = gpus_from_exposition(text, "x")
    assert len(gpus) == 1
    reading = reading_of(gpus[0])
    assert "temp_c" not in reading  # DCGM_INT64_NOT_SUPPORTED means absent
    assert reading["sm_util"] == 92.1  # the physical GPU's, not its MIG instance's


def test_an_answer_past_the_line_budget_is_too_many_series(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine scrape's bound on lines read: past it the answer is refused whole, named, not parsed on."""
    text = render([GpuRow(H200), GpuRow(SECOND, index=1)])
    lines = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    monkeypatch.setattr("exporter.gpu.dcgm_exporter.MAX_INPUT_SERIES", lines - 1)
    with pytest.raises(SourceError) as err:
        gpus_from_exposition(text, "dcgm-exporter")
    assert err.value.reason == "too_many_series"
    monkeypatch.setattr("exporter.gpu.dcgm_exporter.MAX_INPUT_SERIES", lines)
    assert len(gpus_from_exposition(text, "dcgm-exporter")[0]) == 2


def test_gpus_past_the_cap_are_left_out_with_one_partial_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("exporter.gpu.dcgm_exporter.MAX_GPUS", 2)
    rows = [GpuRow({**H200, "uuid": f"GPU-00000000-0000-0000-0000-00000000000{i}"}, index=i) for i in range(5)]
    gpus, partial = gpus_from_exposition(render(rows), "dcgm-exporter")
    assert [g.index for g in gpus] == [0, 1]
    assert [e.reason for e in partial] == ["too_many_series"] and "more than 2 GPUs" in str(partial[0])


def test_pods_become_pod_info_unless_the_kubelet_attribution_runs() -> None:
    rows = [GpuRow(H200, pod=("serving", "vllm-0", "vllm")), GpuRow(SECOND, index=1)]
    with FakeEngine(render(rows)) as engine:
        points = DcgmExporterSource(engine.url, 1.0, 0.9).sample().points
        info = [p.labels for p in points if p.name == "llm_gpu_pod_info"]
        assert info == [{"gpu": "0", "uuid": H200["uuid"], "namespace": "serving", "pod": "vllm-0", "container": "vllm"}]
        quiet = DcgmExporterSource(engine.url, 1.0, 0.9, pod_info=False).sample().points
        assert not [p for p in quiet if p.name == "llm_gpu_pod_info"]


def _error(source: DcgmExporterSource) -> SourceError:
    with pytest.raises(SourceError) as caught:
        source.sample()
    return caught.value


def test_faults_are_named_and_cleared_on_the_next_good_answer(fake: FakeEngine) -> None:
    source = DcgmExporterSource(fake.url, 1.0, 0.5)
    good = render([GpuRow(H200)])
    cases: list[tuple[dict[str, object], str]] = [
        ({"status": 503}, "http_status"),
        ({"body": b"DCGM_FI_DEV_GPU_UTIL{gpu=0} 1\n"}, "parse"),
        ({"body": b"\xff\xfe garbage\n"}, "parse"),
        ({"body": b"# HELP up 1\nup 1\n"}, "bad_response"),
        ({"body": good.replace('gpu="0"', 'gpu="x0"')}, "parse"),
        ({"body": b"x" * (MAX_BODY_BYTES + 1)}, "too_large"),
        ({"delay": 5.0}, "timeout"),
        ({"down": True}, "connection"),
    ]
    for change, reason in cases:
        fake.set(**change)
        err = _error(source)
        assert err.reason == reason, (change.keys(), err)
        fake.reset()
        fake.set(body=good)
        assert value(source.sample().points, "llm_gpu_up") == 1.0


def test_spec_and_setting_are_checked() -> None:
    assert parse_spec("dcgm-exporter:http://10.0.0.7:9400") == ("dcgm-exporter", "http://10.0.0.7:9400/metrics")
    assert parse_spec("dcgm-exporter:https://dcgm.gpu-operator:9400/metrics")[1].endswith(":9400/metrics")
    for bad in (
        "dcgm-exporter:",
        "dcgm-exporter:10.0.0.7:9400",
        "dcgm-exporter:http://u:p@h:9400",
        "dcgm-exporter:http://h:99999",
    ):
        with pytest.raises(ValueError):
            parse_spec(bad)
    with pytest.raises(UsageError, match="dcgm-exporter"):
        load_config(_args("--gpu-source", "dcgm-exporter:ftp://h"), environ={})
    cfg = load_config(_args(), environ={"LLM_EXPORTER_DCGM_EXPORTER_URL": "http://10.0.0.7:9400"})
    assert cfg.dcgm_exporter_url == "http://10.0.0.7:9400/metrics"
    with pytest.raises(UsageError, match="LLM_EXPORTER_DCGM_EXPORTER_URL"):
        load_config(_args(), environ={"LLM_EXPORTER_DCGM_EXPORTER_URL": "gpu-node:9400"})


def test_auto_reads_a_configured_dcgm_exporter_and_never_a_second_profiler(
    fake: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    source = build_gpu_source("auto", 1.0, 0.9, dcgm_exporter_url=fake.url)
    assert isinstance(source, DcgmExporterSource)
    fake.set(down=True)
    # not answering yet (both DaemonSets starting): still this source, which retries every sample
    with caplog.at_level(logging.WARNING, logger="exporter.gpu"):
        waiting = build_gpu_source("auto", 1.0, 0.9, dcgm_exporter_url=fake.url)
    assert isinstance(waiting, DcgmExporterSource)
    assert "not answering yet" in caplog.text
    fake.set(down=False)
    assert value(waiting.sample().points, "llm_gpu_up") == 1.0


def _primary(v: Verdict) -> tuple[str, str] | None:
    return (v.primary.layer, v.primary.cause) if v.primary else None


def _gpu_points(points: list[Point]) -> list[Point]:
    return [p for p in points if p.name.startswith("llm_gpu_")]


@pytest.mark.parametrize("trace", ["kernels", "serving"])
def test_same_verdicts_as_replay_on_the_recorded_phases(trace: str) -> None:
    """The H200 recordings served by a fake dcgm-exporter (the CSV docs/gpu-sources.md asks for)
    give, row by row, the points replay gives (bar the source name) and the same verdicts."""
    path = bundled_trace(trace)
    readings = parse_trace(path.read_text(encoding="utf-8"), str(path))
    rows = trace_rows(trace)
    replay, live = DiagnosisEngine(), DiagnosisEngine()
    with FakeEngine(b"") as engine:
        source = DcgmExporterSource(engine.url, 1.0, 0.9)
        for i, (reading, row) in enumerate(zip(readings, rows, strict=True)):
            engine.set(body=render([GpuRow(reading)], "4.x", "full"))
            got = source.sample().points
            others = [p for p in row.points if not p.name.startswith("llm_gpu_")]
            expected = [
                Sample(p.name, {**p.labels, "source": "dcgm-exporter"}, p.value) if p.name == "llm_gpu_info" else p
                for p in _gpu_points(row.points)
                if isinstance(p, Sample)
            ]
            assert _gpu_points(got) == expected, f"row {i}"
            a = replay.observe(snapshot(row.points, float(i)))
            b = live.observe(snapshot(got + others, float(i)))
            assert (b.state, _primary(b), sorted(b.active())) == (a.state, _primary(a), sorted(a.active())), f"row {i}"
