"""Shared helpers for the engine-adapter tests: fixture loading and point lookup."""

from __future__ import annotations

from pathlib import Path

from exporter.engines import NormalizedResult, normalize_exposition
from exporter.samples import HistogramSample, Point, Sample

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def normalize(name: str, engine_type: str = "auto") -> NormalizedResult:
    return normalize_exposition(fixture(name), "srv", engine_type)


def find(result: NormalizedResult, name: str, **labels: str) -> list[Point]:
    """Points named ``name`` whose labels include ``labels`` (server/engine checked too)."""
    out = []
    for p in result.points:
        if p.name != name:
            continue
        assert p.labels["server"] == "srv" and p.labels["engine"] == result.family
        if all(p.labels.get(k) == v for k, v in labels.items()):
            out.append(p)
    return out


def value(result: NormalizedResult, name: str, **labels: str) -> float:
    """The one value of a gauge/counter; fails when absent or ambiguous."""
    found = find(result, name, **labels)
    assert len(found) == 1, f"{name}{labels}: expected one point, got {found}"
    point = found[0]
    assert isinstance(point, Sample)
    return point.value


def histogram(result: NormalizedResult, name: str, **labels: str) -> HistogramSample:
    found = find(result, name, **labels)
    assert len(found) == 1, f"{name}{labels}: expected one histogram, got {found}"
    point = found[0]
    assert isinstance(point, HistogramSample)
    return point


def names(result: NormalizedResult) -> set[str]:
    return {p.name for p in result.points}
