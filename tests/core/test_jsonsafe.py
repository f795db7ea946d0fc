"""exporter/jsonsafe.py: non-finite numbers leave as null, untrusted JSON enters under bounds."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.jsonsafe import JSONLimitError, check_depth, dumps, finite, has_non_finite, loads_bounded

NUMBERS = st.floats(allow_nan=True, allow_infinity=True) | st.integers() | st.none() | st.booleans() | st.text(max_size=5)
DOCS = st.recursive(
    NUMBERS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30,
)


def _strict(text: str) -> object:
    def refuse(word: str) -> object:
        raise AssertionError(f"{word} written")

    return json.loads(text, parse_constant=refuse)


# 40 of the gate's fixed examples (tests/conftest.py): Hypothesis's default 100 documents of up to 30
# leaves took 1.0-1.4 s alone and 2.2 s beside the unit tier's other worker, over the unit budget
# (tests/support/durations.py) on a loaded host; 40 still place NaN and ±Inf at every depth
@settings(max_examples=40)
@given(DOCS)
def test_dumps_is_strict_json_with_non_finite_numbers_as_null(doc: object) -> None:
    back = _strict(dumps(doc))
    assert not has_non_finite(back)
    assert back == json.loads(json.dumps(finite(doc)))  # everything else as json writes it


def test_finite_replaces_at_any_depth_and_copies_only_what_changes() -> None:
    clean = {"a": [1.0, {"b": 2}], "c": "x"}
    assert finite(clean) is clean
    doc = {"a": [1.0, {"b": math.nan}], "c": (math.inf, -math.inf), "d": clean}
    out = finite(doc)
    assert out == {"a": [1.0, {"b": None}], "c": [None, None], "d": clean}
    assert out["d"] is clean and has_non_finite(doc) and not has_non_finite(out)
    assert math.isnan(doc["a"][1]["b"])  # the input is left as it was


def test_loads_bounded_refuses_depth_and_size_and_non_json_constants() -> None:
    assert loads_bounded('{"a": [1, {"b": "[[[["}]}', max_bytes=100, max_depth=3) == {"a": [1, {"b": "[[[["}]}
    with pytest.raises(JSONLimitError, match="nested deeper than 3 levels"):
        loads_bounded("[[[[1]]]]", max_bytes=100, max_depth=3)
    with pytest.raises(JSONLimitError, match="nested deeper"):  # would be RecursionError in json.loads
        loads_bounded(b"[" * 100_000 + b"]" * 100_000, max_bytes=1 << 20)
    with pytest.raises(JSONLimitError, match="over 10 bytes"):
        loads_bounded('"' + "x" * 20 + '"', max_bytes=10)
    for constant in ("NaN", "Infinity", "-Infinity", "[NaN]"):
        with pytest.raises(ValueError):
            loads_bounded(constant, max_bytes=100)
    assert loads_bounded('"\\\\"', max_bytes=10) == "\\"  # an escaped backslash closes its string


def test_check_depth_bounds_text_or_bytes_without_decoding() -> None:
    check_depth('{"a": [1, {"b": "[[[[[[[["}]}', max_depth=3)  # brackets in strings do not nest
    check_depth(b"[[[]]]", max_depth=3)
    for data in ("[[[[]]]]", b"[[[[]]]]", bytearray(b'{"a": {"b": {"c": {}}}}')):
        with pytest.raises(JSONLimitError, match="nested deeper than 3 levels"):
            check_depth(data, max_depth=3)
    check_depth("[1]" * 10_000, max_depth=3)  # many brackets, none deep: scanned and accepted
