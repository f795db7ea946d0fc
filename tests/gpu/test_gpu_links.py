"""What the GPU's links can carry: PCIe generation and width, active NVLinks and their generation,
and the per-direction capacities derived from them (exporter/gpu/fields.py), read through the fake
NVML (answers, NotSupported, past the last link, a lost GPU), DCGM's fields and dcgm-exporter's names."""

from __future__ import annotations

import pynvml
import pytest

from exporter.gpu.dcgm import reading_from_dcgm
from exporter.gpu.dcgm_exporter import gpus_from_exposition, reading_of
from exporter.gpu.fields import (
    NVLINK_LINK_BYTES_PER_SECOND,
    PCIE_LANE_BYTES_PER_SECOND,
    nvlink_capacity,
    pcie_capacity,
    reading_points,
)
from exporter.gpu.nvml import NvmlSource
from exporter.samples import Point, SourceError
from tests.fakes.pynvml_fake import FakeGpu, FakeNvml
from tests.gpu.gpu_helpers import names, value

LINK_METRICS = {
    "llm_gpu_pcie_link_generation",
    "llm_gpu_pcie_link_width",
    "llm_gpu_pcie_link_max_generation",
    "llm_gpu_pcie_link_max_width",
    "llm_gpu_pcie_link_bandwidth_bytes_per_second",
}
NVLINK_METRICS = {"llm_gpu_nvlink_links_active", "llm_gpu_nvlink_version", "llm_gpu_nvlink_bandwidth_bytes_per_second"}
GEN5_X16 = 32e9 * 128 / 130 / 8 * 16  # 63.0 GB/s per direction


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def h100_sxm(**kw: object) -> FakeGpu:
    """An H100 SXM: 18 NVLinks up; its driver answers NVLink version 5.0 (7) for them, as reported."""
    args: dict[str, object] = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-h100",
        "nvlinks": [True] * 18,
        "nvlink_version": pynvml.NVML_NVLINK_VERSION_5_0,
    }
    args.update(kw)
    return FakeGpu(**args)  # type: ignore[arg-type]


def sample(fake: FakeNvml, clock: Clock | None = None, **kw: float) -> tuple[NvmlSource, list[Point]]:
    src = NvmlSource(1.0, 1.0, nvml=fake, clock=clock or Clock(), **kw)
    return src, src.sample().points


# ------------------------------------------------------------------ the figures


def test_per_lane_and_per_link_figures() -> None:
    assert PCIE_LANE_BYTES_PER_SECOND[3] == pytest.approx(0.985e9, rel=1e-3)
    assert PCIE_LANE_BYTES_PER_SECOND[4] == pytest.approx(1.969e9, rel=1e-3)
    assert PCIE_LANE_BYTES_PER_SECOND[5] == pytest.approx(3.938e9, rel=1e-3)
    assert pcie_capacity(5, 16) == pytest.approx(63.0e9, rel=1e-3)
    assert pcie_capacity(4, 16) == pytest.approx(31.5e9, rel=1e-3)
    assert NVLINK_LINK_BYTES_PER_SECOND[3] == NVLINK_LINK_BYTES_PER_SECOND[4] == 25e9
    assert nvlink_capacity(12, 3) == 300e9  # A100: 12 links
    assert nvlink_capacity(18, 4) == 450e9  # H100 / H200 SXM: 18 links, "900 GB/s" both ways
    assert nvlink_capacity(18, 5) == 900e9  # B200
    # unknown is absent, never 0
    for pcie in ((None, 16), (5, None), (7, 16), (5, 0), (4.5, 16)):
        assert pcie_capacity(*pcie) is None, pcie
    for nvlink in ((0, 4), (None, 4), (18, None), (18, 6)):
        assert nvlink_capacity(*nvlink) is None, nvlink


def test_replay_columns_give_the_link_metrics() -> None:
    reading = {
        "uuid": "GPU-1",
        "pcie_link_gen": "4",
        "pcie_link_width": "8",
        "pcie_link_gen_max": "4",
        "pcie_link_width_max": "16",
    }
    pts = reading_points(0, reading, "replay")
    assert value(pts, "llm_gpu_pcie_link_width", gpu="0") == 8
    assert value(pts, "llm_gpu_pcie_link_max_width", gpu="0") == 16
    assert value(pts, "llm_gpu_pcie_link_bandwidth_bytes_per_second", gpu="0") == pytest.approx(15.75e9, rel=1e-3)
    assert not names(pts) & NVLINK_METRICS
    pts = reading_points(0, {"uuid": "GPU-1", "nvlink_links": 12, "nvlink_version": 3}, "replay")
    assert value(pts, "llm_gpu_nvlink_bandwidth_bytes_per_second", gpu="0") == 300e9
    assert value(pts, "llm_gpu_pcie_link_bandwidth_bytes_per_second", gpu="0") is None


# ------------------------------------------------------------------ NVML


def test_h100_reports_its_links_and_capacities() -> None:
    fake = FakeNvml([h100_sxm()])
    _, pts = sample(fake)
    g = {"gpu": "0", "uuid": "GPU-h100"}
    assert value(pts, "llm_gpu_pcie_link_generation", **g) == 5
    assert value(pts, "llm_gpu_pcie_link_width", **g) == 16
    assert value(pts, "llm_gpu_pcie_link_max_generation", **g) == 5
    assert value(pts, "llm_gpu_pcie_link_max_width", **g) == 16
    assert value(pts, "llm_gpu_pcie_link_bandwidth_bytes_per_second", **g) == pytest.approx(GEN5_X16)
    assert value(pts, "llm_gpu_nvlink_links_active", **g) == 18
    # the driver's "5.0" is not believed on a Hopper GPU: NVLink 4, 25 GB/s per link
    assert value(pts, "llm_gpu_nvlink_version", **g) == 4
    assert value(pts, "llm_gpu_nvlink_bandwidth_bytes_per_second", **g) == 450e9
    # 36 link indexes in nvidia-ml-py; the H100 has 18: index 18 answers InvalidArgument and ends the walk
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 19
    assert fake.calls["nvmlDeviceGetNvLinkVersion"] == 0  # the architecture decided


def test_without_a_known_architecture_the_nvml_version_decides() -> None:
    a100 = FakeGpu(
        name="NVIDIA A100-SXM4-80GB",
        nvlinks=[True] * 12,
        nvlink_version=pynvml.NVML_NVLINK_VERSION_3_1,  # what an A100 answers (hwloc issue 658)
        not_supported={"nvmlDeviceGetArchitecture"},
    )
    fake = FakeNvml([a100])
    _, pts = sample(fake)
    assert value(pts, "llm_gpu_nvlink_version", gpu="0") == 3
    assert value(pts, "llm_gpu_nvlink_bandwidth_bytes_per_second", gpu="0") == 300e9
    assert fake.calls["nvmlDeviceGetNvLinkVersion"] == 1


def test_links_down_are_not_counted_and_none_up_means_no_nvlink_capacity() -> None:
    _, pts = sample(FakeNvml([h100_sxm(nvlinks=[True] * 12 + [False] * 6)]))
    assert value(pts, "llm_gpu_nvlink_links_active", gpu="0") == 12
    assert value(pts, "llm_gpu_nvlink_bandwidth_bytes_per_second", gpu="0") == 300e9
    _, pts = sample(FakeNvml([h100_sxm(nvlinks=[False] * 18)]))  # a PCIe H100 without its bridges
    assert value(pts, "llm_gpu_nvlink_links_active", gpu="0") == 0
    assert value(pts, "llm_gpu_nvlink_version", gpu="0") is None
    assert value(pts, "llm_gpu_nvlink_bandwidth_bytes_per_second", gpu="0") is None


def test_a_board_without_nvlink_has_no_nvlink_metrics_and_is_asked_once() -> None:
    clock = Clock()
    fake = FakeNvml([FakeGpu()])  # the recorded H200: a PCIe card
    src = NvmlSource(1.0, 1.0, nvml=fake, clock=clock, link_interval=1.0)
    for _ in range(3):
        result = src.sample()
        clock.now += 2.0
    assert not names(result.points) & NVLINK_METRICS
    assert LINK_METRICS <= names(result.points)
    assert result.partial_errors == []
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 1  # NotSupported on link 0: not asked again


def test_pcie_link_not_supported_is_absent_and_not_repeated() -> None:
    gpu = FakeGpu(not_supported={"nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"})
    fake = FakeNvml([gpu])
    src = NvmlSource(1.0, 1.0, nvml=fake, clock=Clock())
    for _ in range(3):
        result = src.sample()
    pts = result.points
    assert value(pts, "llm_gpu_pcie_link_generation") is None
    assert value(pts, "llm_gpu_pcie_link_max_width") is None
    assert value(pts, "llm_gpu_pcie_link_width", gpu="0") == 16
    assert value(pts, "llm_gpu_pcie_link_bandwidth_bytes_per_second") is None  # the generation is unknown
    assert result.partial_errors == []
    assert fake.calls["nvmlDeviceGetCurrPcieLinkGeneration"] == 1
    assert fake.calls["nvmlDeviceGetCurrPcieLinkWidth"] == 3


def test_the_current_generation_is_read_every_sample_the_links_on_their_cadence() -> None:
    """An idle GPU trains its PCIe link down (Gen1) and back up under load: read every sample. Which
    NVLinks are up changes only on a fault: read every link_interval seconds."""
    clock = Clock()
    fake = FakeNvml([h100_sxm(pcie_gen=1)])
    src = NvmlSource(1.0, 1.0, nvml=fake, clock=clock, link_interval=30.0)
    pts = src.sample().points
    assert value(pts, "llm_gpu_pcie_link_bandwidth_bytes_per_second", gpu="0") == pytest.approx(16 * 0.25e9)
    fake.gpus[0].pcie_gen = 5
    fake.gpus[0].nvlinks = [True] * 17 + [False]
    clock.now += 1.0
    pts = src.sample().points
    assert value(pts, "llm_gpu_pcie_link_generation", gpu="0") == 5
    assert value(pts, "llm_gpu_nvlink_links_active", gpu="0") == 18  # not looked at again yet
    clock.now += 30.0
    pts = src.sample().points
    assert value(pts, "llm_gpu_nvlink_links_active", gpu="0") == 17
    assert fake.calls["nvmlDeviceGetCurrPcieLinkGeneration"] == 3
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 2 * 19


def test_an_unexpected_error_on_a_link_is_a_partial_error_and_the_rest_reports() -> None:
    class Flaky(FakeNvml):
        def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int:
            if link == 3:
                raise pynvml.NVMLError_Unknown()
            return super().nvmlDeviceGetNvLinkState(handle, link)

    src, pts = sample(Flaky([h100_sxm()]))
    assert value(pts, "llm_gpu_nvlink_links_active", gpu="0") is None
    assert value(pts, "llm_gpu_pcie_link_generation", gpu="0") == 5
    assert value(pts, "llm_gpu_up", gpu="0") == 1


def test_a_gpu_lost_while_its_links_are_read_goes_down_alone() -> None:
    # 7 device calls at open, 11 reads before the link walk of the first sample: lost at link 5
    fake = FakeNvml([h100_sxm(), h100_sxm(uuid="GPU-two", lose_after=7 + 11 + 5)])
    src, pts = sample(fake)
    assert value(pts, "llm_gpu_up", gpu="1") == 0
    assert names(pts, gpu="1") == {"llm_gpu_info", "llm_gpu_up"}
    assert value(pts, "llm_gpu_nvlink_links_active", gpu="0") == 18
    assert [e.reason for e in src.sample().partial_errors] == ["gpu_lost"]


def test_nvml_gone_while_the_links_are_read_faults_the_source() -> None:
    class Unloaded(FakeNvml):
        def nvmlDeviceGetNvLinkState(self, handle: object, link: int) -> int:
            raise pynvml.NVMLError_DriverNotLoaded()

    src = NvmlSource(1.0, 1.0, nvml=Unloaded([h100_sxm()]), clock=Clock())
    with pytest.raises(SourceError) as info:
        src.sample()
    assert info.value.reason == "library_not_found"


# ------------------------------------------------------------------ DCGM and dcgm-exporter


def test_dcgm_pcie_link_fields() -> None:
    reading = reading_from_dcgm({54: "GPU-d", 237: 4, 238: 16, 235: 5, 236: 16})
    assert reading == {
        "uuid": "GPU-d",
        "pcie_link_gen": 4.0,
        "pcie_link_width": 16.0,
        "pcie_link_gen_max": 5.0,
        "pcie_link_width_max": 16.0,
    }
    pts = reading_points(0, reading, "dcgm", profiling=True)
    assert value(pts, "llm_gpu_pcie_link_bandwidth_bytes_per_second", gpu="0") == pytest.approx(31.5e9, rel=1e-3)
    assert not names(pts) & NVLINK_METRICS  # DCGM has no NVLink state field


def test_dcgm_exporter_pcie_link_names() -> None:
    text = "\n".join(
        f'{name}{{gpu="0",UUID="GPU-x",modelName="NVIDIA L20"}} {v}'
        for name, v in (
            ("DCGM_FI_DEV_GPU_UTIL", 50),
            ("DCGM_FI_DEV_PCIE_LINK_GEN", 1),
            ("DCGM_FI_DEV_PCIE_LINK_WIDTH", 16),
            ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", 4),
            ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 16),
        )
    )
    gpus, errors = gpus_from_exposition(text + "\n", "test")
    assert errors == []
    reading = reading_of(gpus[0])
    assert (reading["pcie_link_gen"], reading["pcie_link_gen_max"], reading["pcie_link_width"]) == (1.0, 4.0, 16.0)
