"""NVML source against the fake pynvml: H200 with GPM, A100 without, and every fault."""

from __future__ import annotations

import sys

import pynvml
import pytest

from exporter.gpu import build_gpu_source
from exporter.gpu.nvml import NvmlSource
from exporter.samples import SampleResult, SourceError
from tests.fakes.pynvml_fake import MIB, FakeGpu, FakeNvml
from tests.gpu.gpu_helpers import PROFILING_METRICS, names, reasons, value


class Clock:
    """A hand-moved monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def a100() -> FakeGpu:
    return FakeGpu(
        name="NVIDIA A100-SXM4-80GB", uuid="GPU-a100", gpm=False, gpm_values={}, reasons=0x1, sm_clock=1410, max_sm_clock=1410
    )


def source(fake: FakeNvml, clock: Clock | None = None, **kw: float) -> NvmlSource:
    return NvmlSource(1.0, 1.0, nvml=fake, clock=clock or Clock(), **kw)


def test_h200_with_gpm_reports_every_metric_in_base_units() -> None:
    fake = FakeNvml([FakeGpu()])
    src = source(fake)
    first = src.sample().points
    # GPM needs two samples: the first one has no window yet
    assert value(first, "llm_gpu_profiling_available", gpu="0") == 1
    assert not names(first) & PROFILING_METRICS
    result = src.sample()
    pts = result.points
    assert result.partial_errors == []
    g = {"gpu": "0", "uuid": "GPU-b291c692-64b4-34e2-62c0-d8362a374b32"}
    assert value(pts, "llm_gpu_info", **g, name="NVIDIA H200", source="nvml") == 1
    assert value(pts, "llm_gpu_up", **g) == 1
    assert value(pts, "llm_gpu_utilization_ratio", **g) == 0.95
    assert value(pts, "llm_gpu_memory_utilization_ratio", **g) == 0.31
    assert value(pts, "llm_gpu_sm_active_ratio", **g) == 0.92
    assert value(pts, "llm_gpu_sm_occupancy_ratio", **g) == 0.14
    assert value(pts, "llm_gpu_tensor_active_ratio", **g) == 0.90
    assert value(pts, "llm_gpu_dram_active_ratio", **g) == 0.17
    assert value(pts, "llm_gpu_pcie_transmit_bytes_per_second", **g) == 1.5 * MIB
    assert value(pts, "llm_gpu_pcie_receive_bytes_per_second", **g) == 3.25 * MIB
    # memory info v2: used excludes the reserved part, as DCGM field 252 does
    assert value(pts, "llm_gpu_memory_used_bytes", **g) == 80_000 * MIB
    assert value(pts, "llm_gpu_memory_total_bytes", **g) == 143771 * MIB
    assert value(pts, "llm_gpu_power_watts", **g) == 651.234
    assert value(pts, "llm_gpu_power_limit_watts", **g) == 700
    assert value(pts, "llm_gpu_sm_clock_hertz", **g) == 1522e6
    assert value(pts, "llm_gpu_sm_clock_max_hertz", **g) == 1980e6
    assert value(pts, "llm_gpu_memory_clock_hertz", **g) == 3201e6
    assert value(pts, "llm_gpu_temperature_celsius", **g) == 61
    assert value(pts, "llm_gpu_energy_joules_total", **g) == 123456.789
    assert reasons(pts) == {r: (1.0 if r == "sw_power_cap" else 0.0) for r in reasons(pts)}
    # NVLink GPM metrics answer "not supported" per metric on this GPU: absent
    assert value(pts, "llm_gpu_nvlink_transmit_bytes_per_second") is None
    assert fake.calls["nvmlGpmMetricsGet"] == 1


def test_gpm_window_uses_consecutive_samples_and_reuses_two_buffers() -> None:
    fake = FakeNvml([FakeGpu()])
    src = source(fake)
    for _ in range(5):
        src.sample()
    assert fake.calls["nvmlGpmSampleGet"] == 5  # one new sample per call, never re-taken
    assert fake.calls["nvmlGpmMetricsGet"] == 4
    assert fake.calls["nvmlGpmSampleAlloc"] == 2
    src.close()
    assert fake.live_gpm_samples() == 0
    assert fake.initialised == 0


def test_a100_without_gpm_has_no_profiling_metrics_and_says_so() -> None:
    fake = FakeNvml([a100()])
    src = source(fake)
    for _ in range(2):
        pts = src.sample().points
    assert value(pts, "llm_gpu_profiling_available", gpu="0", uuid="GPU-a100") == 0
    assert not names(pts) & PROFILING_METRICS
    assert value(pts, "llm_gpu_pcie_transmit_bytes_per_second") is None
    assert value(pts, "llm_gpu_utilization_ratio", gpu="0") == 0.95
    assert reasons(pts)["gpu_idle"] == 1
    assert fake.calls["nvmlGpmSampleGet"] == 0 and fake.calls["nvmlGpmSampleAlloc"] == 0


def test_mixed_node_reports_each_gpu_with_its_own_capabilities() -> None:
    src = source(FakeNvml([FakeGpu(), a100()]))
    src.sample()
    pts = src.sample().points
    assert value(pts, "llm_gpu_profiling_available", gpu="0") == 1
    assert value(pts, "llm_gpu_profiling_available", gpu="1") == 0
    assert value(pts, "llm_gpu_sm_active_ratio", gpu="0") == 0.92
    assert value(pts, "llm_gpu_sm_active_ratio", gpu="1") is None


def test_library_not_found_faults_every_sample_then_recovers() -> None:
    fake = FakeNvml([FakeGpu()], library_missing=True)
    src = build_gpu_source("nvml", 1.0, 1.0, nvml_module=fake)  # must not raise
    assert src is not None
    for _ in range(2):
        with pytest.raises(SourceError) as info:
            src.sample()
        assert info.value.reason == "library_not_found"
    assert fake.calls["nvmlInit"] == 2  # retried on every sample
    fake.library_missing = False
    assert value(src.sample().points, "llm_gpu_up", gpu="0") == 1


def test_pynvml_not_installed_is_library_not_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(SourceError) as info:
        NvmlSource(1.0, 1.0).sample()
    assert info.value.reason == "library_not_found"
    assert "nvidia-ml-py" in info.value.message


def test_lost_gpu_goes_down_alone_and_comes_back_after_retry() -> None:
    clock = Clock()
    fake = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-two", lose_after=36)])
    src = source(fake, clock, lost_retry=5.0)
    results: list[SampleResult] = []
    for _ in range(3):
        results.append(src.sample())
        clock.now += 1
    assert value(results[0].points, "llm_gpu_up", gpu="1") == 1  # 36 device calls last into sample 3
    down = results[-1]
    assert value(down.points, "llm_gpu_up", gpu="1", uuid="GPU-two") == 0
    assert value(down.points, "llm_gpu_info", gpu="1", uuid="GPU-two", source="nvml") == 1
    assert names(down.points, gpu="1") == {"llm_gpu_info", "llm_gpu_up"}
    assert [e.reason for e in down.partial_errors] == ["gpu_lost"]
    assert value(down.points, "llm_gpu_up", gpu="0") == 1
    assert value(down.points, "llm_gpu_sm_active_ratio", gpu="0") == 0.92
    # still lost, and not retried before lost_retry has passed
    handles = fake.calls["nvmlDeviceGetHandleByIndex"]
    assert value(src.sample().points, "llm_gpu_up", gpu="1") == 0
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == handles
    fake.recover(1)
    clock.now += 5
    back = src.sample()
    assert value(back.points, "llm_gpu_up", gpu="1", uuid="GPU-two") == 1
    assert value(back.points, "llm_gpu_power_watts", gpu="1") == 651.234
    assert back.partial_errors == []
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == handles + 1  # a fresh handle
    src.sample()
    assert value(src.sample().points, "llm_gpu_sm_active_ratio", gpu="1") == 0.92  # GPM restarted
    src.close()
    assert fake.live_gpm_samples() == 0


def test_gpu_lost_at_start_is_reported_down_not_fatal() -> None:
    fake = FakeNvml([FakeGpu(lost=True)])
    result = source(fake).sample()
    assert value(result.points, "llm_gpu_up", gpu="0") == 0
    assert [e.reason for e in result.partial_errors] == ["gpu_lost"]


def test_not_supported_call_makes_only_that_metric_absent_and_is_not_repeated() -> None:
    fake = FakeNvml([FakeGpu(not_supported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"})])
    src = source(fake)
    for _ in range(3):
        result = src.sample()
    pts = result.points
    assert value(pts, "llm_gpu_power_watts") is None
    assert value(pts, "llm_gpu_temperature_celsius") is None
    assert value(pts, "llm_gpu_power_limit_watts", gpu="0") == 700
    assert result.partial_errors == []
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1


def test_old_driver_without_clocks_event_symbol_falls_back_to_throttle_reasons() -> None:
    fake = FakeNvml([FakeGpu(reasons=0x41)], event_reasons_symbol=False)
    src = source(fake)
    src.sample()
    got = reasons(src.sample().points)
    assert got["gpu_idle"] == 1 and got["hw_thermal_slowdown"] == 1 and got["sw_power_cap"] == 0
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # tried once, then remembered
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2


def test_memory_info_falls_back_to_v1_when_v2_is_missing() -> None:
    fake = FakeNvml([FakeGpu()])
    del_v2 = type("NoV2", (), {"__getattr__": lambda self, n: None if n == "nvmlMemory_v2" else getattr(fake, n)})()
    pts = NvmlSource(1.0, 1.0, nvml=del_v2, clock=Clock()).sample().points
    assert value(pts, "llm_gpu_memory_used_bytes") == (80_000 + 512) * MIB  # v1: reserved + allocated


def test_energy_is_read_on_the_slow_cadence_and_repeated_between_reads() -> None:
    clock = Clock()
    fake = FakeNvml([FakeGpu()])
    src = source(fake, clock, energy_interval=30.0)
    for _ in range(30):
        pts = src.sample().points
        assert value(pts, "llm_gpu_energy_joules_total", gpu="0") == 123456.789
        clock.now += 1.0
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1
    fake.gpus[0].energy_mj = 124_000_000
    pts = src.sample().points  # 30 s after the first read
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 2
    assert value(pts, "llm_gpu_energy_joules_total", gpu="0") == 124000.0
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 31  # the cheap reads run every sample


def test_energy_not_supported_is_absent() -> None:
    pts = source(FakeNvml([FakeGpu(not_supported={"nvmlDeviceGetTotalEnergyConsumption"})])).sample().points
    assert value(pts, "llm_gpu_energy_joules_total") is None


def test_gpm_query_unsupported_by_driver_means_profiling_unavailable() -> None:
    fake = FakeNvml([FakeGpu(not_supported={"nvmlGpmQueryDeviceSupport"})])
    src = source(fake)
    src.sample()
    pts = src.sample().points
    assert value(pts, "llm_gpu_profiling_available", gpu="0") == 0
    assert not names(pts) & PROFILING_METRICS


def test_gpm_failing_mid_run_turns_profiling_off_and_frees_buffers() -> None:
    fake = FakeNvml([FakeGpu()])
    src = source(fake)
    src.sample()
    fake.gpus[0].not_supported.add("nvmlGpmSampleGet")
    pts = src.sample().points
    assert value(pts, "llm_gpu_profiling_available", gpu="0") == 0
    assert value(pts, "llm_gpu_up", gpu="0") == 1
    assert fake.live_gpm_samples() == 0


def test_unexpected_nvml_error_on_a_field_is_a_partial_error() -> None:
    class Flaky(FakeNvml):
        def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
            raise pynvml.NVMLError_Unknown()

    result = source(Flaky([FakeGpu()])).sample()
    assert value(result.points, "llm_gpu_power_watts") is None
    assert value(result.points, "llm_gpu_temperature_celsius", gpu="0") == 61
    assert [e.reason for e in result.partial_errors] == ["internal"]


def test_driver_gone_mid_run_faults_the_source_and_reinitialises() -> None:
    class Unloaded(FakeNvml):
        gone = False

        def nvmlDeviceGetUtilizationRates(self, handle: object) -> object:
            if self.gone:
                raise pynvml.NVMLError_DriverNotLoaded()
            return super().nvmlDeviceGetUtilizationRates(handle)

    fake = Unloaded([FakeGpu()])
    src = source(fake)
    src.sample()
    fake.gone = True
    with pytest.raises(SourceError) as info:
        src.sample()
    assert info.value.reason == "library_not_found"
    assert fake.live_gpm_samples() == 0 and fake.initialised == 0
    fake.gone = False
    assert value(src.sample().points, "llm_gpu_up", gpu="0") == 1
    assert fake.calls["nvmlInit"] == 2
