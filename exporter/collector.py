"""Render the store as Prometheus text or OpenMetrics, driven by the schema.

Why cached: a scrape must cost next to nothing and never wait on a source. The
rendered bytes are kept per (store version, format) until the earliest moment
the store's view changes by itself (a source going stale, an attempt timing
out); concurrent scrapers and scrapes between two source updates reuse them.
"""

from __future__ import annotations

import logging
import platform
import threading
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.openmetrics.exposition import generate_latest as _generate_openmetrics
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _float_to_go_string

from exporter import __version__, schema
from exporter.samples import HistogramSample, Point, Sample
from exporter.schema import SPECS, MetricSpec
from exporter.store import SnapshotStore, SourceState

log = logging.getLogger(__name__)

# client_python leaves these two unannotated: their types, named once (no wrapper: no cost per call)
generate_latest_openmetrics: Callable[[Collector], bytes] = _generate_openmetrics
floatToGoString: Callable[[float], str] = _float_to_go_string

OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _family_name(spec: MetricSpec) -> str:
    return spec.name[: -len("_total")] if spec.type == "counter" and spec.name.endswith("_total") else spec.name


def _unit_for(spec: MetricSpec) -> str:
    """The OpenMetrics unit, only where the name carries it (client_python insists)."""
    return spec.unit if spec.unit and _family_name(spec).endswith("_" + spec.unit) else ""


def _new_family(spec: MetricSpec) -> Metric:
    name, unit, labels = _family_name(spec), _unit_for(spec), list(spec.labels)
    if spec.type == "counter":
        return CounterMetricFamily(name, spec.help, labels=labels, unit=unit)
    if spec.type == "histogram":
        return HistogramMetricFamily(name, spec.help, labels=labels, unit=unit)
    return GaugeMetricFamily(name, spec.help, labels=labels, unit=unit)


def _label_values(spec: MetricSpec, point: Point) -> list[str]:
    return [str(point.labels.get(label, "")) for label in spec.labels]


def families_from_points(points: Iterable[Point], unknown: Callable[[str], None] | None = None) -> list[Metric]:
    """Group points into schema families, in schema order; drop names not in the schema."""
    families: dict[str, Metric] = {}
    seen: dict[str, set[tuple[str, ...]]] = {}
    for point in points:
        spec = SPECS.get(point.name)
        if spec is None:
            if unknown:
                unknown(point.name)
            continue
        fam = families.get(spec.name)
        if fam is None:
            fam = families[spec.name] = _new_family(spec)
            seen[spec.name] = set()
        values = _label_values(spec, point)
        key = tuple(values)
        if key in seen[spec.name]:  # two sources claiming one series: keep the first
            continue
        seen[spec.name].add(key)
        if isinstance(point, HistogramSample):
            if not isinstance(fam, HistogramMetricFamily):  # a histogram point of a non-histogram spec
                continue
            buckets = [(floatToGoString(le), count) for le, count in point.buckets]
            fam.add_metric(values, buckets, point.sum)
        elif isinstance(point, Sample) and isinstance(fam, (CounterMetricFamily, GaugeMetricFamily)):
            fam.add_metric(values, point.value)
    order = {name: i for i, name in enumerate(SPECS)}
    return [families[n] for n in sorted(families, key=order.__getitem__)]


def meta_points(states: Iterable[SourceState]) -> list[Point]:
    """The exporter's own health series, one set per source."""
    points: list[Point] = [
        Sample("llm_exporter_build_info", {"version": __version__, "python_version": platform.python_version()}, 1.0)
    ]
    for st in states:
        src = {"source": st.name}
        points.append(Sample("llm_exporter_source_up", src, 1.0 if st.up else 0.0))
        points.append(Sample("llm_exporter_source_duration_seconds", src, st.last_duration))
        if st.last_success is not None:
            points.append(Sample("llm_exporter_source_last_success_timestamp_seconds", src, st.last_success))
            points.append(Sample("llm_exporter_source_series", src, float(len(st.points))))
        for reason, count in sorted(st.errors.items()):
            points.append(Sample("llm_exporter_source_errors_total", {"source": st.name, "reason": reason}, float(count)))
    return points


# --------------------------------------------------------------------------- direct text renderer
# The 0.0.4 text format written straight from the points. prometheus_client's
# generate_latest validates and escapes every label *name* of every sample
# (~70 % of a cold render); schema names and labels are valid by construction,
# so only label values need escaping. tests/core/test_collector.py checks the
# bytes equal generate_latest's on the same points; OpenMetrics still goes
# through prometheus_client.

_ORDER = {name: i for i, name in enumerate(SPECS)}


def _esc(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return v


def _header(spec: MetricSpec) -> str:
    if spec.type == "counter":
        mname = (spec.name[: -len("_total")] if spec.name.endswith("_total") else spec.name) + "_total"
    else:
        mname = spec.name
    mtype = spec.type if spec.type in ("counter", "histogram") else "gauge"
    help_text = spec.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {mname} {help_text}\n# TYPE {mname} {mtype}\n"


_HEADERS = {name: _header(spec) for name, spec in SPECS.items()}
#: per spec: label names sorted (as generate_latest sorts them), with their index in spec.labels
_SORTED = {name: sorted(range(len(s.labels)), key=s.labels.__getitem__) for name, s in SPECS.items()}
_SORTED_VERSION = schema.LABELS_VERSION


def _sorted_labels() -> dict[str, list[int]]:
    """``_SORTED``, rebuilt once after ``schema.extend_labels`` changed a spec (--kubernetes)."""
    global _SORTED, _SORTED_VERSION
    if _SORTED_VERSION != schema.LABELS_VERSION:
        _SORTED = {name: sorted(range(len(s.labels)), key=s.labels.__getitem__) for name, s in SPECS.items()}
        _SORTED_VERSION = schema.LABELS_VERSION
    return _SORTED


def render_text(points: Iterable[Point], unknown: Callable[[str], None] | None = None) -> bytes:
    sorted_labels = _sorted_labels()
    lines: dict[str, list[str]] = {}
    seen: dict[str, set[tuple[str, ...]]] = {}
    for point in points:
        spec = SPECS.get(point.name)
        if spec is None:
            if unknown:
                unknown(point.name)
            continue
        name = spec.name
        labels = point.labels
        values = tuple([_esc(str(labels.get(label, ""))) for label in spec.labels])
        fam_seen = seen.get(name)
        if fam_seen is None:
            fam_seen = seen[name] = set()
            lines[name] = []
        if values in fam_seen:
            continue
        fam_seen.add(values)
        out = lines[name]
        order = sorted_labels[name]
        if isinstance(point, HistogramSample):
            if spec.type != "histogram":
                continue
            pairs = [(spec.labels[i], values[i]) for i in order]
            base = ",".join(f'{k}="{v}"' for k, v in pairs)
            # le sorts among the label names
            before = ",".join(f'{k}="{v}"' for k, v in pairs if k < "le")
            after = ",".join(f'{k}="{v}"' for k, v in pairs if k > "le")
            pre = f"{name}_bucket{{" + (before + "," if before else "")
            post = ("," + after if after else "") + "}"
            for le, count in point.buckets:
                out.append(f'{pre}le="{floatToGoString(le)}"{post} {floatToGoString(count)}\n')
            lab = "{" + base + "}" if base else ""
            out.append(f"{name}_count{lab} {floatToGoString(point.buckets[-1][1])}\n")
            out.append(f"{name}_sum{lab} {floatToGoString(point.sum)}\n")
        elif isinstance(point, Sample) and spec.type != "histogram":
            lab = ",".join(f'{spec.labels[i]}="{values[i]}"' for i in order)
            out.append(f"{name}{{{lab}}} {floatToGoString(point.value)}\n" if lab else f"{name} {floatToGoString(point.value)}\n")
    parts: list[str] = []
    for name in sorted(lines, key=_ORDER.__getitem__):
        parts.append(_HEADERS[name])
        parts.extend(lines[name])
    return "".join(parts).encode()


class _FamiliesCollector:
    """A throw-away prometheus_client collector over prepared families."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class ExpositionCache:
    """Renders the store at most once per store version and format, and never past its expiry.

    A rendering is reused while the store has had no write *and* no source's
    values have gone stale nor any attempt timed out since (the snapshot's
    ``valid_until``): with no new writes a dead source's series still vanish
    from /metrics on time.
    """

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        #: openmetrics? -> (store version, monotonic expiry, body)
        self._cached: dict[bool, tuple[int, float, bytes]] = {}
        self._unknown_logged: set[str] = set()

    def _note_unknown(self, name: str) -> None:
        if name not in self._unknown_logged:
            self._unknown_logged.add(name)
            log.error("dropping metric %s: not declared in exporter.schema", name)

    def _reusable(self, openmetrics: bool) -> bytes | None:
        cached = self._cached.get(openmetrics)
        if cached and cached[0] == self.store.version and self.store.monotonic() < cached[1]:
            return cached[2]
        return None

    def render(self, openmetrics: bool = False) -> bytes:
        body = self._reusable(openmetrics)
        if body is not None:
            return body
        with self._lock:
            body = self._reusable(openmetrics)
            if body is not None:
                return body
            snapshot = self.store.snapshot()
            points = meta_points(snapshot.sources.values()) + snapshot.points
            if openmetrics:
                collector = _FamiliesCollector(families_from_points(points, self._note_unknown))
                body = generate_latest_openmetrics(collector)
            else:
                body = render_text(points, self._note_unknown)
            self._cached[openmetrics] = (snapshot.version, snapshot.valid_until, body)
            return body


def wants_openmetrics(accept: str | None) -> bool:
    """Content negotiation as client_python does it: OpenMetrics only when asked for."""
    if not accept:
        return False
    for part in accept.split(","):
        if part.split(";")[0].strip() == "application/openmetrics-text":
            return True
    return False
