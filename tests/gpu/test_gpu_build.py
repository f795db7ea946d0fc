"""build_gpu_source: spec parsing and the auto fallback dcgm -> nvml -> none."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exporter.gpu import build_gpu_source, parse_spec
from exporter.gpu.dcgm import DcgmSource
from exporter.gpu.nvml import NvmlSource
from exporter.gpu.replay import ReplaySource
from exporter.gpu.sim import SimSource
from exporter.sources import Source
from tests.fakes.pynvml_fake import FakeGpu, FakeNvml
from tests.gpu.gpu_helpers import copy_fake_dcgm, value


def test_none_means_no_source() -> None:
    assert build_gpu_source("none", 1.0, 1.0) is None


@pytest.mark.parametrize(
    "spec, cls",
    [
        ("replay:a.csv,b.csv", ReplaySource),
        ("sim:http://127.0.0.1:9/", SimSource),
        ("dcgm", DcgmSource),
        ("dcgm:gpu-node:5555", DcgmSource),
        ("nvml", NvmlSource),
    ],
)
def test_explicit_specs_build_their_source_without_touching_hardware(spec: str, cls: type[Source]) -> None:
    src = build_gpu_source(spec, 2.0, 1.5, nvml_module=FakeNvml([], library_missing=True))
    assert isinstance(src, cls)
    assert (src.name, src.interval, src.timeout) == ("gpu", 2.0, 1.5)
    src.close()


def test_dcgm_host_is_passed_through() -> None:
    src = build_gpu_source("dcgm:gpu-node:5555", 1.0, 1.0)
    assert isinstance(src, DcgmSource) and src.host == "gpu-node:5555"


@pytest.mark.parametrize("spec", ["", "gpu", "nvml:x", "replay:", "replay:,", "sim:localhost:8000", "auto:1", "none:x"])
def test_bad_specs_raise_value_error_listing_the_choices(spec: str) -> None:
    with pytest.raises(ValueError, match="replay:PATH"):
        parse_spec(spec)


def test_auto_falls_through_to_nvml_without_dcgm_bindings(no_dcgm: None, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([FakeGpu()])
    with caplog.at_level(logging.WARNING):
        src = build_gpu_source("auto", 1.0, 1.0, nvml_module=fake, dcgm_binding_paths=())
    assert isinstance(src, NvmlSource)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert value(src.sample().points, "llm_gpu_info", gpu="0", source="nvml") == 1
    src.close()


def test_auto_without_any_library_is_none_with_one_warning(no_dcgm: None, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([FakeGpu()], library_missing=True)
    with caplog.at_level(logging.DEBUG, logger="exporter"):
        assert build_gpu_source("auto", 1.0, 1.0, nvml_module=fake, dcgm_binding_paths=()) is None
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "GPU metrics disabled" in text and "dcgm" in text and "nvml" in text


def test_auto_treats_nvml_without_gpus_as_unavailable(no_dcgm: None) -> None:
    fake = FakeNvml([])
    assert build_gpu_source("auto", 1.0, 1.0, nvml_module=fake, dcgm_binding_paths=()) is None
    assert fake.initialised == 0  # the probe shut NVML down again


def test_auto_prefers_dcgm_when_it_sees_a_gpu(dcgm_dir: Path) -> None:
    copy_fake_dcgm(dcgm_dir)
    fake = FakeNvml([FakeGpu()])
    src = build_gpu_source("auto", 1.0, 1.0, nvml_module=fake, dcgm_binding_paths=(str(dcgm_dir),))
    assert isinstance(src, DcgmSource)
    assert fake.calls["nvmlInit"] == 0
    assert value(src.sample().points, "llm_gpu_info", gpu="0", source="dcgm") == 1
    src.close()
