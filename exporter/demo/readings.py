"""The exporter as the demo reads it each refresh: its ``/metrics`` parsed, its ``/diagnosis`` with signals.

Why its own room: the rows, the plain lines and the live view all take one :class:`Reading`
of one moment, parsed once by exporter/exposition.py (the reader every consumer shares).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from exporter.exposition import read_metrics
from exporter.schema import reduce_series


@dataclass
class Reading:
    """One parse of the exporter's /metrics: name -> [(labels, value)], histograms as (sum, count)."""

    at: float
    values: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    hists: dict[str, tuple[float, float]] = field(default_factory=dict)

    def total(self, name: str) -> float | None:
        """A counter's value over all its series."""
        series = self.values.get(name)
        return None if not series else sum(v for _, v in series)

    def figure(self, name: str) -> float | None:
        """A gauge's series reduced the way its schema spec says (the diagnosis' reduction)."""
        return reduce_series(name, (v for _, v in self.values.get(name) or ()))


def reading_of(text: str) -> Reading:
    """The exporter's /metrics as the view reads it (parsed by exporter/exposition.py)."""
    own = read_metrics(text)
    return Reading(at=time.monotonic(), values=own.scalars(keep_nan=True), hists=own.histogram_totals())


async def read_exporter(client: httpx.AsyncClient, exporter_url: str) -> tuple[Reading, dict[str, Any] | None, str]:
    """The exporter's metrics and verdict (with the signals it judged), and a note when it did not answer."""
    try:
        resp = await client.get(exporter_url + "/metrics")
        reading = reading_of(resp.text)
    except (httpx.HTTPError, ValueError) as err:
        return Reading(at=time.monotonic()), None, f"exporter unreachable: {type(err).__name__}"
    diagnosis = None
    try:
        d = await client.get(exporter_url + "/diagnosis", params={"signals": "1"})
        if d.status_code == 200:
            diagnosis = d.json()
    except (httpx.HTTPError, ValueError):
        pass
    return reading, diagnosis, ""
