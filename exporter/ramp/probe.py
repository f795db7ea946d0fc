"""Read the exporter while a step runs: /metrics and /diagnosis, on a thread of their own.

Why a thread with a synchronous client rather than a task on the load
generator's event loop: parsing an exposition takes milliseconds of CPU, and
every millisecond the loop is blocked would be added to the TTFT and
inter-token gaps the client measures. On its own thread the probe never sits
between a token's arrival and its timestamp.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from exporter.exposition import read_metrics
from exporter.httpget import base_url
from exporter.ramp.aggregate import Scrape
from exporter.ramp.model import RampError


class ExporterProbe:
    """Synchronous reader of one exporter's /metrics and /diagnosis."""

    def __init__(self, url: str, timeout: float = 3.0) -> None:
        self.url = base_url(url)
        self._client = httpx.Client(timeout=timeout)
        self.has_diagnosis = True
        #: False once /requests answered 404 (an exporter without request tracing)
        self.has_requests = True
        #: the engine configuration the exporter published at ``check()`` (exporter/capacity/fingerprint.py):
        #: what a capacity profile built from this run was measured on; None when it publishes none
        self.fingerprint: dict[str, Any] | None = None

    def close(self) -> None:
        self._client.close()

    def scrape(self) -> Scrape:
        resp = self._client.get(self.url + "/metrics")
        resp.raise_for_status()
        return read_metrics(resp.text).scalars()  # gauges and counters; histograms and NaNs skipped

    def requests(self) -> list[dict[str, Any]] | None:
        """The traced requests the exporter holds (``GET /requests``: the slowest of each minute and a
        uniform sample); None when it serves none (no receiver, an older exporter) or on any failure:
        traced figures are an extra, never a failed step."""
        if not self.has_requests:
            return None
        try:
            slowest = self._client.get(self.url + "/requests", params={"slowest": "1000"})
            if slowest.status_code == 404:
                self.has_requests = False
                return None
            sample = self._client.get(self.url + "/requests")
            found = [*slowest.json().get("requests", []), *sample.json().get("requests", [])]
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return [r for r in found if isinstance(r, dict)]

    def diagnosis(self) -> dict[str, Any] | None:
        """The /diagnosis document, or None when this exporter serves none."""
        if not self.has_diagnosis:
            return None
        resp = self._client.get(self.url + "/diagnosis")
        if resp.status_code == 404:
            self.has_diagnosis = False
            return None
        resp.raise_for_status()
        doc = resp.json()
        if not isinstance(doc, dict) or not isinstance(doc.get("layers"), dict):
            raise ValueError("/diagnosis did not return the expected JSON object with 'layers'")
        return doc

    def check(self) -> list[str]:
        """Fail with a clear RampError when the exporter cannot be read; return warnings."""
        try:
            first = self.scrape()
        except httpx.HTTPStatusError as err:
            raise RampError(f"exporter {self.url}/metrics answered HTTP {err.response.status_code}") from None
        except httpx.HTTPError as err:
            raise RampError(f"exporter {self.url} is unreachable: {err.__class__.__name__}: {err}") from None
        except ValueError as err:
            raise RampError(f"exporter {self.url}/metrics is not a Prometheus exposition: {err}") from None
        warnings: list[str] = []
        from exporter.capacity.fingerprint import from_series

        found = from_series(first)
        self.fingerprint = found.as_dict() if found is not None else None
        if not first.get("llm_engine_info"):
            warnings.append(f"exporter {self.url} publishes no engine metrics yet: is its --engine the target?")
        try:
            if self.diagnosis() is None:
                warnings.append(f"exporter {self.url} serves no /diagnosis: layer statuses will be unknown")
        except (httpx.HTTPError, ValueError) as err:
            warnings.append(f"exporter {self.url}/diagnosis unreadable ({err}); retrying during the steps")
        return warnings


@dataclass
class StepSamples:
    """What the probe collected during one step, split at the end of the warm-up."""

    scrapes: list[Scrape] = field(default_factory=list)
    settled_scrapes: list[Scrape] = field(default_factory=list)
    settled_diagnoses: list[dict[str, Any]] = field(default_factory=list)
    errors: int = 0
    last_error: str = ""


class StepSampler:
    """Samples the exporter every ``interval`` seconds on a thread until ``stop()``.

    Samples taken before ``settle_s`` after ``start()`` count only for counters
    (their first value); gauges and diagnosis use the settled ones. ``stop()``
    takes one last scrape so a step's counters end when its load ends.
    """

    def __init__(
        self,
        probe: ExporterProbe,
        interval: float,
        settle_s: float,
        on_sample: Callable[[Scrape, dict[str, Any] | None], None] | None = None,
    ) -> None:
        self.probe = probe
        self.on_sample = on_sample
        self.interval = interval
        self.settle_s = settle_s
        self.samples = StepSamples()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ramp-probe", daemon=True)
        self._t0 = 0.0

    def start(self) -> StepSampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> StepSamples:
        self._stop.set()
        self._thread.join(timeout=self.interval + 10)
        self._take(final=True)
        return self.samples

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._take(final=False)
            self._stop.wait(self.interval)

    def _take(self, final: bool) -> None:
        settled = time.monotonic() - self._t0 >= self.settle_s
        try:
            scrape = self.probe.scrape()
        except (httpx.HTTPError, ValueError) as err:
            self._fail(err)
            return
        self.samples.scrapes.append(scrape)
        if final and self.samples.settled_scrapes:
            return
        doc = None
        if settled or final:  # a step shorter than its warm-up still gets one settled sample
            self.samples.settled_scrapes.append(scrape)
            try:
                doc = self.probe.diagnosis()
            except (httpx.HTTPError, ValueError) as err:
                self._fail(err)
            if doc is not None:
                self.samples.settled_diagnoses.append(doc)
        if self.on_sample is not None and not final:
            self.on_sample(scrape, doc)

    def _fail(self, err: Exception) -> None:
        self.samples.errors += 1
        self.samples.last_error = f"{err.__class__.__name__}: {err}"
