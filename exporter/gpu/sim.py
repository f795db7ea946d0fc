"""``sim:BASE_URL``: read simulated GPU telemetry from the simulator over HTTP.

Why: the simulator (``exporter/simulator``) models a whole inference server,
GPU included; the exporter reads its GPU the same way it would read a real one,
so the demo and the simulator tests exercise the real pipeline.

Contract with the simulator: ``GET BASE_URL/sim/gpu`` returns JSON

    {"gpus": [ {<replay CSV column>: value, ...}, ... ]}

where the list index is the GPU index and the keys and units are exactly the
replay CSV columns (``exporter/gpu/replay.py``, docs/gpu-sources.md), e.g.
``{"gpu_name": "NVIDIA H200", "uuid": "GPU-...", "nvml_gpu_util": 95,
"sm_util": 92.1, "fb_used_mib": 81234, "fb_total_mib": 143771, "power_w": 651.2,
"throttle_reasons": "0x4", ...}``. A missing key or ``null`` means the metric
is absent. An optional ``"up": false`` marks that GPU as lost
(``llm_gpu_up 0``). Unknown keys are ignored.

Faults: connection refused/reset -> ``connection``; no answer within the source
timeout -> ``timeout``; non-200 -> ``http_status``; body not of that shape ->
``malformed``; body over 1 MiB -> ``too_large``.
"""

from __future__ import annotations

import json

import requests

from exporter.gpu.fields import ReadingError, reading_points
from exporter.samples import Point, SampleResult, SourceError

MAX_BODY_BYTES = 1024 * 1024


class SimSource:
    """GPU source polling a simulator's ``/sim/gpu`` endpoint."""

    name = "gpu"

    def __init__(self, base_url: str, interval: float, timeout: float) -> None:
        self.url = base_url.rstrip("/") + "/sim/gpu"
        self.interval = interval
        self.timeout = timeout
        self._session = requests.Session()

    def sample(self) -> SampleResult:
        return decode_sim_gpus(self._fetch(), self.url)

    def _fetch(self) -> object:
        try:
            resp = self._session.get(self.url, timeout=self.timeout, stream=True)
        except requests.Timeout as err:
            raise SourceError("timeout", f"{self.url}: {err}") from None
        except requests.RequestException as err:
            raise SourceError("connection", f"{self.url}: {type(err).__name__}") from None
        with resp:
            if resp.status_code != 200:
                raise SourceError("http_status", f"{self.url}: HTTP {resp.status_code}")
            try:
                raw = resp.raw.read(MAX_BODY_BYTES + 1, decode_content=True)
            except requests.RequestException as err:
                raise SourceError("connection", f"{self.url}: {type(err).__name__}") from None
            except Exception as err:  # urllib3 read errors (timeout, reset) during the body
                raise SourceError("connection", f"{self.url}: {type(err).__name__}: {err}") from None
        if len(raw) > MAX_BODY_BYTES:
            raise SourceError("too_large", f"{self.url}: body over {MAX_BODY_BYTES} bytes")
        try:
            return json.loads(raw)
        except ValueError as err:
            raise SourceError("malformed", f"{self.url}: not JSON: {err}") from None

    def close(self) -> None:
        self._session.close()


def decode_sim_gpus(body: object, where: str) -> SampleResult:
    """Points of every GPU in a ``{"gpus": [...]}`` body; SourceError("malformed") otherwise.

    A GPU marked ``"up": false`` adds a ``gpu_lost`` partial error, as a lost
    GPU does on the NVML source.
    """
    gpus = body.get("gpus") if isinstance(body, dict) else None
    if not isinstance(gpus, list):
        raise SourceError("malformed", f'{where}: expected {{"gpus": [...]}}')
    points: list[Point] = []
    lost: list[SourceError] = []
    for index, gpu in enumerate(gpus):
        if not isinstance(gpu, dict):
            raise SourceError("malformed", f"{where}: gpus[{index}]: expected an object")
        up = gpu.get("up", True)
        if not isinstance(up, bool):
            raise SourceError("malformed", f"{where}: gpus[{index}].up: expected true or false")
        try:
            points.extend(reading_points(index, gpu, "sim", up=up))
        except ReadingError as err:
            raise SourceError("malformed", f"{where}: gpus[{index}]: {err}") from None
        if not up:
            lost.append(SourceError("gpu_lost", f"{where}: gpu {index} reported lost"))
    return SampleResult(points, lost)
