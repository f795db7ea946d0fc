"""A fast, selective parser for the Prometheus text format (and OpenMetrics text).

Why our own parser: a vLLM server with 20 data-parallel engines serves ~800 KB and
~9,000 samples per scrape, most of them histogram buckets we never publish.
``prometheus_client``'s parser builds every family and label dict (~390 ms here);
this one reads each line's metric name with two ``str.find`` calls, looks it up in
the set of names the mapping tables need, and only then parses labels and value.
Every name is still validated (memoised per distinct name) and every wanted line
fully, so garbage or a truncated body raises :class:`ParseError` with a line number
instead of yielding partial garbage.

Tolerated: ``# HELP``/``# TYPE``/other comments (a TYPE without HELP is fine), blank
lines, ``\\r\\n`` line ends, OpenMetrics ``# EOF`` (nothing may follow it), exemplars
after ``#``, ``_created`` series (skipped unless wanted), escapes ``\\\\``, ``\\"``,
``\\n`` in label values, ``NaN``/``+Inf``/``-Inf`` values, optional timestamps
(validated, then dropped: the store timestamps samples itself), whitespace after
label commas (Triton's docs), TGI summaries (``quantile`` lines like any other).

Truncation: the format requires the last line to end with a newline; a body that
does not (and does not end with ``# EOF``) was cut off and is rejected.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, field

#: Labels of one sample (a fresh dict per sample; callers may keep it).
Labels = dict[str, str]

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# One `name="value"` pair of a label set, with the separator after it.
_LABEL_PAIR_RE = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(,?)')
_ESCAPE_RE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


class ParseError(ValueError):
    """The exposition is not valid text format; ``lineno`` is 1-based (0: whole body)."""

    def __init__(self, lineno: int, message: str) -> None:
        self.lineno = lineno
        self.detail = message
        super().__init__(f"line {lineno}: {message}" if lineno else message)


class SeriesLimitError(Exception):
    """The exposition has more sample lines than the input safety limit (parsing stops there)."""

    def __init__(self, limit: int, message: str | None = None) -> None:
        self.limit = limit
        super().__init__(message or f"more than {limit} sample lines in the exposition")


#: lines of a dropped family one regex match skips at most: an unbounded ``(?:...)*`` held about
#: 130 bytes of backtracking state per line (24 MiB for a 200 000-line family)
_RUN_LINES = 1024

#: sample-name endings that belong to one metric family (histogram, summary, counter, OpenMetrics)
_FAMILY_SUFFIXES = ("_bucket", "_count", "_sum", "_created", "_total", "_gcount", "_gsum")


def family_of(name: str) -> str:
    """The metric family a sample name belongs to (``x_bucket``, ``x_sum``, ``x_total`` -> ``x``)."""
    for suffix in _FAMILY_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


@dataclass
class Exposition:
    """What :func:`parse` kept: wanted samples by name, plus every name seen.

    ``samples`` maps a wanted sample name (``x_bucket``, ``x_total``, ...) to its
    ``(labels, value)`` pairs in the order served. ``names`` holds every sample
    name in the body, wanted or not (detection reads it). ``series`` counts all
    sample lines. ``dropped_families`` maps a family over its share (see
    :func:`parse`) to its sample lines, none of which is in ``samples``.
    """

    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    series: int = 0
    dropped_families: dict[str, int] = field(default_factory=dict)
    #: wanted sample lines left unread because their name's ``quota`` was used up, per name
    cut: dict[str, int] = field(default_factory=dict)


def parse(
    text: str,
    wanted: Set[str],
    max_series: int | None = None,
    family_share: int | None = None,
    quota: Mapping[str, int] | None = None,
) -> Exposition:
    """Parse ``text``, keeping only samples whose name is in ``wanted``.

    Raises :class:`ParseError` on invalid input and :class:`SeriesLimitError` when
    ``max_series`` is given and exceeded (checked while reading, so a huge body
    stops early).

    ``family_share``: the most sample lines one metric family (:func:`family_of`)
    may have. A family that crosses it is dropped as it streams: its later lines
    are only counted (no label is parsed), the at most ``family_share`` samples it
    had kept are released, and its lines stop counting against ``max_series``
    (which then bounds what is kept). Why: one family whose labels explode (a
    request id, a LoRA adapter per user) must not take the engine's other
    families, the ones the diagnosis reads, down with it.

    ``quota``: wanted sample name -> the most of its lines materialised (the first
    ones served); later lines are validated by name only and counted in ``cut``
    (per name).
    Why: a body whose wanted families together exceed what the exporter may
    publish need not be built whole to be cut (exporter/engines/budget.py
    ``line_quotas`` decides which lines could be published at all).
    """
    if (
        family_share is None
        and max_series is not None
        and _quick_sample_lines(text) > max_series
        and count_sample_lines(text) > max_series
    ):
        # refused before any line or label is materialised: a 200k-series body costs its text, nothing more
        raise SeriesLimitError(max_series)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if text and not text.endswith("\n") and text[text.rfind("\n") + 1 :].strip() != "# EOF":
        raise ParseError(text.count("\n") + 1, "truncated: the last line has no terminating newline")
    cursor = [0]  # where the next line starts; a dropped family's run of lines moves it on
    lines = _lines(text, cursor)  # one line at a time: no list of every line of a large body

    samples: dict[str, list[tuple[Labels, float]]] = {}
    #: sample name -> its family, or "" for an invalid name (one lookup validates and groups)
    name_family: dict[str, str] = {}
    label_ok: dict[str, bool] = {}
    series = 0
    limit = max_series if max_series is not None else -1
    share = family_share if family_share is not None else -1
    #: sample lines per family, and those of families over their share
    per_family: dict[str, int] = {}
    over: dict[str, int] = {}
    kept = 0
    eof_line = 0
    #: lines skipped in runs (line numbers stay right), and a compiled run per dropped sample name
    skipped = 0
    runs: dict[str, re.Pattern[str]] = {}
    #: wanted lines materialised per name under ``quota``, and the lines cut by it
    taken: dict[str, int] = {}
    cut: dict[str, int] = {}

    for index, line in enumerate(lines):
        if not line:
            continue
        first = line[0]
        if first == "#":
            if line.startswith("# EOF") and line.rstrip() == "# EOF":
                eof_line = index + 1 + skipped
                break
            continue
        if first == " " or first == "\t":
            line = line.strip()
            if not line:
                continue
            if line[0] == "#":
                continue
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
        elif space != -1:
            name = line[:space]
        else:
            tab = line.find("\t")
            if tab == -1:
                raise ParseError(index + 1 + skipped, "sample line has no value")
            name = line[:tab]
            space = tab
        family = name_family.get(name)
        if family is None:
            family = name_family[name] = family_of(name) if _NAME_RE.match(name) is not None else ""
        if not family:
            raise ParseError(index + 1 + skipped, f"invalid metric name {name[:60]!r}")
        series += 1
        if share >= 0:
            n = per_family.get(family, 0) + 1
            per_family[family] = n
            if n > share:
                if n == share + 1:  # crossing: release what it kept, stop counting it as kept
                    over[family] = 0
                    kept -= share
                    for wanted_name in [k for k in samples if name_family.get(k) == family]:
                        del samples[wanted_name]
                over[family] += 1
                # the lines after it with the same name (an exposition groups a family's lines)
                # are counted at C speed: no Python step per line of a runaway family
                run = runs.get(name)
                if run is None:
                    run = runs[name] = re.compile(f"(?:{re.escape(name)}[{{ \t][^\n]*\n){{0,{_RUN_LINES}}}")
                start = stop = cursor[0]
                while True:  # a bounded repeat per match: sre keeps backtracking state per repetition
                    end = run.match(text, stop).end()  # type: ignore[union-attr]  # matches the empty string
                    if end == stop:
                        break
                    stop = end
                if stop > start:
                    k = text.count("\n", start, stop)
                    cursor[0] = stop
                    skipped += k
                    series += k
                    over[family] += k
                    per_family[family] = n + k
                continue
        kept += 1
        if kept == limit + 1 and limit >= 0:
            raise SeriesLimitError(limit)
        if name not in wanted:
            continue
        if quota is not None:
            allowed = quota.get(name)
            if allowed is not None:
                had = taken.get(name, 0)
                if had >= allowed:
                    cut[name] = cut.get(name, 0) + 1
                    continue
                taken[name] = had + 1
        lineno = index + 1 + skipped
        if brace != -1 and (space == -1 or brace < space):
            labels, rest = _labels_and_rest(line, brace, lineno, label_ok)
        else:
            labels, rest = {}, line[space:]
        samples.setdefault(name, []).append((labels, _value(rest, lineno)))

    if eof_line:
        for later, line in enumerate(lines, start=eof_line + 1):  # no run is skipped after # EOF
            if line.strip():
                raise ParseError(later, "content after # EOF")
    names = {n for n, family in name_family.items() if family}
    dropped = {family: share + n for family, n in over.items()}
    return Exposition(samples=samples, names=names, series=series, dropped_families=dropped, cut=cut)


def _lines(text: str, cursor: list[int]) -> Iterator[str]:
    """The lines of ``text`` without their ``\\n``, made one by one (``str.split`` would make them all).

    ``cursor[0]`` is where the next line starts: the caller may move it on past lines it skips.
    """
    end = len(text)
    while cursor[0] < end:
        pos = cursor[0]
        nl = text.find("\n", pos)
        if nl == -1:
            cursor[0] = end
            yield text[pos:]
            return
        cursor[0] = nl + 1
        yield text[pos:nl]


#: a line whose first non-blank character is not ``#``: a sample line, as :func:`parse` reads them
_SAMPLE_LINE_RE = re.compile(r"^[ \t]*[^#\s]", re.MULTILINE)


def _quick_sample_lines(text: str) -> int:
    """An upper bound on the sample lines of ``text``, at C speed (lines minus ``#`` lines)."""
    return text.count("\n") + 1 - text.count("\n#") - (1 if text.startswith("#") else 0)


#: the metric name at the start of a sample line (comment lines start with ``#``, which no name does)
_SAMPLE_NAME_RE = re.compile(r"^[ \t]*([a-zA-Z_:][a-zA-Z0-9_:]*)", re.MULTILINE)


def lines_by_name(text: str) -> Counter[str]:
    """Sample lines of ``text`` per metric name, at C speed (no label is parsed).

    Why: the budget's quotas (exporter/engines/budget.py) need each family's size
    before its first line is materialised; invalid lines are left to :func:`parse`.
    """
    # one name string at a time (``findall`` would hold a string per line: 12 MiB for 200 000 lines)
    return Counter(m.group(1) for m in _SAMPLE_NAME_RE.finditer(text))


def count_sample_lines(text: str) -> int:
    """Sample lines of ``text`` (what the input limit counts), without building a line list."""
    return sum(1 for _ in _SAMPLE_LINE_RE.finditer(text))


def _labels_and_rest(line: str, brace: int, lineno: int, label_ok: dict[str, bool]) -> tuple[Labels, str]:
    """Labels of ``line`` (``{`` at ``brace``) and the text after the closing ``}``."""
    if "\\" not in line and "#" not in line:
        close = line.find("}", brace)
        if close != -1:
            labels = _fast_labels(line[brace + 1 : close], label_ok)
            if labels is not None:
                return labels, line[close + 1 :]
    return _slow_labels(line, brace + 1, lineno)


def _fast_labels(body: str, label_ok: dict[str, bool]) -> Labels | None:
    """Label set without backslashes; None means "let the strict parser decide"."""
    labels: Labels = {}
    if not body.strip():
        return labels
    parts = body.split('",')
    last = parts[-1].rstrip()
    if last == "":  # trailing comma after the last pair
        parts.pop()
        if not parts:
            return None
        last = parts[-1]
        if not last.endswith('"'):
            last += '"'
    if not last.endswith('"'):
        return None
    parts[-1] = last[:-1]
    for part in parts:
        key, sep, value = part.partition('="')
        if not sep or '"' in value:
            return None
        key = key.strip()
        ok = label_ok.get(key)
        if ok is None:
            ok = label_ok[key] = _LABEL_NAME_RE.match(key) is not None
        if not ok or key in labels:
            return None
        labels[key] = value
    return labels


def _slow_labels(line: str, pos: int, lineno: int) -> tuple[Labels, str]:
    """Strict label parsing with escapes; returns labels and the text after ``}``."""
    labels: Labels = {}
    end = len(line)
    while True:
        while pos < end and line[pos] in " \t":
            pos += 1
        if pos < end and line[pos] == "}":
            return labels, line[pos + 1 :]
        m = _LABEL_PAIR_RE.match(line, pos)
        if m is None:
            raise ParseError(lineno, "malformed label set")
        key, raw, comma = m.group(1), m.group(2), m.group(3)
        if key in labels:
            raise ParseError(lineno, f"duplicate label {key!r}")
        labels[key] = _ESCAPE_RE.sub(_unescape, raw) if "\\" in raw else raw
        pos = m.end()
        if not comma:
            while pos < end and line[pos] in " \t":
                pos += 1
            if pos < end and line[pos] == "}":
                return labels, line[pos + 1 :]
            raise ParseError(lineno, "malformed label set")


def _unescape(m: re.Match[str]) -> str:
    c = m.group(1)
    return _ESCAPES.get(c, "\\" + c)


def _value(rest: str, lineno: int) -> float:
    """The value after the name/labels; an optional timestamp is checked and dropped."""
    hash_at = rest.find("#")
    if hash_at != -1:  # OpenMetrics exemplar
        rest = rest[:hash_at]
    parts = rest.split()
    if not parts or len(parts) > 2:
        raise ParseError(lineno, "expected a value and an optional timestamp")
    try:
        value = float(parts[0])
        if len(parts) == 2:
            float(parts[1])
    except ValueError:
        raise ParseError(lineno, f"not a number: {rest.strip()[:40]!r}") from None
    return value
