"""A bounded, selective JSON reader: the pod list is read for the fields the exporter uses, nothing else.

Why not ``json.loads``: it builds every value of the document. A pod list is
written by the kubelet, but its strings (annotations, labels, names) by whoever
may create pods on the node, so it is tenant input: a 31 MiB list once took the
exporter to 993 MB RSS, 110 pods with 256 KiB of annotations each to 259 MB,
and a deeply nested document ended in a ``RecursionError``.

This reader walks the bytes (already under the byte cap, ``exporter/kubernetes/pods.py``)
with C-speed regular expressions, descends only into the few objects the caller
asks for, and skips every other value without building it. A skipped value
costs no memory at any size: the skip is a loop with a depth counter, never a
recursion, and a document nested deeper than ``max_depth`` levels is refused
(``TooDeep``) at the first level too deep. The regular expression that steps
over strings, scalars and empty brackets is bounded to ``_RUN_TOKENS`` tokens a
call, because the ``re`` engine keeps state per repetition (an unbounded ``*``
over 8 MiB of ``[],`` takes 800 MB). A skipped value's inside is not validated
beyond its brackets and strings; every value read is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

_WS = re.compile(rb"[ \t\n\r]*")
#: the rest of a string after its opening quote (the unrolled loop: linear, no backtracking)
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null")
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]{0,17})(?![.eE0-9])")
_RUN_TOKENS = 256
#: strings, scalars, commas, colons and empty brackets: what a skip steps over in C
_RUN = re.compile(rb'(?:[^"\[\]{}]+|"[^"\\]*(?:\\.[^"\\]*)*"|\[\]|\{\}){0,%d}' % _RUN_TOKENS, re.DOTALL)
_QUOTE, _COMMA, _COLON = 0x22, 0x2C, 0x3A
_OPEN_OBJECT, _CLOSE_OBJECT, _OPEN_ARRAY, _CLOSE_ARRAY = 0x7B, 0x7D, 0x5B, 0x5D


class JsonError(ValueError):
    """The bytes are not the JSON expected (the message says where, in one line)."""


class TooDeep(JsonError):
    """The document is nested deeper than the reader allows."""


class Reader:
    """A cursor over one JSON document; ``depth`` is the current nesting of the values being read."""

    __slots__ = ("data", "depth", "max_depth", "pos")

    def __init__(self, data: bytes | bytearray, max_depth: int = 64) -> None:
        self.data = data
        self.pos = 0
        self.depth = 0
        self.max_depth = max_depth

    def _fail(self, what: str) -> JsonError:
        return JsonError(f"{what} at byte {self.pos}")

    def peek(self) -> int:
        """The next byte after white space (-1 at the end)."""
        m = _WS.match(self.data, self.pos)
        self.pos = m.end() if m else self.pos
        return self.data[self.pos] if self.pos < len(self.data) else -1

    def at_end(self) -> bool:
        return self.peek() == -1

    def _expect(self, byte: int, what: str) -> None:
        if self.peek() != byte:
            raise self._fail(f"expected {what}")
        self.pos += 1

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > self.max_depth:
            raise TooDeep(f"nested deeper than {self.max_depth} levels at byte {self.pos}")

    def members(self, max_key_bytes: int = 1024) -> Iterator[str | None]:
        """The keys of the object here, one at a time; the caller reads or skips each value.

        A key over ``max_key_bytes`` is yielded as None (not built): skip its value.
        """
        self._expect(_OPEN_OBJECT, "an object")
        self._enter()
        if self.peek() == _CLOSE_OBJECT:
            self.pos += 1
            self.depth -= 1
            return
        while True:
            key = self.string(max_key_bytes)
            self._expect(_COLON, "':'")
            self.peek()
            start = self.pos
            yield key
            if self.pos == start:
                self.skip()  # the caller did not read the value
            nxt = self.peek()
            self.pos += 1
            if nxt == _CLOSE_OBJECT:
                self.depth -= 1
                return
            if nxt != _COMMA:
                self.pos -= 1
                raise self._fail("expected ',' or '}'")

    def elements(self) -> Iterator[None]:
        """Each element of the array here; the caller reads or skips each one."""
        self._expect(_OPEN_ARRAY, "an array")
        self._enter()
        if self.peek() == _CLOSE_ARRAY:
            self.pos += 1
            self.depth -= 1
            return
        while True:
            self.peek()
            start = self.pos
            yield None
            if self.pos == start:
                self.skip()
            nxt = self.peek()
            self.pos += 1
            if nxt == _CLOSE_ARRAY:
                self.depth -= 1
                return
            if nxt != _COMMA:
                self.pos -= 1
                raise self._fail("expected ',' or ']'")

    def _string_end(self) -> int:
        """The position after the string that starts here (at its quote)."""
        m = _STRING_REST.match(self.data, self.pos + 1)
        if m is None:
            raise self._fail("unterminated string")
        return m.end()

    def string(self, max_bytes: int) -> str | None:
        """The string here, or None (consumed, not built) when its JSON form is over ``max_bytes``."""
        if self.peek() != _QUOTE:
            raise self._fail("expected a string")
        start, end = self.pos, self._string_end()
        self.pos = end
        if end - start - 2 > max_bytes:
            return None
        raw = self.data[start + 1 : end - 1]
        try:
            if b"\\" in raw:
                value = json.loads(self.data[start:end])
                return value if isinstance(value, str) else None
            return bytes(raw).decode("utf-8")
        except ValueError:  # a bad escape, or not UTF-8 (UnicodeDecodeError is a ValueError)
            self.pos = start
            raise self._fail("bad string") from None

    def text(self, max_bytes: int) -> str:
        """The string here (cut to nothing when longer than ``max_bytes``); "" for any other value, skipped."""
        if self.peek() != _QUOTE:
            self.skip()
            return ""
        return self.string(max_bytes) or ""

    def integer(self) -> int | None:
        """The integer here (at most 18 digits); None for any other value, skipped."""
        m = _INTEGER.match(self.data, self.pos) if self.peek() != -1 else None
        if m is None:
            self.skip()
            return None
        self.pos = m.end()
        return int(m.group())

    def present(self) -> bool:
        """Whether the value here is something (not null, false, "", {} or []); skipped."""
        start = self.peek()
        begin = self.pos
        self.skip()
        body = self.data[begin : self.pos]
        return start != -1 and body not in (b"null", b"false", b'""', b"{}", b"[]")

    def skip(self) -> None:
        """Step over the value here without building it, whatever its size or depth."""
        first = self.peek()
        if first == _QUOTE:
            self.pos = self._string_end()
            return
        if first not in (_OPEN_OBJECT, _OPEN_ARRAY):
            m = _SCALAR.match(self.data, self.pos)
            if m is None:
                raise self._fail("expected a value")
            self.pos = m.end()
            return
        data, pos, depth = self.data, self.pos + 1, 1
        if self.depth + 1 > self.max_depth:
            raise TooDeep(f"nested deeper than {self.max_depth} levels at byte {self.pos}")
        while True:
            end = _RUN.match(data, pos).end()  # type: ignore[union-attr]  # matches the empty string at worst
            if end != pos:
                pos = end
                continue
            if pos >= len(data):
                self.pos = pos
                raise self._fail("ended inside a value")
            byte = data[pos]
            pos += 1
            if byte in (_OPEN_OBJECT, _OPEN_ARRAY):
                depth += 1
                if self.depth + depth > self.max_depth:
                    self.pos = pos
                    raise TooDeep(f"nested deeper than {self.max_depth} levels at byte {pos}")
            elif byte in (_CLOSE_OBJECT, _CLOSE_ARRAY):
                depth -= 1
                if depth == 0:
                    break
            else:  # a quote the run could not take
                self.pos = pos - 1
                raise self._fail("unterminated string")
        self.pos = pos


__all__ = ["JsonError", "Reader", "TooDeep"]
