"""Property: whatever text arrives, normalisation returns schema points or raises ParseError."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.engines import NormalizedResult, ParseError, normalize_exposition
from exporter.engines.mappings import MAPPINGS
from exporter.engines.normalize import wanted_names
from exporter.samples import HistogramSample, Sample
from exporter.schema import SPECS
from tests.engines.engine_helpers import FIXTURES

FIXTURE_TEXTS = [p.read_text() for p in sorted(FIXTURES.glob("*.prom"))]
WANTED = sorted(set().union(*(wanted_names(m) for m in MAPPINGS.values())))
LABEL_NAMES = [
    "engine",
    "model_name",
    "model",
    "le",
    "tp_rank",
    "dp_rank",
    "pp_rank",
    "finished_reason",
    "kv_cache_block_type",
    "request_type",
    "reason",
    "err",
    "is_streaming",
    "block_size",
    "num_gpu_blocks",
    "kv_cache_size_tokens",
    "page_size",
    "cache_source",
    "version",
]
PROFILE = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def check(text: str) -> None:
    try:
        result = normalize_exposition(text, "srv")
    except ParseError:
        return
    assert isinstance(result, NormalizedResult)
    for p in result.points:
        spec = SPECS[p.name]  # KeyError = a non-schema name escaped
        assert set(p.labels) <= set(spec.labels)
        if spec.type == "histogram":
            assert isinstance(p, HistogramSample)
            bounds = [b for b, _ in p.buckets]
            assert bounds == sorted(bounds) and math.isinf(bounds[-1])
        else:
            assert isinstance(p, Sample) and isinstance(p.value, float)


@PROFILE
@given(st.text(max_size=400))
def test_arbitrary_text(text: str) -> None:
    check(text)


@st.composite
def mutated_fixture(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(FIXTURE_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["cut", "delete", "insert", "dup_line", "replace_char"]))
        pos = draw(st.integers(0, max(0, len(text) - 1)))
        if op == "cut":
            text = text[:pos]
        elif op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 40)) :]
        elif op == "insert":
            text = text[:pos] + draw(st.text(alphabet='{}="\\,# \n\t0123456789.eE+-InfNa_:abz', max_size=12)) + text[pos:]
        elif op == "dup_line":
            lines = text.split("\n")
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        else:
            text = text[:pos] + draw(st.characters()) + text[pos + 1 :]
    return text


@PROFILE
@given(mutated_fixture())
def test_mutated_fixtures(text: str) -> None:
    check(text)


label_value = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=8)
number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["+Inf", "-Inf", "NaN", "0", "1e3", "16", "None", "x"]),
)


@st.composite
def sample_line(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(WANTED))
    keys = draw(st.lists(st.sampled_from(LABEL_NAMES), max_size=4, unique=True))
    pairs = []
    for k in keys:
        v = draw(st.one_of(label_value, number))
        escaped = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        pairs.append(f'{k}="{escaped}"')
    labels = "{" + ",".join(pairs) + "}" if bool(pairs) or draw(st.booleans()) else ""
    return f"{name}{labels} {draw(number)}"


@PROFILE
@given(st.lists(sample_line(), min_size=1, max_size=40))
def test_generated_expositions_of_wanted_names(lines: list[str]) -> None:
    check("\n".join(lines) + "\n")
