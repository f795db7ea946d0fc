"""Replay source: values against the recorded CSV rows, looping, faults and recovery."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from exporter.gpu import build_gpu_source
from exporter.gpu.replay import ReplaySource, bundled_trace
from exporter.samples import SourceError
from exporter.sources import Source
from tests.gpu.gpu_helpers import PROFILING_METRICS, names, reasons, value

#: the shared recordings beside the checkout (CI lays shared/ there too)
SHARED_KERNELS = Path(__file__).resolve().parents[3] / "shared" / "traces" / "h200" / "kernels.csv"


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def write(path: Path, header: list[str], *lines: list[object]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(lines)
    return path


def test_bundled_traces_exist_and_match_the_recording() -> None:
    for name in ("kernels", "serving", "kernels.csv"):
        assert bundled_trace(name).is_file()
    if SHARED_KERNELS.exists():
        assert bundled_trace("kernels").read_bytes() == SHARED_KERNELS.read_bytes()
    with pytest.raises(ValueError, match="unknown bundled trace"):
        bundled_trace("nope")


def test_every_row_of_the_kernels_trace_replays_with_converted_units() -> None:
    path = bundled_trace("kernels")
    expected = rows(path)
    src = ReplaySource([path], interval=1.0, timeout=1.0)
    # one more than a full pass: proves the wrap back to row 0
    for i in range(len(expected) + 1):
        row = expected[i % len(expected)]
        pts = src.sample().points
        g = {"gpu": "0", "uuid": row["uuid"]}
        assert value(pts, "llm_gpu_info", **g, name="NVIDIA H200", source="replay") == 1
        assert value(pts, "llm_gpu_utilization_ratio", **g) == pytest.approx(float(row["nvml_gpu_util"]) / 100)
        assert value(pts, "llm_gpu_memory_utilization_ratio", **g) == pytest.approx(float(row["nvml_mem_util"]) / 100)
        assert value(pts, "llm_gpu_sm_active_ratio", **g) == pytest.approx(float(row["sm_util"]) / 100)
        assert value(pts, "llm_gpu_sm_occupancy_ratio", **g) == pytest.approx(float(row["sm_occupancy"]) / 100)
        assert value(pts, "llm_gpu_tensor_active_ratio", **g) == pytest.approx(float(row["tensor_util"]) / 100)
        assert value(pts, "llm_gpu_dram_active_ratio", **g) == pytest.approx(float(row["dram_bw_util"]) / 100)
        assert value(pts, "llm_gpu_memory_used_bytes", **g) == float(row["fb_used_mib"]) * 2**20
        assert value(pts, "llm_gpu_memory_total_bytes", **g) == 143771 * 2**20
        assert value(pts, "llm_gpu_power_watts", **g) == pytest.approx(float(row["power_w"]))
        assert value(pts, "llm_gpu_power_limit_watts", **g) == 700
        assert value(pts, "llm_gpu_sm_clock_hertz", **g) == float(row["sm_clock_mhz"]) * 1e6
        assert value(pts, "llm_gpu_sm_clock_max_hertz", **g) == 1980e6
        assert value(pts, "llm_gpu_memory_clock_hertz", **g) == float(row["mem_clock_mhz"]) * 1e6
        assert value(pts, "llm_gpu_pcie_transmit_bytes_per_second", **g) == pytest.approx(float(row["pcie_tx_mib_s"]) * 2**20)
        assert value(pts, "llm_gpu_pcie_receive_bytes_per_second", **g) == pytest.approx(float(row["pcie_rx_mib_s"]) * 2**20)
        assert value(pts, "llm_gpu_temperature_celsius", **g) == float(row["temp_c"])
        mask = int(row["throttle_reasons"], 16)
        assert reasons(pts)["gpu_idle"] == float(bool(mask & 0x1))
        assert reasons(pts)["sw_power_cap"] == float(bool(mask & 0x4))
        # not in the recording: absent, never 0
        assert value(pts, "llm_gpu_energy_joules_total") is None
        assert value(pts, "llm_gpu_nvlink_transmit_bytes_per_second") is None


def test_serving_trace_without_optional_columns_omits_those_metrics() -> None:
    pts = ReplaySource([bundled_trace("serving")], 1.0, 1.0).sample().points
    assert value(pts, "llm_gpu_profiling_available", gpu="0") == 1
    assert value(pts, "llm_gpu_sm_active_ratio", gpu="0") is not None
    # serving.csv records no throttle reasons, temperature or memory clock
    assert not names(pts) & {"llm_gpu_throttle_reason_active", "llm_gpu_temperature_celsius", "llm_gpu_memory_clock_hertz"}


def test_one_file_per_gpu_each_looping_on_its_own(tmp_path: Path) -> None:
    a = write(tmp_path / "a.csv", ["uuid", "power_w"], ["GPU-a", 100], ["GPU-a", 200])
    b = write(tmp_path / "b.csv", ["uuid", "power_w"], ["GPU-b", 1], ["GPU-b", 2], ["GPU-b", 3])
    src = build_gpu_source(f"replay:{a},{b}", 0.5, 0.5)
    assert src is not None
    seen = []
    for _ in range(4):
        pts = src.sample().points
        seen.append(
            (value(pts, "llm_gpu_power_watts", gpu="0", uuid="GPU-a"), value(pts, "llm_gpu_power_watts", gpu="1", uuid="GPU-b"))
        )
    assert seen == [(100, 1), (200, 2), (100, 3), (200, 1)]
    assert src.name == "gpu" and src.interval == 0.5


def test_missing_column_means_absent_and_no_gpm_columns_mean_profiling_unavailable(tmp_path: Path) -> None:
    path = write(tmp_path / "a100.csv", ["gpu_name", "uuid", "nvml_gpu_util", "power_w"], ["NVIDIA A100", "GPU-x", 50, 300])
    pts = ReplaySource([path], 1.0, 1.0).sample().points
    assert value(pts, "llm_gpu_profiling_available", gpu="0") == 0
    assert not names(pts) & PROFILING_METRICS
    assert value(pts, "llm_gpu_memory_used_bytes") is None
    assert value(pts, "llm_gpu_utilization_ratio", gpu="0") == 0.5


def sample_error(src: Source) -> SourceError:
    with pytest.raises(SourceError) as info:
        src.sample()
    return info.value


def test_missing_file_fails_then_recovers_when_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "late.csv"
    src = build_gpu_source(f"replay:{path}", 1.0, 1.0)
    assert src is not None
    assert sample_error(src).reason == "file_missing"
    assert sample_error(src).reason == "file_missing"
    write(path, ["uuid", "power_w"], ["GPU-l", 42])
    assert value(src.sample().points, "llm_gpu_power_watts") == 42


def test_file_deleted_while_running_fails_and_recovers_without_skipping_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", ["power_w"], [1], [2], [3])
    src = ReplaySource([path], 1.0, 1.0)
    assert value(src.sample().points, "llm_gpu_power_watts") == 1
    saved = path.read_bytes()
    os.remove(path)
    assert sample_error(src).reason == "file_missing"
    path.write_bytes(saved)
    assert value(src.sample().points, "llm_gpu_power_watts") == 2


def test_any_missing_file_fails_the_source_and_nothing_advances(tmp_path: Path) -> None:
    a = write(tmp_path / "a.csv", ["power_w"], [1], [2])
    src = ReplaySource([a, tmp_path / "gone.csv"], 1.0, 1.0)
    assert sample_error(src).reason == "file_missing"
    write(tmp_path / "gone.csv", ["power_w"], [9])
    assert value(src.sample().points, "llm_gpu_power_watts", gpu="0") == 1


@pytest.mark.parametrize(
    "text, where",
    [
        ("", "empty file"),
        ("power_w,temp_c\n1,2\n3\n", ":3: expected 2 cells"),
        ("power_w,temp_c\n1,2\n3,4,5\n", ":3: expected 2 cells"),
        ("power_w\n1\nhot\n", ":3: power_w: expected a number"),
        ("throttle_reasons\n0xQ\n", ":2: throttle_reasons"),
        ("power_w\n", "no data rows"),
        ("power_w,power_w\n1,2\n", "header"),
    ],
)
def test_malformed_file_is_reported_with_its_line(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    err = sample_error(ReplaySource([path], 1.0, 1.0))
    assert err.reason == "malformed"
    assert where in err.message and str(path) in err.message


def test_malformed_file_recovers_once_fixed(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("power_w\nbroken\n")
    src = ReplaySource([path], 1.0, 1.0)
    assert sample_error(src).reason == "malformed"
    path.write_text("power_w\n77\n")
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse clocks
    assert value(src.sample().points, "llm_gpu_power_watts") == 77


def test_bare_bundled_name_selects_the_packaged_trace() -> None:
    src = build_gpu_source("replay:kernels", 1.0, 1.0)
    assert isinstance(src, ReplaySource)
    assert src.files[0].path == bundled_trace("kernels")
