"""``replay:PATH[,PATH...]``: play recorded GPU telemetry back as if it were live.

Why: CI and laptops have no GPU, and a demo should show real hardware
signatures (the recorded H200 traces ship as package data). One CSV file per
GPU (first file = gpu 0, ...). Each ``sample()`` call (one per
``--gpu-interval``) advances every file by one row and wraps to the first row
after the last; the ``t`` column is informational and not used for pacing.

CSV format (the format of the recorded traces, header row required, any column
order, unknown columns such as ``t``, ``phase``, ``tokens_done`` ignored):

==================  =======================================================
column              meaning (unit)
==================  =======================================================
nvml_gpu_util       NVML "GPU util" (percent)
nvml_mem_util       NVML "memory util" (percent)
sm_util             GPM SM util / DCGM 1002 (percent)
sm_occupancy        GPM SM occupancy / DCGM 1003 (percent)
tensor_util         GPM any-tensor util / DCGM 1004 (percent)
dram_bw_util        GPM DRAM bandwidth util / DCGM 1005 (percent)
fb_used_mib         framebuffer used (MiB)
fb_total_mib        framebuffer total (MiB, constant)
power_w             board power (W)
power_limit_w       enforced power limit (W, constant)
sm_clock_mhz        SM clock (MHz)
sm_clock_max_mhz    maximum SM clock (MHz, constant)
mem_clock_mhz       memory clock (MHz)
throttle_reasons    clocks-event reasons bitmask, hex ("0x4") or decimal
temp_c              GPU temperature (Celsius)
pcie_tx_mib_s       PCIe transmit, device to host (MiB/s)
pcie_rx_mib_s       PCIe receive, host to device (MiB/s)
nvlink_tx_mib_s     NVLink transmit, all links (MiB/s)
nvlink_rx_mib_s     NVLink receive, all links (MiB/s)
energy_mj           energy since driver load (mJ, cumulative)
gpu_name, uuid      text, constant per file
==================  =======================================================

A missing column or an empty cell means the metric is absent (never 0); a
file without any of sm_util/sm_occupancy/tensor_util/dram_bw_util reports
``llm_gpu_profiling_available 0``.

Faults: a missing or deleted file raises ``SourceError("file_missing")``, a
malformed file ``SourceError("malformed")`` naming the line. Files are
re-read when they change on disk, so a fault clears once the file is back.

Why files are parsed when the source is built: a 30 MB file takes seconds to
parse (2.9 s measured here), and ``serve`` builds its sources before it
serves, so the first sample is a cheap row lookup and the GPU never reads up
before its data is there. A file that changes later is re-parsed inside a
sample; if that outlives the GPU timeout the runner reports ``gpu`` down with
reason ``timeout`` while it parses, and up again once it is done.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from exporter.gpu.fields import ReadingError, normalise, reading_points
from exporter.samples import Point, SampleResult, SourceError

BUNDLED_TRACES: tuple[str, ...] = ("kernels", "serving")


def bundled_trace(name: str) -> Path:
    """Path of a recorded H200 trace shipped with the package (``kernels`` or ``serving``)."""
    stem = name[:-4] if name.endswith(".csv") else name
    if stem not in BUNDLED_TRACES:
        raise ValueError(f"unknown bundled trace {name!r}; expected one of {', '.join(BUNDLED_TRACES)}")
    ref = resources.files("exporter") / "data" / "traces" / f"{stem}.csv"
    return Path(str(ref))


@dataclass(frozen=True)
class _Signature:
    """What identifies one version of a file on disk."""

    inode: int
    size: int
    mtime_ns: int


class TraceFile:
    """One replayed CSV: parsed once, re-parsed when it changes, stat'ed every sample."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._signature: _Signature | None = None
        self._rows: list[dict[str, float | int | str]] = []
        self.cursor = 0

    def current(self) -> dict[str, float | int | str]:
        """The row under the cursor; raises SourceError if the file is gone or bad."""
        rows = self._load()
        return rows[self.cursor % len(rows)]

    def preload(self) -> None:
        """Parse now if the file is readable; a fault is left for ``current()`` to report."""
        try:
            self._load()
        except SourceError:
            pass

    def advance(self) -> None:
        self.cursor = (self.cursor + 1) % max(1, len(self._rows))

    def _load(self) -> list[dict[str, float | int | str]]:
        try:
            st = os.stat(self.path)
        except OSError as err:
            raise SourceError("file_missing", f"{self.path}: {err.strerror or err}") from None
        sig = _Signature(st.st_ino, st.st_size, st.st_mtime_ns)
        if sig == self._signature:
            return self._rows
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SourceError("file_missing", f"{self.path}: no such file") from None
        except (OSError, UnicodeDecodeError) as err:
            raise SourceError("malformed", f"{self.path}: cannot read: {err}") from None
        rows = parse_trace(text, str(self.path))
        self._rows = rows
        self._signature = sig
        self.cursor %= len(rows)
        return rows


def parse_trace(text: str, where: str) -> list[dict[str, float | int | str]]:
    """Validated readings of every data row; SourceError("malformed") names the line."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise SourceError("malformed", f"{where}: empty file, expected a header row") from None
    except csv.Error as err:
        raise SourceError("malformed", f"{where}:1: {err}") from None
    header = [h.strip() for h in header]
    if not any(header) or len(set(header)) != len(header):
        raise SourceError("malformed", f"{where}:1: header must name each column once")
    rows: list[dict[str, float | int | str]] = []
    try:
        for cells in reader:
            line = reader.line_num
            if not cells:
                continue
            if len(cells) != len(header):
                raise SourceError("malformed", f"{where}:{line}: expected {len(header)} cells, got {len(cells)}")
            try:
                rows.append(normalise(dict(zip(header, cells))))
            except ReadingError as err:
                raise SourceError("malformed", f"{where}:{line}: {err}") from None
    except csv.Error as err:
        raise SourceError("malformed", f"{where}:{reader.line_num}: {err}") from None
    if not rows:
        raise SourceError("malformed", f"{where}: no data rows")
    return rows


class ReplaySource:
    """GPU source that replays one CSV per GPU, one row per sample, looping."""

    name = "gpu"

    def __init__(self, paths: list[Path], interval: float, timeout: float) -> None:
        if not paths:
            raise ValueError("replay: needs at least one CSV path")
        self.interval = interval
        self.timeout = timeout
        self.files = [TraceFile(Path(p)) for p in paths]
        for f in self.files:
            f.preload()

    def sample(self) -> SampleResult:
        readings = [f.current() for f in self.files]  # raises before anything advances
        points: list[Point] = []
        for index, reading in enumerate(readings):
            points.extend(reading_points(index, reading, "replay"))
        for f in self.files:
            f.advance()
        return SampleResult(points)

    def close(self) -> None:
        """Nothing is held open between samples."""
