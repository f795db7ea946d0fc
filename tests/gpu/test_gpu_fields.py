"""Decoding of one reading: units, throttle bits, absent-not-zero, profiling flag."""

from __future__ import annotations

import pytest

from exporter.gpu.fields import ReadingError, normalise, reading_points
from exporter.schema import SPECS, THROTTLE_REASON_BITS
from tests.gpu.gpu_helpers import PROFILING_METRICS, names, reasons, value

FULL = {
    "gpu_name": "NVIDIA H200",
    "uuid": "GPU-1",
    "nvml_gpu_util": "98",
    "nvml_mem_util": "25",
    "sm_util": "94.47",
    "sm_occupancy": "13.96",
    "tensor_util": "91.67",
    "dram_bw_util": "17.41",
    "fb_used_mib": "1625",
    "fb_total_mib": "143771",
    "power_w": "695.848",
    "power_limit_w": "700",
    "sm_clock_mhz": "1470",
    "sm_clock_max_mhz": "1980",
    "mem_clock_mhz": "3201",
    "pcie_tx_mib_s": "0.86",
    "pcie_rx_mib_s": "2.48",
    "nvlink_tx_mib_s": "100",
    "nvlink_rx_mib_s": "50",
    "temp_c": "59",
    "energy_mj": "123456789",
    "throttle_reasons": "0x4",
    "phase": "prefill_gemm_bf16",
}


def test_units_are_converted_to_base_units() -> None:
    pts = reading_points(3, FULL, "replay")
    g = {"gpu": "3", "uuid": "GPU-1"}
    assert value(pts, "llm_gpu_info", **g, name="NVIDIA H200", source="replay") == 1
    assert value(pts, "llm_gpu_up", **g) == 1
    assert value(pts, "llm_gpu_profiling_available", **g) == 1
    assert value(pts, "llm_gpu_utilization_ratio", **g) == 0.98
    assert value(pts, "llm_gpu_memory_utilization_ratio", **g) == 0.25
    assert value(pts, "llm_gpu_sm_active_ratio", **g) == 0.9447
    assert value(pts, "llm_gpu_sm_occupancy_ratio", **g) == 0.1396
    assert value(pts, "llm_gpu_tensor_active_ratio", **g) == 0.9167
    assert value(pts, "llm_gpu_dram_active_ratio", **g) == 0.1741
    assert value(pts, "llm_gpu_memory_used_bytes", **g) == 1625 * 1024 * 1024
    assert value(pts, "llm_gpu_memory_total_bytes", **g) == 143771 * 1024 * 1024
    assert value(pts, "llm_gpu_power_watts", **g) == 695.848
    assert value(pts, "llm_gpu_power_limit_watts", **g) == 700
    assert value(pts, "llm_gpu_sm_clock_hertz", **g) == 1_470_000_000
    assert value(pts, "llm_gpu_sm_clock_max_hertz", **g) == 1_980_000_000
    assert value(pts, "llm_gpu_memory_clock_hertz", **g) == 3_201_000_000
    assert value(pts, "llm_gpu_pcie_transmit_bytes_per_second", **g) == pytest.approx(0.86 * 1024 * 1024)
    assert value(pts, "llm_gpu_pcie_receive_bytes_per_second", **g) == pytest.approx(2.48 * 1024 * 1024)
    assert value(pts, "llm_gpu_nvlink_transmit_bytes_per_second", **g) == 100 * 1024 * 1024
    assert value(pts, "llm_gpu_nvlink_receive_bytes_per_second", **g) == 50 * 1024 * 1024
    assert value(pts, "llm_gpu_temperature_celsius", **g) == 59
    assert value(pts, "llm_gpu_energy_joules_total", **g) == 123456.789


def test_every_point_is_a_schema_metric_with_its_declared_labels() -> None:
    for p in reading_points(0, FULL, "replay"):
        assert p.name in SPECS
        assert set(p.labels) == set(SPECS[p.name].labels), p.name


@pytest.mark.parametrize("mask", [0x0, 0x1, 0x4, 0x5, 0x1FF, 0x600])
def test_throttle_bitmask_gives_every_reason_as_0_or_1(mask: int) -> None:
    got = reasons(reading_points(0, {"throttle_reasons": hex(mask)}, "replay"))
    assert got == {r: (1.0 if mask & bit else 0.0) for bit, r in THROTTLE_REASON_BITS.items()}


def test_throttle_accepts_int_and_decimal_text() -> None:
    assert reasons(reading_points(0, {"throttle_reasons": 4}, "x"))["sw_power_cap"] == 1
    assert reasons(reading_points(0, {"throttle_reasons": "64"}, "x"))["hw_thermal_slowdown"] == 1


def test_missing_or_empty_values_are_absent_never_zero() -> None:
    sparse = {"uuid": "GPU-1", "power_w": "", "temp_c": None, "sm_clock_mhz": "nan", "nvml_gpu_util": "0"}
    pts = reading_points(0, sparse, "replay")
    assert names(pts) == {
        "llm_gpu_info",
        "llm_gpu_up",
        "llm_gpu_profiling_available",
        "llm_gpu_profiling_metric_available",
        "llm_gpu_utilization_ratio",
    }
    assert value(pts, "llm_gpu_utilization_ratio") == 0.0  # a real 0 stays 0


def test_without_profiling_keys_profiling_is_unavailable_and_absent() -> None:
    no_gpm = {k: v for k, v in FULL.items() if k not in ("sm_util", "sm_occupancy", "tensor_util", "dram_bw_util")}
    pts = reading_points(0, no_gpm, "replay")
    assert value(pts, "llm_gpu_profiling_available") == 0
    assert not names(pts) & PROFILING_METRICS
    flags = [p for p in pts if p.name == "llm_gpu_profiling_metric_available"]
    assert {p.labels["metric"] for p in flags} == PROFILING_METRICS and {p.value for p in flags} == {0.0}


def test_profiling_per_metric_follows_the_reading_or_the_source() -> None:
    """Replay/sim/dcgm-exporter: what the input lists; NVML GPM or a DCGM watch: one answer for all four."""
    partial = {k: v for k, v in FULL.items() if k != "sm_occupancy"}

    def flags(profiling: bool | None) -> dict[str, float]:
        pts = reading_points(0, partial, "x", profiling=profiling)
        return {p.labels["metric"]: p.value for p in pts if p.name == "llm_gpu_profiling_metric_available"}

    assert flags(None) == {m: float(m != "llm_gpu_sm_occupancy_ratio") for m in PROFILING_METRICS}
    assert set(flags(True).values()) == {1.0} and set(flags(False).values()) == {0.0}


def test_explicit_profiling_flag_wins_over_inference() -> None:
    pts = reading_points(0, {"uuid": "u"}, "nvml", profiling=True)
    assert value(pts, "llm_gpu_profiling_available") == 1
    assert not names(pts) & PROFILING_METRICS


def test_lost_gpu_reports_only_info_and_up_zero() -> None:
    pts = reading_points(1, FULL, "nvml", up=False)
    assert names(pts) == {"llm_gpu_info", "llm_gpu_up"}
    assert value(pts, "llm_gpu_up", gpu="1", uuid="GPU-1") == 0


@pytest.mark.parametrize(
    "raw",
    [
        {"power_w": "lots"},
        {"power_w": True},
        {"temp_c": "inf"},
        {"throttle_reasons": "0xZZ"},
        {"throttle_reasons": -1},
        {"uuid": 7},
    ],
)
def test_bad_values_raise_reading_error_naming_the_key(raw: dict[str, object]) -> None:
    with pytest.raises(ReadingError, match=next(iter(raw))):
        normalise(raw)
