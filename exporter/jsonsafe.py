"""Strict JSON in and out: non-finite numbers written as ``null``, untrusted JSON read under bounds.

Why: an engine may legally serve ``NaN``, ``+Inf`` or ``-Inf`` (a division by
zero in its own code), and every such number that reaches a verdict, the
``/diagnosis`` body, ``report`` or a ramp record would otherwise be written as
the bare words ``NaN``/``Infinity`` (not JSON: browsers and ``jq`` refuse
them) or, with ``allow_nan=False``, fail the whole answer. :func:`dumps` writes
them as ``null`` (the schema's "no value") and never fails on a float.

Why a bounded decoder: JSON an engine or a tenant controls (an SSE event, a
``/props`` body, a pod list) can nest deep enough to make the C decoder recurse
past Python's limit (``RecursionError``) or be large enough to cost memory out
of proportion. :func:`loads_bounded` refuses both with :class:`JSONLimitError`
(a ``ValueError``), before decoding, at C speed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["JSONLimitError", "check_depth", "dumps", "finite", "has_non_finite", "loads_bounded"]

#: the deepest nesting :func:`loads_bounded` accepts unless told otherwise
MAX_DEPTH = 64
#: a JSON string (escapes included) or a bracket: what the depth scan looks at
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class JSONLimitError(ValueError):
    """The document is over the size or depth bound (the message says which)."""


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (at any depth) replaced by ``None``; other values as they are.

    Containers are copied only where something changes, so a clean document
    costs one walk and no allocation.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        out: dict[Any, Any] | None = None
        for key, value in obj.items():
            clean = finite(value)
            if clean is not value and out is None:
                out = dict(obj)
            if out is not None:
                out[key] = clean
        return obj if out is None else out
    if isinstance(obj, (list, tuple)):
        items = [finite(v) for v in obj]
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
    return obj


def has_non_finite(obj: Any) -> bool:
    """Whether ``obj`` holds a NaN or an infinity anywhere."""
    if isinstance(obj, float):
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        return any(has_non_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(has_non_finite(v) for v in obj)
    return False


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that writes non-finite floats as ``null`` (strict JSON, never a ``ValueError``)."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)


def loads_bounded(data: str | bytes | bytearray, *, max_bytes: int, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(data)`` after checking its size and nesting depth.

    Raises :class:`JSONLimitError` when ``data`` is over ``max_bytes`` (UTF-8)
    or nests deeper than ``max_depth``, and ``ValueError`` (``json``'s own)
    when it is not JSON. ``NaN``/``Infinity`` are not JSON and are refused.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise JSONLimitError(f"over {max_bytes} bytes")
    check_depth(raw, max_depth)
    return json.loads(raw, parse_constant=_refuse_constant)


def check_depth(data: str | bytes | bytearray, max_depth: int = MAX_DEPTH) -> None:
    """Raise :class:`JSONLimitError` when ``data`` nests deeper than ``max_depth`` (brackets inside strings
    do not count). For a decoder that must bound depth on its own terms (a streaming one, trace.py)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return  # too few brackets to nest that deep: no scan (the common case, at C speed)
    depth = 0
    for m in _TOKENS.finditer(raw):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > max_depth:
                raise JSONLimitError(f"nested deeper than {max_depth} levels")
        elif c in (b"]", b"}"):
            depth -= 1


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
