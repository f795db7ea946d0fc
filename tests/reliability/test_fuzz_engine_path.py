"""Property: random and mutated engine bodies, served by a real local HTTP server, never break the path.

The path is the real one minus the subprocess: ``EngineSource`` scrapes a live
local server, ``SourceRunner.sample_once`` (the loop body of every source
thread) records the result in a ``SnapshotStore``, and the collector renders
/metrics from it. For every body: the attempt ends as a success or as a
``SourceError`` with a known reason, never as an escaped exception (which the
runner would count as ``internal``); a failed attempt leaves the previous
good points untouched (no partial garbage); the rendered exposition parses
and names nothing outside ``exporter.schema``; and the next healthy body
brings the source back up (``source_up`` flips back).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.collector import ExpositionCache
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.runner import SourceRunner
from exporter.samples import HistogramSample, Point, Sample
from exporter.schema import SPECS
from exporter.store import SnapshotStore, SourceState
from tests.reliability.rel_helpers import ROOT, foreign_names
from tests.support.exposition import vllm_exposition
from tests.support.fake_engine import FakeEngine

HEALTHY = vllm_exposition(1).encode()
FIXTURES = sorted((ROOT / "tests" / "engines" / "fixtures").glob("*.prom"))
BASES = [HEALTHY, *(p.read_bytes() for p in FIXTURES)]
EXPECTED_REASONS = {"parse", "too_large", "too_many_series"}
NAME = "engine:fuzz"


class Path_:
    """The live server and the in-process source path, shared by every example."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        # small caps so the limits are reachable by mutation too
        cfg = EngineConfig(url=engine.url, name="fuzz", timeout=5.0, interval=5.0, max_series=2_000, max_body_bytes=400_000)
        self.source = EngineSource(cfg)
        self.store = SnapshotStore()
        self.runner = SourceRunner(self.source, self.store)
        self.cache = ExpositionCache(self.store)

    def scrape(self, body: bytes) -> SourceState:
        self.engine.set(body=body)
        self.runner.sample_once()
        return self.store.states()[NAME]


@pytest.fixture(scope="module")
def path() -> Iterator[Path_]:
    with FakeEngine(HEALTHY) as engine:
        p = Path_(engine)
        try:
            yield p
        finally:
            p.source.close()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    body = bytearray(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 5))):
        op = draw(
            st.sampled_from(["cut", "delete", "insert", "bad_bytes", *["dup_lines", "bad_value", "swap_lines", "grow"] * 2])
        )
        pos = draw(st.integers(0, max(0, len(body) - 1)))
        if op == "cut":  # mid-line (truncated) or at a line end (a shorter, valid body)
            if draw(st.booleans()):
                pos = body.find(b"\n", pos) + 1 or len(body)
            del body[pos:]
        elif op == "delete":
            del body[pos : pos + draw(st.integers(1, 200))]
        elif op == "insert":
            body[pos:pos] = draw(st.text(alphabet='{}="\\,# \n\t0123456789.eE+-InfNa_:abzé', max_size=20)).encode()
        elif op == "bad_bytes":
            body[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op in ("dup_lines", "swap_lines", "grow", "bad_value"):
            lines = bytes(body).split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            if op == "dup_lines":
                lines[i:i] = [lines[i]] * draw(st.integers(1, 3))
            elif op == "swap_lines":
                j = draw(st.integers(0, len(lines) - 1))
                lines[i], lines[j] = lines[j], lines[i]
            elif op == "grow":  # label cardinality: the same line with a fresh label value, many times
                line = lines[i]
                lines[i:i] = [line.replace(b"{", b'{x="%d",' % k, 1) for k in range(draw(st.integers(1, 3000)))]
            else:
                head, sep, _ = lines[i].rpartition(b" ")
                if sep:
                    value = draw(st.sampled_from([b"NaN", b"+Inf", b"-Inf", b"-1", b"1e308", b"abc", b"", b"0x10", b"1 2 3"]))
                    lines[i] = head + b" " + value
            body = bytearray(b"\n".join(lines))
    return bytes(body)


#: mostly mutations of real expositions (some stay valid), some noise
BODIES = st.one_of(mutated(), mutated(), mutated(), st.binary(max_size=3000), st.text(max_size=2000).map(str.encode))


def _check_points(points: list[Point]) -> None:
    for p in points:
        spec = SPECS[p.name]  # KeyError: a name outside the schema reached the store
        assert set(p.labels) <= set(spec.labels), (p.name, p.labels)
        if spec.type == "histogram":
            assert isinstance(p, HistogramSample)
            bounds = [b for b, _ in p.buckets]
            assert bounds == sorted(bounds) and math.isinf(bounds[-1])
        else:
            assert isinstance(p, Sample) and isinstance(p.value, float)


def _check_rendered(path: Path_) -> None:
    for openmetrics in (False, True):
        text = path.cache.render(openmetrics).decode()
        list(text_string_to_metric_families(text))  # the output is valid exposition text
        assert not foreign_names(text), sorted(foreign_names(text))[:5]


@settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(body=BODIES)
def test_any_body_leaves_the_source_alive_and_the_output_clean(path: Path_, body: bytes) -> None:
    good = path.scrape(HEALTHY)
    assert good.up, f"healthy body failed: {good.last_error}"
    good_points = good.points
    _check_points(good_points)

    state = path.scrape(body)
    event("published" if state.up else f"failed: {state.last_error.reason if state.last_error else '?'}")
    if state.up:
        _check_points(state.points)
    else:
        assert state.last_error is not None
        assert state.last_error.reason in EXPECTED_REASONS, f"unexpected failure: {state.last_error}"
        assert state.points is good_points, "a failed scrape changed the published points"
    _check_rendered(path)

    again = path.scrape(HEALTHY)
    assert again.up, f"the source did not come back after a bad body: {again.last_error}"
    assert path.store.states()[NAME].errors.get("internal", 0) == 0
