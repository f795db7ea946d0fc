"""Where the report's numbers come from: the exporter's verdict, and the key series over time.

Two sources for the charts:

* ``--prometheus URL``: ``/api/v1/query_range`` for each key series over the
  last ``--minutes`` (the history is already there).
* otherwise: the exporter itself, polled (``/metrics`` and
  ``/diagnosis?signals=1``) for ``--sample-seconds``; the same expressions are
  evaluated over those readings (:mod:`exporter.report.series`).

Every failure to reach a server is a ``RuntimeError`` with one readable line,
worded as ``diagnose``'s fetch() words it (exporter/diagnosis/client.py). The
"session" handed in is an exporter/httpget.py ``Client``: one deadline per
request, a byte cap, credentials in a header and never in a URL.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from exporter.exposition import read_metrics
from exporter.report.series import HEADROOM, SCORE, STATE, SYMPTOM, Chart, Curves, Reading

#: one chart's data: per panel, legend -> [(t, v)]; and per panel the query errors met
PanelData = list[Curves]


@dataclass
class Collected:
    verdict: dict[str, Any]
    #: "prometheus" or "exporter"
    source: str
    #: the URL the charts were read from
    source_url: str
    start: float
    end: float
    #: chart stem -> per panel curves
    data: dict[str, PanelData] = field(default_factory=dict)
    #: problems met while collecting the series (the report lists them)
    notes: list[str] = field(default_factory=list)
    #: how many polls (exporter source) or queries (prometheus) succeeded / were tried
    ok: int = 0
    tried: int = 0

    @property
    def span_s(self) -> float:
        return max(0.0, self.end - self.start)


def _get(session: Any, url: str, timeout: float, params: dict[str, str] | None = None) -> Any:
    """One bounded GET (RuntimeError, one line, on any failure: the Client names the server)."""
    return session.get(url, params=params, timeout=timeout)


def fetch_verdict(session: Any, base: str, timeout: float) -> dict[str, Any]:
    """GET BASE/diagnosis?signals=1; raises RuntimeError with one readable line on any failure."""
    from exporter.diagnosis.client import verdict_of

    url = base + "/diagnosis"
    return verdict_of(url, _get(session, url, timeout, {"signals": "1"}))


def fetch_metrics(session: Any, base: str, timeout: float) -> str:
    url = base + "/metrics"
    response = _get(session, url, timeout)
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered HTTP {response.status_code}")
    return str(response.text)


def verdict_samples(verdict: dict[str, Any]) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The diagnosis metrics as the exporter would publish them, from a /diagnosis body."""
    from exporter.diagnosis.symptoms import SYMPTOM_IDS
    from exporter.diagnosis.verdict import STATES

    def num(x: Any) -> float:
        return float(x) if isinstance(x, (int, float)) else math.nan

    layers = verdict.get("layers") or {}
    held = {str(s.get("id")) for s in verdict.get("symptoms") or []}
    state = verdict.get("state")
    return {
        SCORE: [({"layer": n}, num(info.get("score"))) for n, info in layers.items()],
        HEADROOM: [({"layer": n}, num(info.get("headroom"))) for n, info in layers.items()],
        STATE: [({"state": s}, 1.0 if s == state else 0.0) for s in STATES],
        SYMPTOM: [({"symptom": s}, 1.0 if s in held else 0.0) for s in sorted(set(SYMPTOM_IDS) | held)],
    }


def sample_exporter(
    base: str, timeout: float, seconds: float, interval: float, charts: list[Chart], first: dict[str, Any], session: Any
) -> Collected:
    """Poll /metrics and /diagnosis?signals=1 for ``seconds`` (bounded: at most seconds/interval + 2 polls).

    The verdict reported is the last one read. A poll that fails is counted and noted, not fatal:
    the exporter answered once already."""
    interval = max(0.05, interval)
    readings: list[Reading] = []
    verdict = first
    notes: list[str] = []
    start = time.time()
    deadline = time.monotonic() + max(0.0, seconds)
    polls = int(max(0.0, seconds) / interval) + 2
    tried = ok = 0
    for _ in range(polls):
        tried += 1
        at = time.time()
        try:
            values = read_metrics(fetch_metrics(session, base, timeout)).samples  # buckets kept: the charts' quantiles
            body = fetch_verdict(session, base, timeout)
        except (RuntimeError, ValueError) as err:
            if len(notes) < 5:
                notes.append(f"poll at {time.strftime('%H:%M:%S', time.gmtime(at))} UTC failed: {err}")
        else:
            ok += 1
            verdict = body
            for name, samples in verdict_samples(body).items():
                values.setdefault(name, samples)  # /metrics has them already when served by a real exporter
            readings.append((at, values))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(interval, remaining))
    end = readings[-1][0] if readings else time.time()
    if tried > ok:
        notes.append(f"{tried - ok} of {tried} polls of the exporter failed")
    collected = Collected(
        verdict, "exporter", base, start if not readings else readings[0][0], end, notes=notes, ok=ok, tried=tried
    )
    for chart in charts:
        collected.data[chart.stem] = [_merge(expr.local(readings) for expr in panel.series) for panel in chart.panels]
    return collected


def _merge(parts: Any) -> Curves:
    out: Curves = {}
    for part in parts:
        out.update(part)
    return out


def _range_result(body: Any) -> list[tuple[dict[str, Any], list[Any]]] | None:
    """(labels, values) per series of a successful range query; None when the body is not one."""
    if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(body.get("data"), dict):
        return None
    result = body["data"].get("result") or []
    if not isinstance(result, list):
        return None
    out = []
    for series in result:
        if not isinstance(series, dict):
            return None
        metric, values = series.get("metric") or {}, series.get("values") or []
        if not isinstance(metric, dict) or not isinstance(values, list):
            return None
        out.append((metric, values))
    return out


def _points(values: list[Any]) -> list[tuple[float, float]]:
    """[t, "v"] pairs as floats; a pair that is not one, or not finite, is skipped."""
    points = []
    for pair in values:
        try:
            t, v = float(pair[0]), float(pair[1])
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):
            continue
        if math.isfinite(t) and not math.isinf(v):
            points.append((t, v))
    return points


def check_prometheus(session: Any, base: str, timeout: float) -> None:
    """One instant query; raises RuntimeError (one line) unless Prometheus answers."""
    url = base + "/api/v1/query"
    response = _get(session, url, timeout, {"query": "vector(1)"})
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered HTTP {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        raise RuntimeError(f"{url} did not return JSON (is this Prometheus?)") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        raise RuntimeError(f"{url} did not answer a Prometheus query (is this Prometheus?)")


def query_prometheus(
    session: Any,
    base: str,
    timeout: float,
    minutes: float,
    charts: list[Chart],
    verdict: dict[str, Any],
    now: float | None = None,
) -> Collected:
    """Each key series over the last ``minutes``; a query Prometheus refuses is noted, not fatal."""
    check_prometheus(session, base, timeout)
    end = time.time() if now is None else now
    start = end - max(1.0, minutes * 60.0)
    step = max(1.0, round((end - start) / 240.0))  # ~240 points per curve
    collected = Collected(verdict, "prometheus", base, start, end)
    url = base + "/api/v1/query_range"
    for chart in charts:
        panels: PanelData = []
        for panel in chart.panels:
            curves: Curves = {}
            for expr in panel.series:
                collected.tried += 1
                query = expr.promql()
                response = _get(
                    session,
                    url,
                    timeout,
                    {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
                )
                try:
                    body = response.json()
                except ValueError:
                    body = None
                result = _range_result(body)
                if response.status_code != 200 or result is None:
                    reason = body.get("error") if isinstance(body, dict) else None
                    reason = str(reason)[:200] if reason and response.status_code != 200 else "not a range-query answer"
                    collected.notes.append(f"Prometheus refused {query!r}: HTTP {response.status_code} ({reason})")
                    continue
                collected.ok += 1
                for metric, values in result:
                    by = getattr(expr, "by", None)
                    legend = expr.label
                    if by:
                        key = str(metric.get(by, ""))[:100]
                        legend = f"{by}={key}" if expr.label == by else f"{expr.label} {by}={key}"
                    curves[legend] = _points(values)
            panels.append(curves)
        collected.data[chart.stem] = panels
    return collected
