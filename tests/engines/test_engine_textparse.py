"""The selective text-format parser: same values as prometheus_client, strict on garbage."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.engines.textparse import ParseError, SeriesLimitError, parse
from tests.engines.engine_helpers import FIXTURES
from tests.support.exposition import vllm_exposition


def _base(name: str) -> str:
    # prometheus_client appends _total to counter samples that lack it (TGI, llama.cpp's
    # n_tokens_max); we keep wire names. Compare without the suffix.
    return name.removesuffix("_total")


def _ours(text: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    probe = parse(text, frozenset())
    exp = parse(text, frozenset(probe.names))
    return {(_base(n), tuple(sorted(lab.items())), v) for n, rows in exp.samples.items() for lab, v in rows}


def _reference(text: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {
        (_base(s.name), tuple(sorted(s.labels.items())), s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


VALID_FIXTURES = sorted(
    p.name
    for p in FIXTURES.glob("*.prom")
    if p.name not in ("real-vllm-docs-usage-metrics-fragment.prom", "real-triton-core-docs-first-response-histogram.prom")
)


@pytest.mark.parametrize("name", VALID_FIXTURES)
def test_same_samples_as_prometheus_client(name: str) -> None:
    text = (FIXTURES / name).read_text()
    assert _ours(text) == _reference(text)


def test_same_samples_as_prometheus_client_on_a_20_engine_vllm() -> None:
    text = vllm_exposition(20, created=False)
    ours = _ours(text)
    assert len(ours) > 8000
    assert ours == _reference(text)


def test_only_wanted_names_are_kept_but_every_name_is_seen() -> None:
    text = 'a{x="1"} 1\nb{y="2"} 2\nb{y="3"} 3\n'
    exp = parse(text, frozenset({"b"}))
    assert set(exp.samples) == {"b"}
    assert [v for _, v in exp.samples["b"]] == [2.0, 3.0]
    assert exp.names == {"a", "b"}
    assert exp.series == 3


def test_escapes_special_values_timestamps_and_exemplars() -> None:
    text = (
        "# TYPE m gauge\n"  # TYPE without HELP
        "\n"
        'm{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",brace="}{",comma="a,b"} NaN\n'
        'm{k="inf"} +Inf 1700000000000\n'
        'm{k="ninf"} -Inf\n'
        'm{k="ex"} 2.5 # {trace_id="abc"} 1.0 1700000000\n'
        'm{ k = "spaced" , other="x", } 7\n'
    )
    exp = parse(text, frozenset({"m"}))
    rows = exp.samples["m"]
    assert rows[0][0] == {"path": "C:\\dir", "quote": 'say "hi"', "nl": "a\nb", "brace": "}{", "comma": "a,b"}
    assert math.isnan(rows[0][1])
    assert rows[1] == ({"k": "inf"}, math.inf)
    assert rows[2] == ({"k": "ninf"}, -math.inf)
    assert rows[3] == ({"k": "ex"}, 2.5)
    assert rows[4] == ({"k": "spaced", "other": "x"}, 7.0)


def test_openmetrics_eof_created_series_and_crlf() -> None:
    text = "# TYPE c counter\r\nc_total 5\r\nc_created 1.7e9\r\n# EOF"
    exp = parse(text, frozenset({"c_total"}))
    assert exp.samples == {"c_total": [({}, 5.0)]}
    assert "c_created" in exp.names


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('a 1\nm{x="1"} 2', 2, "truncated"),  # cut mid-line: no final newline
        ('a 1\nm{x="1', 2, "truncated"),
        ('a 1\nm{x="1\n', 2, "label"),  # a wanted line cut inside its labels
        ("a 1\nm\n", 2, "no value"),
        ("a 1\nm{} abc\n", 2, "not a number"),
        ("a 1\nm 1 2 3\n", 2, "value"),
        ("a 1\n<!DOCTYPE html> <html>\n", 2, "metric name"),
        ("a 1\n# EOF\nm 1\n", 3, "after # EOF"),
        ('m{x="1",x="2"} 1\n', 1, "label"),
        ('m{1x="1"} 1\n', 1, "label"),
        ("m 1 notatime\n", 1, "not a number"),
    ],
)
def test_garbage_raises_with_the_line_number(text: str, line: int, words: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse(text, frozenset({"m"}))
    assert caught.value.lineno == line
    assert words in str(caught.value)


def test_real_docs_fragment_with_an_ellipsis_line_is_rejected() -> None:
    text = (FIXTURES / "real-vllm-docs-usage-metrics-fragment.prom").read_text()
    with pytest.raises(ParseError) as caught:
        parse(text, frozenset({"vllm:iteration_tokens_total_bucket"}))
    assert caught.value.lineno == 12


def test_series_cap_stops_reading() -> None:
    text = "".join(f'm{{i="{i}"}} {i}\n' for i in range(100))
    assert parse(text, frozenset({"m"}), max_series=100).series == 100
    with pytest.raises(SeriesLimitError):
        parse(text, frozenset({"m"}), max_series=99)


def test_empty_body_parses_to_nothing() -> None:
    exp = parse("", frozenset({"m"}))
    assert exp.samples == {} and exp.names == set() and exp.series == 0
