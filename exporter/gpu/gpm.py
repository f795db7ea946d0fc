"""NVML GPU Performance Monitoring (GPM): SM, tensor and DRAM activity on Hopper and newer.

Why a pair of buffers: a GPM metric is a rate between two samples. Each read
takes one new sample and computes the metrics between it and the previous
one, so the window is exactly one ``--gpu-interval`` and no sample is taken
twice. The two buffers are allocated once and swapped, never reallocated.

Measured on an H200 (exporter/data/traces/README.md): nvmlGpmSampleGet 58 us,
nvmlGpmMetricsGet (6 ids) 15 us median, cheap enough for every sample.
"""

from __future__ import annotations

import math
from typing import Any

#: (pynvml constant name, reading key). Constants missing from an older
#: nvidia-ml-py are skipped, so the source still runs.
GPM_METRICS: tuple[tuple[str, str], ...] = (
    ("NVML_GPM_METRIC_SM_UTIL", "sm_util"),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", "sm_occupancy"),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor_util"),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", "dram_bw_util"),
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", "pcie_tx_mib_s"),
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", "pcie_rx_mib_s"),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "nvlink_tx_mib_s"),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", "nvlink_rx_mib_s"),
)


def gpm_supported(nvml: Any, handle: Any) -> bool:
    """True when the device answers nvmlGpmQueryDeviceSupport with isSupportedDevice."""
    query = getattr(nvml, "nvmlGpmQueryDeviceSupport", None)
    if query is None:
        return False
    try:
        return bool(query(handle).isSupportedDevice)
    except nvml.NVMLError_GpuIsLost:
        raise
    except nvml.NVMLError:
        return False


class GpmPair:
    """Two GPM sample buffers of one GPU; :meth:`read` yields metrics over the last interval.

    NVML errors propagate to the caller, which knows whether the GPU is lost
    or GPM just stopped working.
    """

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._ids = [(getattr(nvml, const), key) for const, key in GPM_METRICS if hasattr(nvml, const)]
        self._older = nvml.nvmlGpmSampleAlloc()
        try:
            self._newer = nvml.nvmlGpmSampleAlloc()
        except nvml.NVMLError:
            nvml.nvmlGpmSampleFree(self._older)
            raise
        self._have_older = False
        self._freed = False
        self._request = nvml.c_nvmlGpmMetricsGet_t()

    def read(self) -> dict[str, float]:
        """Take a sample; return reading keys (percent, MiB/s) over the previous one.

        The first read after creation or :meth:`reset` has no baseline and returns {}.
        """
        nvml = self._nvml
        nvml.nvmlGpmSampleGet(self._handle, self._newer)
        had_older = self._have_older
        # the sample just taken becomes the baseline of the next read
        self._older, self._newer = self._newer, self._older
        self._have_older = True
        if not had_older:
            return {}
        return self._metrics(earlier=self._newer, later=self._older)

    def _metrics(self, earlier: Any, later: Any) -> dict[str, float]:
        nvml = self._nvml
        req = self._request
        req.version = nvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(self._ids)
        req.sample1 = earlier
        req.sample2 = later
        for i, (metric_id, _) in enumerate(self._ids):
            req.metrics[i].metricId = metric_id
        nvml.nvmlGpmMetricsGet(req)
        out: dict[str, float] = {}
        for i, (_, key) in enumerate(self._ids):
            m = req.metrics[i]
            if m.nvmlReturn != nvml.NVML_SUCCESS or math.isnan(m.value):
                continue  # "If this is nonzero, then value is not valid" (nvml.h)
            out[key] = float(m.value)
        return out

    def reset(self) -> None:
        """Forget the baseline (after a fault the old sample is no longer comparable)."""
        self._have_older = False

    def free(self) -> None:
        """Release both NVML buffers once; errors are ignored because this runs on teardown."""
        if self._freed:
            return
        self._freed = True
        for sample in (self._older, self._newer):
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except self._nvml.NVMLError:
                pass
        self._have_older = False
