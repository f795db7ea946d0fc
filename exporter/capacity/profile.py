"""A capacity profile: what one engine configuration was measured to carry at its SLO.

Why two file kinds: ``tune`` writes ``tune.json`` (exporter/tune/record.py) whose
``recommendation`` is the configuration it advises (else its ``baseline``), each
with the ``capacity`` dict of exporter/tune/capacity.py; ``ramp`` writes
``report.json`` (exporter/ramp/report.py), whose capacity at SLO is computed here
with the same rule (``capacity_at_slo``: the highest step whose TTFT/ITL p95 meet
the SLO, by default the diagnosis's own ``slo_ttft_p95_seconds`` /
``slo_itl_p95_seconds``). Either way serve gets one frozen ``Profile``.

Files written before the fingerprint and the workload were recorded still load:
their fingerprint is None (staleness unknown) and their lengths are None (no
drift). Every problem is one ``ProfileError`` line that names the file.

Why the file is hostile input: it is re-read while serve runs (watch.py), and
whoever can write it must not be able to hang, bloat or break the exporter. So
only a regular file is opened (a FIFO would block the open until a writer
came, a device never ends), its size is capped before a byte is read
(``MAX_BYTES``), it is decoded under exporter/jsonsafe.py's depth bound, and
every number the profile keeps is range-checked (``concurrency`` of 10^400 was
accepted once and then failed the source on every cycle).
"""

from __future__ import annotations

import calendar
import os
import re
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.capacity import fingerprint as fpr
from exporter.capacity.atslo import DIAGNOSIS_SLO, SLO, capacity_at_slo
from exporter.capacity.fingerprint import Fingerprint
from exporter.jsonsafe import JSONLimitError, loads_bounded
from exporter.values import shown as shown_value

#: the largest profile file read: a tune.json keeps every ramp record (a few KiB per step, so the
#: default 8 trials x 2 repeats stay far below); 4 MiB decodes in tens of milliseconds, while a
#: 63 MiB one re-read on every touch took 438 MiB of memory and seconds of the interpreter's lock
MAX_BYTES = 4 << 20
#: the ranges of the figures a profile publishes (past them the file is not a measurement)
MAX_CONCURRENCY = 1_000_000
MAX_RATE = 1e12
MAX_TOKENS_MEAN = 1e9


class ProfileError(ValueError):
    """A profile that cannot be used: one line naming the file and why.

    ``reason``: the ``llm_exporter_source_errors_total`` reason when the file goes bad
    while serving (``file_missing``, ``too_large``, ``malformed``).
    """

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


#: the most characters of a path an error line shows
_PATH_SHOWN = 160


def shown(path: str) -> str:
    """``path`` fit for one error line: printable, no URL user info, at most ``_PATH_SHOWN`` characters."""
    text = "".join(ch if ch.isprintable() else "?" for ch in path)
    text = re.sub(r"://[^/]*@", "://***@", text)  # a URL's user info is a secret, never echoed
    return text if len(text) <= _PATH_SHOWN else text[: _PATH_SHOWN - 3] + "..."


@dataclass(frozen=True)
class Profile:
    """The measured capacity at SLO of one configuration, and what it was measured on."""

    path: str
    #: "tune.json recommendation", "tune.json baseline" or "ramp report.json"
    kind: str
    concurrency: int
    requests_per_second: float
    tokens_per_second: float
    #: Unix time of the measurement
    measured_at: float
    #: None: the file predates fingerprints (staleness unknown)
    fingerprint: Fingerprint | None
    #: mean prompt / output tokens per request of the measured workload (None: not recorded)
    prompt_tokens_mean: float | None
    output_tokens_mean: float | None

    def describe(self) -> str:
        return (
            f"{self.kind} {self.path}: {self.concurrency} concurrent, {self.requests_per_second:.3g} req/s, "
            f"{self.tokens_per_second:.3g} tokens/s at SLO"
        )


def _iso(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _in_range(value: Any, low: float, high: float) -> bool:
    """A JSON number (not a bool) within [low, high]; compared exactly, so 10**400 and NaN are out, never an error."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and low <= value <= high


def _mean(where: str, raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None  # absent or not a measurement: no drift
    if not _in_range(value, 0.0, MAX_TOKENS_MEAN):
        raise ProfileError(f"capacity profile {shown(where)}: workload.{key} is over {MAX_TOKENS_MEAN:g} ({shown_value(value)})")
    return float(value)


def workload_means(raw: Any, where: str = "") -> tuple[float | None, float | None]:
    """(prompt, output) mean tokens per request from a ``workload`` object (None where absent)."""
    if not isinstance(raw, Mapping):
        return None, None
    return _mean(where, raw, "prompt_tokens_mean"), _mean(where, raw, "output_tokens_mean")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _regular(path: str, st: os.stat_result) -> None:
    """ProfileError unless ``st`` is a regular file no larger than MAX_BYTES."""
    if not stat.S_ISREG(st.st_mode):
        raise ProfileError(f"capacity profile {shown(path)}: is {_kind(st.st_mode)}, expected a tune.json or report.json file")
    if st.st_size > MAX_BYTES:
        raise ProfileError(
            f"capacity profile {shown(path)}: {st.st_size} bytes, over the {MAX_BYTES >> 20} MiB a profile may have", "too_large"
        )


@dataclass(frozen=True)
class ProfileFile:
    """The bytes of a profile file as read, and its modification time."""

    data: bytes
    mtime: float


def read_file(path: str) -> ProfileFile:
    """The file's bytes; ProfileError naming the file when it is missing, not a regular file or too large.

    The type and size are checked before the file is opened, and again on the open
    descriptor (opened non-blocking: a FIFO swapped in between cannot hold the open).
    """
    try:
        _regular(path, os.stat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            _regular(path, st)
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ProfileError(f"capacity profile {shown(path)}: no such file", "file_missing") from None
    except OSError as err:
        raise ProfileError(f"capacity profile {shown(path)}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:  # a NUL byte in the path (a ProfileError is one too: raised as it is)
        if isinstance(err, ProfileError):
            raise
        raise ProfileError(f"capacity profile {shown(path)}: not a usable path") from None
    if len(data) > MAX_BYTES:  # grew after the check
        raise ProfileError(f"capacity profile {shown(path)}: over the {MAX_BYTES >> 20} MiB a profile may have", "too_large")
    return ProfileFile(data, st.st_mtime)


def _decode(path: str, data: bytes) -> dict[str, Any]:
    """The bytes as a JSON object, decoded under exporter/jsonsafe.py's bounds."""
    try:
        doc = loads_bounded(data, max_bytes=MAX_BYTES)
    except JSONLimitError as err:
        raise ProfileError(f"capacity profile {shown(path)}: not a profile: {err}") from None
    except ValueError as err:  # UnicodeDecodeError, an integer of over 4300 digits included
        raise ProfileError(f"capacity profile {shown(path)}: not JSON ({str(err)[:120]})") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"capacity profile {shown(path)}: expected a JSON object, got {type(doc).__name__}")
    return doc


def read_json(path: str) -> dict[str, Any]:
    """The file as a JSON object; ProfileError (naming the file) when missing, not a regular file, too large or garbled."""
    return _decode(path, read_file(path).data)


def load_profile(path: str | Path, slo: SLO | None = None) -> Profile:
    """Read ``path`` (tune.json or a ramp report.json); ``slo`` judges a ramp report (default: 2 s / 200 ms)."""
    where = str(path)
    return parse_profile(where, read_file(where), slo)


def parse_profile(where: str, file: ProfileFile, slo: SLO | None = None) -> Profile:
    """The profile in ``file`` (read from ``where``, named in every error)."""
    doc = _decode(where, file.data)
    try:
        if isinstance(doc.get("baseline"), dict) and "trials" in doc:
            return _from_tune(where, doc, file.mtime)
        if isinstance(doc.get("steps"), list):
            return _from_ramp(where, doc, slo or DIAGNOSIS_SLO, file.mtime)
    except ProfileError:
        raise
    except ValueError as err:  # a garbled fingerprint
        raise ProfileError(f"capacity profile {shown(where)}: {str(err)[:200]}") from None
    raise ProfileError(f"capacity profile {shown(where)}: neither a tune.json (baseline, trials) nor a ramp report.json (steps)")


def _measured_at(mtime: float, *stamps: Any) -> float:
    """The newest timestamp given (ISO, as ramp writes them), else the file's modification time."""
    found = [t for t in (_iso(s) for s in stamps) if t is not None]
    if found:
        return max(found)
    return mtime


def _capacity(where: str, raw: Any, what: str) -> tuple[int, float, float]:
    if not isinstance(raw, Mapping):
        raise ProfileError(f"capacity profile {shown(where)}: {what} has no capacity object")
    conc = raw.get("concurrency")
    if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
        raise ProfileError(
            f"capacity profile {shown(where)}: {what}: no configuration met the SLO (concurrency {shown_value(conc)})"
        )
    return _figures(where, what, conc, raw.get("requests_per_second"), raw.get("tokens_per_second"))


def _figures(where: str, what: str, conc: int, rps: Any, tps: Any) -> tuple[int, float, float]:
    """The capacity's figures, each range-checked (a value past them is no measurement and would overflow later)."""
    if conc > MAX_CONCURRENCY:
        raise ProfileError(
            f"capacity profile {shown(where)}: {what}: capacity.concurrency is over {MAX_CONCURRENCY} ({shown_value(conc)})"
        )
    figures: list[float] = []
    for name, v in (("requests_per_second", rps), ("tokens_per_second", tps)):
        if not _in_range(v, 0.0, MAX_RATE):
            raise ProfileError(
                f"capacity profile {shown(where)}: {what}: capacity.{name} is not a number from 0 to {MAX_RATE:g} ({shown_value(v)})"
            )
        figures.append(float(v))
    return conc, figures[0], figures[1]


def _runs(where: str, raw: Any) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ProfileError(f"capacity profile {shown(where)}: runs: expected a list of ramp records, got {type(raw).__name__}")
    return raw


def _from_tune(where: str, doc: dict[str, Any], mtime: float) -> Profile:
    rec = doc.get("recommendation")
    part, name = (rec, "recommendation") if isinstance(rec, dict) and rec.get("capacity") else (doc["baseline"], "baseline")
    conc, rps, tps = _capacity(where, part.get("capacity"), name)
    # the recommendation carries its own fingerprint and workload; an older file's only in the best trial
    fp = fpr.parse(part.get("fingerprint"), where)
    argv = part.get("argv")
    if fp is None and isinstance(argv, list) and all(isinstance(a, str) for a in argv) and isinstance(doc.get("engine"), str):
        # a tune.json from before fingerprints: the settings its command line writes out still compare
        fp = Fingerprint().with_argv(argv, family=doc["engine"])
    prompt, output = workload_means(part.get("workload"), where)
    runs = _runs(where, part.get("runs")) or _runs(where, doc["baseline"].get("runs"))
    stamps = [r.get("generated_at") for r in runs if isinstance(r, dict)]
    return Profile(
        where,
        f"tune.json {name}",
        conc,
        rps,
        tps,
        _measured_at(mtime, doc.get("generated_at"), *stamps),
        fp,
        prompt,
        output,
    )


def _from_ramp(where: str, doc: dict[str, Any], slo: SLO, mtime: float) -> Profile:
    try:
        cap = capacity_at_slo(doc, slo)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, ZeroDivisionError):
        raise ProfileError(f"capacity profile {shown(where)}: report.json steps are garbled") from None
    if cap.concurrency < 1:
        raise ProfileError(f"capacity profile {shown(where)}: no step of the ramp met the SLO ({slo.describe()})")
    conc, rps, tps = _figures(where, "the step at SLO", cap.concurrency, cap.requests_per_second, cap.tokens_per_second)
    prompt, output = workload_means(doc.get("workload"), where)
    return Profile(
        where,
        "ramp report.json",
        conc,
        rps,
        tps,
        _measured_at(mtime, doc.get("generated_at")),
        fpr.parse(doc.get("fingerprint"), where),
        prompt,
        output,
    )


__all__ = [
    "MAX_BYTES",
    "Profile",
    "ProfileError",
    "ProfileFile",
    "load_profile",
    "parse_profile",
    "read_file",
    "read_json",
    "workload_means",
]
