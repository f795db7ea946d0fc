"""DCGM: pure field decoding, missing bindings, and the thin DCGM layer over fake bindings."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from exporter.gpu import build_gpu_source
from exporter.gpu.dcgm import (
    DCGM_FP64_BLANK,
    DCGM_INT64_BLANK,
    DcgmSource,
    DcgmValue,
    is_blank,
    reading_from_dcgm,
)
from exporter.gpu.fields import reading_points
from exporter.samples import SourceError
from tests.gpu.gpu_helpers import PROFILING_METRICS, copy_fake_dcgm, names, reasons, value

MIB = 1024 * 1024
H200_FIELDS: dict[int, DcgmValue] = {
    50: "NVIDIA H200",
    54: "GPU-dcgm-0",
    203: 95,
    204: 31,
    1002: 0.92,
    1003: 0.14,
    1004: 0.9,
    1005: 0.17,
    252: 80000,
    250: 143771,
    155: 651.2,
    164: 700.0,
    100: 1522,
    101: 3201,
    113: 1980,
    112: 0x4,
    150: 61,
    1009: 1572864,
    1010: 3 * MIB,
    1011: 10 * MIB,
    1012: 20 * MIB,
    156: 123456789,
}


def test_field_values_decode_to_the_same_metrics_as_nvml() -> None:
    pts = reading_points(0, reading_from_dcgm(H200_FIELDS), "dcgm", profiling=True)
    g = {"gpu": "0", "uuid": "GPU-dcgm-0"}
    assert value(pts, "llm_gpu_info", **g, name="NVIDIA H200", source="dcgm") == 1
    assert value(pts, "llm_gpu_utilization_ratio", **g) == 0.95
    assert value(pts, "llm_gpu_memory_utilization_ratio", **g) == 0.31
    assert value(pts, "llm_gpu_sm_active_ratio", **g) == 0.92  # DCGM ratios stay ratios, exactly
    assert value(pts, "llm_gpu_sm_occupancy_ratio", **g) == 0.14
    assert value(pts, "llm_gpu_tensor_active_ratio", **g) == 0.9
    assert value(pts, "llm_gpu_dram_active_ratio", **g) == 0.17
    assert value(pts, "llm_gpu_memory_used_bytes", **g) == 80000 * MIB
    assert value(pts, "llm_gpu_memory_total_bytes", **g) == 143771 * MIB
    assert value(pts, "llm_gpu_power_watts", **g) == 651.2
    assert value(pts, "llm_gpu_power_limit_watts", **g) == 700
    assert value(pts, "llm_gpu_sm_clock_hertz", **g) == 1522e6
    assert value(pts, "llm_gpu_memory_clock_hertz", **g) == 3201e6
    assert value(pts, "llm_gpu_sm_clock_max_hertz", **g) == 1980e6
    assert value(pts, "llm_gpu_temperature_celsius", **g) == 61
    assert value(pts, "llm_gpu_pcie_transmit_bytes_per_second", **g) == 1572864  # DCGM: bytes/s already
    assert value(pts, "llm_gpu_pcie_receive_bytes_per_second", **g) == 3 * MIB
    assert value(pts, "llm_gpu_nvlink_transmit_bytes_per_second", **g) == 10 * MIB
    assert value(pts, "llm_gpu_nvlink_receive_bytes_per_second", **g) == 20 * MIB
    assert value(pts, "llm_gpu_energy_joules_total", **g) == 123456.789
    assert reasons(pts)["sw_power_cap"] == 1 and reasons(pts)["gpu_idle"] == 0


@pytest.mark.parametrize(
    "blank",
    [DCGM_INT64_BLANK, DCGM_INT64_BLANK + 2, DCGM_FP64_BLANK, DCGM_FP64_BLANK + 3, float("nan"), None, "<<<NOT_SUPPORTED>>>"],
)
def test_blank_sentinels_are_absent_never_exported(blank: DcgmValue) -> None:
    assert is_blank(blank)
    fields = {54: "GPU-1", 150: blank, 1002: blank, 112: blank, 50: blank}
    reading = reading_from_dcgm(fields)
    assert reading == {"uuid": "GPU-1"}
    pts = reading_points(0, reading, "dcgm", profiling=True)
    assert names(pts) == {"llm_gpu_info", "llm_gpu_up", "llm_gpu_profiling_available", "llm_gpu_profiling_metric_available"}


def test_ordinary_values_are_not_blank() -> None:
    assert not any(is_blank(v) for v in (0, 0.0, 2**40, 1e12, "GPU-1", False))


def test_unknown_field_ids_are_ignored() -> None:
    assert reading_from_dcgm({999: 5, 203: 50}) == {"nvml_gpu_util": 50.0}


def fault(src: DcgmSource) -> SourceError:
    with pytest.raises(SourceError) as info:
        src.sample()
    return info.value


def test_selecting_dcgm_without_bindings_faults_but_does_not_crash(no_dcgm: None) -> None:
    src = build_gpu_source("dcgm", 1.0, 1.0, dcgm_binding_paths=())
    assert isinstance(src, DcgmSource) and src.name == "gpu"
    for _ in range(2):
        err = fault(src)
        assert err.reason == "dcgm_unavailable"
        assert "bindings not found" in err.message
    src.close()


def test_dcgm_recovers_once_bindings_are_installed(dcgm_dir: Path) -> None:
    src = DcgmSource(1.0, 1.0, binding_paths=(str(dcgm_dir),))
    assert fault(src).reason == "dcgm_unavailable"
    copy_fake_dcgm(dcgm_dir)  # the source must notice the new files itself
    pts = src.sample().points
    assert value(pts, "llm_gpu_sm_active_ratio", gpu="0", uuid="GPU-fake-0") == 0.5
    assert value(pts, "llm_gpu_profiling_available", gpu="0") == 1
    pydcgm = importlib.import_module("pydcgm")
    assert pydcgm.STATE["hosts"] == [None]  # embedded host engine
    src.close()
    assert pydcgm.STATE["live_groups"] == set()


def _programmed(folder: Path, values: dict[int, dict[int, DcgmValue]] | None = None) -> ModuleType:
    """Import the fake pydcgm from ``folder`` and give it one H200 (or ``values``)."""
    import sys

    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    importlib.invalidate_caches()
    pydcgm = importlib.import_module("pydcgm")
    pydcgm.reset(values if values is not None else {0: dict(H200_FIELDS)})
    return pydcgm


def test_standalone_host_engine_and_energy_on_its_own_slow_watch(dcgm_dir: Path) -> None:
    copy_fake_dcgm(dcgm_dir)
    pydcgm = _programmed(dcgm_dir, {0: dict(H200_FIELDS), 1: {**H200_FIELDS, 54: "GPU-dcgm-1", 1002: 0.5}})
    src = build_gpu_source("dcgm:10.0.0.7:5555", 0.5, 1.0, dcgm_binding_paths=(str(dcgm_dir),))
    assert src is not None
    pts = src.sample().points
    assert pydcgm.STATE["hosts"] == ["10.0.0.7:5555"]
    assert value(pts, "llm_gpu_sm_active_ratio", gpu="1", uuid="GPU-dcgm-1") == 0.5
    assert value(pts, "llm_gpu_energy_joules_total", gpu="0") == 123456.789
    watches = dict(pydcgm.STATE["watches"])
    assert watches[(156,)] == 30_000_000  # energy every 30 s
    assert all(freq == 500_000 for fields, freq in pydcgm.STATE["watches"] if fields != (156,))
    assert not any(156 in fields for fields, _ in pydcgm.STATE["watches"] if fields != (156,))
    src.close()


def test_profiling_refused_means_profiling_unavailable(dcgm_dir: Path) -> None:
    copy_fake_dcgm(dcgm_dir)
    pydcgm = _programmed(dcgm_dir)
    pydcgm.STATE["profiling"] = False
    pts = DcgmSource(1.0, 1.0, binding_paths=(str(dcgm_dir),)).sample().points
    assert value(pts, "llm_gpu_profiling_available", gpu="0") == 0
    assert not names(pts) & PROFILING_METRICS
    assert value(pts, "llm_gpu_power_watts", gpu="0") == 651.2


def test_host_engine_unreachable_then_dropped_then_back(dcgm_dir: Path) -> None:
    copy_fake_dcgm(dcgm_dir)
    pydcgm = _programmed(dcgm_dir)
    pydcgm.STATE["refuse_connect"] = -21
    src = DcgmSource(1.0, 1.0, host="127.0.0.1", binding_paths=(str(dcgm_dir),))
    assert fault(src).reason == "dcgm_unavailable"
    pydcgm.STATE["refuse_connect"] = None
    assert value(src.sample().points, "llm_gpu_up", gpu="0") == 1
    pydcgm.STATE["drop"] = True
    assert fault(src).reason == "connection"
    assert pydcgm.STATE["live_groups"] == set()  # torn down, ready to reconnect
    pydcgm.STATE["drop"] = False
    assert value(src.sample().points, "llm_gpu_up", gpu="0") == 1
    assert pydcgm.STATE["connects"] == 2


def test_dcgm_without_gpus_is_unavailable(dcgm_dir: Path) -> None:
    copy_fake_dcgm(dcgm_dir)
    _programmed(dcgm_dir, {})
    err = fault(DcgmSource(1.0, 1.0, binding_paths=(str(dcgm_dir),)))
    assert err.reason == "dcgm_unavailable" and "no supported GPU" in err.message
