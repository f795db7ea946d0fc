"""The range queries of ``plan``: one bounded GET of /api/v1/query_range per expression.

Why exporter/httpget.py and not a bare ``requests.get``: one deadline bounds the
whole answer (``requests``' timeout bounds each read, so a trickling server never
ends), the body is capped (``max_bytes``), redirects are not followed (the
credentials stay with the host they were given for), and the URL printed in an
error has no user info. Every failure is a PlanError of one line that says which
Prometheus and why; nothing here prints a header or a secret.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter import httpget
from exporter.jsonsafe import loads_bounded

#: Prometheus refuses a range query of more points per series than this (its own limit)
MAX_POINTS = 11_000
#: 16 MiB: a week at 5 min is ~2000 points a series, ~60 KiB; a fleet of hundreds of replicas fits
MAX_BYTES = 16 * 1024 * 1024


class PlanError(RuntimeError):
    """Prometheus is down, refuses the query, or answers something that is not a range result: one line."""


@dataclass(frozen=True)
class Series:
    """One series of a matrix result: its labels and its finite (timestamp, value) points."""

    labels: Mapping[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class Window:
    """The range every query of one plan shares: same start, end and step, so the series line up."""

    start: float
    end: float
    step: float

    @property
    def points(self) -> int:
        return int((self.end - self.start) // self.step) + 1


class Prometheus:
    """A Prometheus server's HTTP API at ``target.url`` (credentials in ``target.headers``)."""

    def __init__(self, target: httpget.Target, timeout: float = 30.0, max_bytes: int = MAX_BYTES) -> None:
        self.target, self.timeout, self.max_bytes = target, timeout, max_bytes

    def range_query(self, expr: str, window: Window) -> list[Series]:
        if window.points > MAX_POINTS:
            raise PlanError(
                f"{window.points} points per series over that range: Prometheus allows {MAX_POINTS}; use a larger --step"
            )
        params = {"query": expr, "start": f"{window.start:.3f}", "end": f"{window.end:.3f}", "step": f"{window.step:g}"}
        try:
            answer = httpget.get(
                self.target.url + "/api/v1/query_range",
                self.timeout,
                headers=self.target.headers,
                params=params,
                what="Prometheus",
                max_bytes=self.max_bytes,
            )
        except RuntimeError as err:
            raise PlanError(str(err)) from None
        return parse_matrix(answer.status_code, answer.content, self.max_bytes, self.target.url)


def _error_text(doc: Any) -> str:
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return " ".join(doc["error"].split())[:200]
    return ""


def parse_matrix(status: int, body: bytes, max_bytes: int, url: str) -> list[Series]:
    """A query_range answer -> its series; PlanError naming what is wrong with it."""
    try:
        doc = loads_bounded(body, max_bytes=max_bytes)
    except ValueError:
        doc = None
    if status == 401 or status == 403:
        raise PlanError(f"Prometheus at {url} refused the credentials (HTTP {status})")
    if status != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
        why = _error_text(doc)
        if doc is None:
            raise PlanError(f"Prometheus at {url} answered HTTP {status} with something that is not JSON")
        raise PlanError(f"Prometheus at {url} refused the query (HTTP {status})" + (f": {why}" if why else ""))
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise PlanError(f"Prometheus at {url} answered a query_range without a matrix result")
    return [_series(item, url) for item in data["result"]]


def _series(item: Any, url: str) -> Series:
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict) or not isinstance(item.get("values"), list):
        raise PlanError(f"Prometheus at {url} answered a matrix whose series have no metric or values")
    labels = {str(k): str(v) for k, v in item["metric"].items()}
    points: list[tuple[float, float]] = []
    for pair in item["values"]:
        try:
            t, v = float(pair[0]), float(pair[1])
        except (TypeError, ValueError, IndexError, KeyError):
            raise PlanError(f'Prometheus at {url} answered a sample that is not [timestamp, "value"]') from None
        if math.isfinite(t) and math.isfinite(v):
            points.append((t, v))
    return Series(labels, points)


__all__ = ["MAX_BYTES", "MAX_POINTS", "PlanError", "Prometheus", "Series", "Window", "parse_matrix"]
