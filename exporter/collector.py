"""Render the store as Prometheus text or OpenMetrics, driven by the schema.

Why cached: a scrape must cost next to nothing and never wait on a source. The
rendered bytes are kept per (store version, format) until the earliest moment
the store's view changes by itself (a source going stale, an attempt timing
out); concurrent scrapers and scrapes between two source updates reuse them,
and a gzip'ed copy of them (Prometheus asks for gzip: 2.5 MB become ~150 kB).

Why rendered per source: the store's version moves on every write of any
source (the GPU every second, the diagnosis, the process sampler), while an
engine at its 20,000-series budget changes every engine interval. The text
format keeps each source's rendering until that source's points change, and a
new version only re-renders the source that wrote (issue 25).

Why families are left out here, while grouping: ``--metrics.exclude`` and
``--metrics.include`` (exporter/familyfilter.py) say what is published; the store
keeps every family for the diagnosis, and a family left out is skipped before its
lines are built, never rendered and then dropped. ``llm_exporter_metric_family_excluded``
names each one.
"""

from __future__ import annotations

import functools
import gzip as _gzip
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
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString as _float_to_go_string

from exporter import __version__, schema
from exporter.familyfilter import FamilyFilter
from exporter.samples import HistogramSample, Point, Sample
from exporter.schema import SPECS, MetricSpec
from exporter.store import SnapshotStore, SourceState, View

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


def families_from_points(
    points: Iterable[Point], unknown: Callable[[str], None] | None = None, left_out: frozenset[str] = frozenset()
) -> list[Metric]:
    """Group points into schema families, in schema order; drop names not in the schema and never build ``left_out``."""
    families: dict[str, Metric] = {}
    seen: dict[str, set[tuple[str, ...]]] = {}
    for point in points:
        spec = SPECS.get(point.name)
        if spec is None:
            if unknown:
                unknown(point.name)
            continue
        if left_out and spec.name in left_out:
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
            fam.add_metric(values, _openmetrics_buckets(point), point.sum)
        elif isinstance(point, Sample) and isinstance(fam, (CounterMetricFamily, GaugeMetricFamily)):
            fam.add_metric(values, point.value)
    order = {name: i for i, name in enumerate(SPECS)}
    return [families[n] for n in sorted(families, key=order.__getitem__)]


def _openmetrics_buckets(point: HistogramSample) -> list[tuple[str, float] | tuple[str, float, Exemplar]]:
    """The buckets of one histogram series, each with its exemplar when the point carries one."""
    by_le = {e.le: e for e in point.exemplars}
    out: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
    for le, count in point.buckets:
        e = by_le.get(le)
        if e is None:
            out.append((floatToGoString(le), count))
        else:
            out.append((floatToGoString(le), count, Exemplar({"trace_id": e.trace_id}, e.value, e.timestamp)))
    return out


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


def _render_family(name: str, points: Iterable[Point], sorted_labels: dict[str, list[int]], seen: set[tuple[str, ...]]) -> str:
    """The sample lines of one family's points; a series already in ``seen`` is skipped (the first wins).

    Every point claims its series, also one of the wrong kind (a histogram point of
    a gauge), which is then not written: what ``generate_latest`` does with them.
    """
    spec = SPECS[name]
    order = sorted_labels[name]
    out: list[str] = []
    for point in points:
        labels = point.labels
        values = tuple([_esc(str(labels.get(label, ""))) for label in spec.labels])
        if values in seen:
            continue
        seen.add(values)
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
    return "".join(out)


def _by_family(
    points: Iterable[Point], unknown: Callable[[str], None] | None, left_out: frozenset[str] = frozenset()
) -> dict[str, list[Point]]:
    """Points grouped by schema family, in their order; names not in the schema dropped (and reported),
    families in ``left_out`` skipped (--metrics.exclude: exporter/familyfilter.py)."""
    groups: dict[str, list[Point]] = {}
    for point in points:
        spec = SPECS.get(point.name)
        if spec is None:
            if unknown:
                unknown(point.name)
            continue
        if left_out and spec.name in left_out:
            continue
        groups.setdefault(spec.name, []).append(point)
    return groups


def render_text(
    points: Iterable[Point], unknown: Callable[[str], None] | None = None, left_out: frozenset[str] = frozenset()
) -> bytes:
    sorted_labels = _sorted_labels()
    groups = _by_family(points, unknown, left_out)
    parts: list[str] = []
    for name in sorted(groups, key=_ORDER.__getitem__):
        parts.append(_HEADERS[name])
        parts.append(_render_family(name, groups[name], sorted_labels, set()))
    return "".join(parts).encode()


class _Fragment:
    """One source's published points as text: per family, its sample lines (bytes) and the series they hold.

    Why per source: a write replaces one source's points, so a new store
    version re-renders that source only (an engine at its 20,000-series budget
    renders once per engine scrape, not once per GPU sample) and the exposition
    is the fragments joined family by family.
    """

    __slots__ = ("chunks", "keys", "labels_version")

    def __init__(
        self, points: Iterable[Point], unknown: Callable[[str], None] | None, left_out: frozenset[str] = frozenset()
    ) -> None:
        sorted_labels = _sorted_labels()
        self.labels_version = schema.LABELS_VERSION
        self.chunks: dict[str, bytes] = {}
        self.keys: dict[str, set[tuple[str, ...]]] = {}
        # the points themselves are not kept: a fragment outlives the store's list it was made
        # from until the next render, and holding it kept two generations of points alive
        for name, fam in _by_family(points, unknown, left_out).items():
            seen: set[tuple[str, ...]] = set()
            self.chunks[name] = _render_family(name, fam, sorted_labels, seen).encode()
            self.keys[name] = seen


def _family_points(points: Iterable[Point], name: str) -> list[Point]:
    """The points of schema family ``name`` among ``points``, in their order."""
    out = []
    for point in points:
        spec = SPECS.get(point.name)
        if spec is not None and spec.name == name:
            out.append(point)
    return out


def _compose(fragments: list[tuple[_Fragment, Callable[[], Iterable[Point]]]]) -> bytes:
    """The exposition of ``fragments`` in order: what ``render_text`` writes for their points concatenated.

    Each fragment comes with how to get the points it was rendered from. A series
    two sources both claim is written once, from the first of them (as
    ``render_text`` does); that family of the later source is rendered again
    without it (rare: the usual check is one set-disjointness test per family).
    """
    names: set[str] = set()
    for frag, _ in fragments:
        names.update(frag.chunks)
    parts: list[bytes] = []
    for name in sorted(names, key=_ORDER.__getitem__):
        parts.append(_HEADER_BYTES[name])
        claimed: list[set[tuple[str, ...]]] = []
        for frag, points_of in fragments:
            chunk = frag.chunks.get(name)
            if chunk is None:
                continue
            mine = frag.keys[name]
            if all(c.isdisjoint(mine) for c in claimed):
                parts.append(chunk)
                claimed.append(mine)
                continue
            seen: set[tuple[str, ...]] = set().union(*claimed)
            parts.append(_render_family(name, _family_points(points_of(), name), _sorted_labels(), seen).encode())
            claimed = [seen]
    return b"".join(parts)


_HEADER_BYTES = {name: header.encode() for name, header in _HEADERS.items()}
#: gzip level of the compressed copy: 1 makes 2.5 MB of exposition ~150 kB in ~5 ms (level 6: ~130 kB, twice the CPU)
GZIP_LEVEL = 1


class _FamiliesCollector:
    """A throw-away prometheus_client collector over prepared families."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


#: (store version, monotonic expiry, body)
_Entry = tuple[int, float, bytes]


class ExpositionCache:
    """Renders the store at most once per store version and format, and never past its expiry.

    A rendering is reused while the store has had no write *and* no source's
    values have gone stale nor any attempt timed out since (the view's
    ``valid_until``): with no new writes a dead source's series still vanish
    from /metrics on time. The text format is rendered per source
    (``_Fragment``): a write re-renders only the source that wrote. Each
    rendering has a gzip'ed copy, made once on the first scrape that asks.
    ``cached`` never renders and never waits: the HTTP layer uses it to
    answer from the last rendering, and renders off the event loop on a miss
    (exporter/serving.py). ``families``: what --metrics.include / --metrics.exclude
    publish; a family left out is never built, and
    ``llm_exporter_metric_family_excluded{family}`` names it.
    """

    def __init__(self, store: SnapshotStore, families: FamilyFilter | None = None) -> None:
        self.store = store
        #: the schema's families never built, fixed at start-up (a point of another name is dropped anyway)
        self.left_out: frozenset[str] = frozenset(families.excluded()) if families else frozenset()
        self._excluded_points: list[Point] = [
            Sample("llm_exporter_metric_family_excluded", {"family": name}, 1.0) for name in SPECS if name in self.left_out
        ]
        self._lock = threading.Lock()
        #: (openmetrics?, gzip?) -> (store version, monotonic expiry, body)
        self._cached: dict[tuple[bool, bool], _Entry] = {}
        #: source -> (the points list rendered, whether they were served whole, its fragment)
        self._fragments: dict[str, tuple[int, bool, _Fragment]] = {}
        self._unknown_logged: set[str] = set()
        #: renderings made (not served from the cache), per (openmetrics?, gzip?): what the tests count
        self.renders: dict[tuple[bool, bool], int] = {}

    def _note_unknown(self, name: str) -> None:
        if name not in self._unknown_logged:
            self._unknown_logged.add(name)
            log.error("dropping metric %s: not declared in exporter.schema", name)

    def _valid(self, entry: _Entry | None) -> bool:
        return entry is not None and entry[0] == self.store.version and self.store.monotonic() < entry[1]

    def cached(self, openmetrics: bool = False, gzip: bool = False) -> bytes | None:
        """The current rendering when one is valid now; None when it must be rendered. Never blocks."""
        entry = self._cached.get((openmetrics, gzip))
        return entry[2] if entry is not None and self._valid(entry) else None

    def render(self, openmetrics: bool = False, gzip: bool = False) -> bytes:
        """The current rendering (gzip'ed with ``gzip``), rendered now if there is none valid."""
        body = self.cached(openmetrics, gzip)
        if body is not None:
            return body
        with self._lock:
            key = (openmetrics, gzip)
            entry = self._cached.get(key)
            if entry is not None and self._valid(entry):
                return entry[2]
            plain = self._plain_locked(openmetrics)
            if not gzip:
                return plain[2]
            entry = (plain[0], plain[1], _gzip.compress(plain[2], compresslevel=GZIP_LEVEL, mtime=0))
            self._cached[key] = entry
            self.renders[key] = self.renders.get(key, 0) + 1
            return entry[2]

    def _plain_locked(self, openmetrics: bool) -> _Entry:
        key = (openmetrics, False)
        entry = self._cached.get(key)
        if entry is not None and self._valid(entry):
            return entry
        view = self.store.view()
        if openmetrics:
            points = meta_points(view.sources.values()) + self._excluded_points
            for name in view.sources:
                points.extend(view.published_points(name))
            body = generate_latest_openmetrics(
                _FamiliesCollector(families_from_points(points, self._note_unknown, self.left_out))
            )
        else:
            body = self._text_locked(view)
        entry = (view.version, view.valid_until, body)
        self._cached[key] = entry
        self.renders[key] = self.renders.get(key, 0) + 1
        return entry

    def _text_locked(self, view: View) -> bytes:
        """The text exposition of ``view``, re-rendering only the sources whose published points changed."""
        meta = meta_points(view.sources.values()) + self._excluded_points
        fragments: list[tuple[_Fragment, Callable[[], Iterable[Point]]]] = [(_Fragment(meta, self._note_unknown), lambda: meta)]
        kept: dict[str, tuple[int, bool, _Fragment]] = {}
        for name, st in view.sources.items():
            served = view.served[name]
            have = self._fragments.get(name)
            # the store bumps a source's generation whenever it replaces its points: equal means unchanged
            if have is None or have[0] != st.generation or have[1] != served or have[2].labels_version != schema.LABELS_VERSION:
                have = (st.generation, served, _Fragment(view.published_points(name), self._note_unknown, self.left_out))
            kept[name] = have
            fragments.append((have[2], functools.partial(view.published_points, name)))
        self._fragments = kept  # a source that left the store leaves the cache
        return _compose(fragments)


def wants_openmetrics(accept: str | None) -> bool:
    """Content negotiation as client_python does it: OpenMetrics only when asked for."""
    if not accept:
        return False
    for part in accept.split(","):
        if part.split(";")[0].strip() == "application/openmetrics-text":
            return True
    return False
