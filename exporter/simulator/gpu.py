"""Simulated GPU telemetry: the ``/sim/gpu`` readings, averaged like NVML/GPM windows.

Why windows of model time: real GPM metrics are averages over a sampling
window (~200 ms in the traces), NVML utilisation over its own period. The
engine reports each step's modelled busy time and activity here when the step
starts, and when it starts to idle; a reading averages everything that
overlaps the last ``window`` wall seconds, weighted by the model time each
stretch stands for, so idle gaps, partly idle steps and stragglers show up as
they would on a real board. Keys and units are those of the replay CSV columns.

The peers' link (a modelled parallel layout, exporter/simulator/roofline.py): the bytes
each GPU sends and receives for all-reduces and pipeline sends read on the NVLink
counters, or on the PCIe counters (beside the host copies) with ``--interconnect
pcie``; and each reading names its links (``link_readings``: the PCIe generation and
width, the active NVLinks and their generation) so the exporter can publish their
capacity. The pre-layout server (one GPU, or the ``--gpus`` group) reads as before.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from exporter.simulator import calibration as cal
from exporter.simulator.roofline import MIB, PROFILE_KEYS, GpuStep
from exporter.simulator.settings import SimConfig

#: Share of the window the power cap must hold for the bitmask to read 0x4.
THROTTLE_SHARE = 0.5
_INTEGRALS = PROFILE_KEYS + (
    "power_ws",
    "clock_mhz_s",
    "capped_s",
    "busy_s",
    "kernel_s",
    "rx_bytes",
    "tx_bytes",
    "nvlink_rx_bytes",
    "nvlink_tx_bytes",
)
#: the simulated board's links (H200 SXM): PCIe Gen5 x16 to the host, 18 NVLink 4 links
PCIE_GENERATION = 5
PCIE_WIDTH = 16
NVLINK_LINKS = 18
NVLINK_GENERATION = 4
#: PCIe Gen5 bytes per lane and direction after 128b/130b encoding (32 GT/s)
PCIE_GEN5_LANE_BYTES_S = 32e9 * 128 / 130 / 8


def link_readings(config: SimConfig) -> dict[str, object]:
    """The links each GPU reports (reading keys of exporter/gpu/fields.py), for a modelled layout only:
    the pre-layout server's readings stay as they were. The PCIe link is Gen5, as wide as the narrowest
    standard width that carries ``pcie_mib_s`` (x16 for the recorded 55,981 MiB/s: a narrowed link reads
    as one trained down); NVLink: 18 links of NVLink 4, or none with ``--interconnect pcie``."""
    if not config.layout.modelled:
        return {}
    rate = config.pcie_mib_s * MIB
    width = next((w for w in (1, 2, 4, 8) if w * PCIE_GEN5_LANE_BYTES_S >= rate), PCIE_WIDTH)
    out: dict[str, object] = {
        "pcie_link_gen": PCIE_GENERATION,
        "pcie_link_width": width,
        "pcie_link_gen_max": PCIE_GENERATION,
        "pcie_link_width_max": PCIE_WIDTH,
    }
    if config.layout.interconnect == "nvlink":
        out.update({"nvlink_links": NVLINK_LINKS, "nvlink_version": NVLINK_GENERATION})
    else:
        out["nvlink_links"] = 0
    return out


@dataclass
class _Record:
    """A stretch of wall time [w0, w1) that stands for ``model_s`` model seconds (busy step or idle)."""

    w0: float
    w1: float
    model_s: float
    #: per-GPU integrals, or None for an idle stretch
    per_gpu: list[dict[str, float]] | None


def _integrals(step: GpuStep, duration: float) -> dict[str, float]:
    """Time integrals (value x seconds) of one GPU over one step of ``duration`` model seconds."""
    out = {k: step.kernel_profile[k] * step.kernel_s + getattr(cal.PCIE_COPY, k) * step.copy_s for k in PROFILE_KEYS}
    idle = max(0.0, duration - step.busy_s)
    out["power_ws"] = step.kernel_power_w * step.kernel_s + cal.PCIE_COPY.power_w * step.copy_s + cal.ACTIVE_IDLE_POWER_W * idle
    # the power cap holds the clock while the math draws past it; NCCL's transfers of a modelled layout (the copy
    # phase, SMs idle, ``GpuStep.comm_idle``) draw far less, so the clock is not held then
    math_s = step.kernel_s - step.comm_s if step.comm_idle else step.kernel_s
    out["clock_mhz_s"] = cal.SM_CLOCK_MAX_MHZ * (step.clock_scale * math_s + (duration - math_s))
    out["capped_s"] = math_s if step.clock_scale < 0.999 else 0.0
    out["busy_s"] = step.busy_s
    out["kernel_s"] = step.kernel_s
    h2d, d2h = step.h2d_bytes, step.d2h_bytes
    out["rx_bytes"] = h2d + d2h * cal.PCIE_TX_PER_RX
    out["tx_bytes"] = d2h + h2d * cal.PCIE_TX_PER_RX
    if step.over_pcie:  # the peers' traffic shares the PCIe link with the host copies
        out["rx_bytes"] += step.link_rx_bytes
        out["tx_bytes"] += step.link_tx_bytes
        out["nvlink_rx_bytes"] = out["nvlink_tx_bytes"] = 0.0
    else:
        out["nvlink_rx_bytes"] = step.link_rx_bytes
        out["nvlink_tx_bytes"] = step.link_tx_bytes
    return out


class GpuTelemetry:
    """Per-GPU activity records and the window averages built from them.

    The window is in wall seconds (what a poller sees) but every average is a
    ratio of *model* seconds: a step that stands for 4 ms of GPU time counts 4
    ms even if the simulator needed longer to compute it, and the simulator's
    own bookkeeping between back-to-back steps counts as nothing.
    """

    def __init__(
        self,
        gpus: int,
        window_s: float,
        fb_used_mib: float,
        power_limit_w: float,
        seed: int = 0,
        wall: Callable[[], float] = time.monotonic,
        first_index: int = 0,
    ) -> None:
        self.gpus = gpus
        #: reading keys every reading carries as they are (the links: ``link_readings``)
        self.static: dict[str, object] = {}
        self.window = window_s
        self.fb_used_mib = fb_used_mib
        self.power_limit_w = power_limit_w
        self._wall = wall
        self._lock = threading.Lock()
        self._records: deque[_Record] = deque()
        self._energy_j = [0.0] * gpus
        self._idle_since: float | None = wall()
        self._idle_scale = 1.0
        #: GPU ``first_index + i`` of the server (a data-parallel replica's GPUs follow the replicas before it)
        self.uuids = [
            str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"llm-layer-exporter-sim/{seed}/{first_index + i}")) for i in range(gpus)
        ]

    def configure(self, window_s: float, power_limit_w: float, fb_used_mib: float) -> None:
        with self._lock:
            self.window = window_s
            self.power_limit_w = power_limit_w
            self.fb_used_mib = fb_used_mib

    def idle(self, scale: float) -> None:
        """The engine waits for work from now on (idempotent while idle)."""
        with self._lock:
            if self._idle_since is None:
                self._idle_since = self._wall()
                self._idle_scale = scale

    def _close_idle(self, now: float) -> None:
        if self._idle_since is not None:
            model = (now - self._idle_since) * self._idle_scale
            if now > self._idle_since:
                self._records.append(_Record(self._idle_since, now, model, None))
                for i in range(self.gpus):
                    self._energy_j[i] += model * cal.ACTIVE_IDLE_POWER_W
            self._idle_since = None

    def record(self, duration: float, scale: float, steps: list[GpuStep]) -> None:
        """A step of ``duration`` model seconds starts now and keeps each GPU busy as ``steps`` say."""
        if duration <= 0:
            return
        per_gpu = [_integrals(s, duration) for s in steps]
        with self._lock:
            now = self._wall()
            self._close_idle(now)
            for i, integ in enumerate(per_gpu[: self.gpus]):
                self._energy_j[i] += integ["power_ws"]
            self._records.append(_Record(now, now + duration / scale, duration, per_gpu))
            horizon = now - 4 * self.window
            while self._records and self._records[0].w1 < horizon:
                self._records.popleft()

    def readings(self) -> list[dict[str, object]]:
        """One reading per GPU (replay CSV column -> value) averaged over the last window."""
        with self._lock:
            now = self._wall()
            start = now - self.window
            sums = [dict.fromkeys(_INTEGRALS, 0.0) for _ in range(self.gpus)]
            span = 0.0
            idle = 0.0
            for rec in self._records:
                lo, hi = max(rec.w0, start), min(rec.w1, now)
                if hi <= lo:
                    continue
                frac = (hi - lo) / (rec.w1 - rec.w0)
                span += rec.model_s * frac
                if rec.per_gpu is None:
                    idle += rec.model_s * frac
                    continue
                for i, integ in enumerate(rec.per_gpu[: self.gpus]):
                    acc = sums[i]
                    for k, v in integ.items():
                        acc[k] += v * frac
            if self._idle_since is not None:
                open_idle = (now - max(self._idle_since, start)) * self._idle_scale
                span += open_idle
                idle += open_idle
            energy = list(self._energy_j)
            if self._idle_since is not None:
                energy = [e + (now - self._idle_since) * self._idle_scale * cal.ACTIVE_IDLE_POWER_W for e in energy]
        span = max(span, 1e-9)
        out = []
        for i, acc in enumerate(sums):
            active = acc["busy_s"] > 0
            idle_power = cal.ACTIVE_IDLE_POWER_W if active else cal.IDLE_POWER_W
            power = (acc["power_ws"] + idle * idle_power) / span if active else idle_power
            reading: dict[str, object] = {k: round(acc[k] / span, 3) for k in PROFILE_KEYS}
            if active:
                clock = (acc["clock_mhz_s"] + idle * cal.SM_CLOCK_MAX_MHZ) / span
                # a sampled bitmask reads 0x4 while the cap holds: report it when it held most of the window
                throttle = 0x4 if acc["capped_s"] / span >= THROTTLE_SHARE else 0x0
            else:
                clock, throttle = cal.IDLE_SM_CLOCK_MHZ, 0x1
            reading.update(
                {
                    "pcie_rx_mib_s": round(acc["rx_bytes"] / span / MIB, 3),
                    "pcie_tx_mib_s": round(acc["tx_bytes"] / span / MIB, 3),
                    "nvlink_rx_mib_s": round(acc["nvlink_rx_bytes"] / span / MIB, 3),
                    "nvlink_tx_mib_s": round(acc["nvlink_tx_bytes"] / span / MIB, 3),
                    "fb_used_mib": round(self.fb_used_mib),
                    "fb_total_mib": cal.FB_TOTAL_MIB,
                    "power_w": round(power, 3),
                    "power_limit_w": self.power_limit_w,
                    "sm_clock_mhz": round(clock),
                    "sm_clock_max_mhz": cal.SM_CLOCK_MAX_MHZ,
                    "mem_clock_mhz": cal.MEM_CLOCK_MHZ,
                    "throttle_reasons": hex(throttle),
                    "temp_c": round(cal.TEMP_BASE_C + cal.TEMP_C_PER_W * power, 1),
                    "energy_mj": round(energy[i] * 1000.0),
                    "gpu_name": cal.GPU_NAME,
                    "uuid": "GPU-" + self.uuids[i],
                }
            )
            reading.update(self.static)
            out.append(reading)
        return out
