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
"""

from __future__ import annotations

import calendar
import json
import math
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.capacity import fingerprint as fpr
from exporter.capacity.atslo import SLO, capacity_at_slo
from exporter.capacity.fingerprint import Fingerprint

#: the largest profile file read (a tune.json keeps every ramp record; 64 MiB is far above any)
MAX_BYTES = 64 << 20


class ProfileError(ValueError):
    """A profile that cannot be used: one line naming the file and why."""


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


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def workload_means(raw: Any) -> tuple[float | None, float | None]:
    """(prompt, output) mean tokens per request from a ``workload`` object (None where absent)."""
    if not isinstance(raw, Mapping):
        return None, None
    return _positive(raw.get("prompt_tokens_mean")), _positive(raw.get("output_tokens_mean"))


def read_json(path: str) -> dict[str, Any]:
    """The file as a JSON object; ProfileError (naming the file) when missing, too large or garbled."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ProfileError(f"capacity profile {shown(path)}: no such file") from None
    except IsADirectoryError:
        raise ProfileError(f"capacity profile {shown(path)}: is a directory, expected tune.json or report.json") from None
    except OSError as err:
        raise ProfileError(f"capacity profile {shown(path)}: cannot read it ({err.strerror or err})") from None
    except ValueError:  # a NUL byte in the path
        raise ProfileError(f"capacity profile {shown(path)}: not a usable path") from None
    if len(data) > MAX_BYTES:
        raise ProfileError(f"capacity profile {shown(path)}: larger than {MAX_BYTES >> 20} MiB, not a profile")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ProfileError(f"capacity profile {shown(path)}: not JSON ({str(err)[:120]})") from None
    if not isinstance(doc, dict):
        raise ProfileError(f"capacity profile {shown(path)}: expected a JSON object, got {type(doc).__name__}")
    return doc


def load_profile(path: str | Path, slo: SLO | None = None) -> Profile:
    """Read ``path`` (tune.json or a ramp report.json); ``slo`` judges a ramp report (default: 2 s / 200 ms)."""
    where = str(path)
    doc = read_json(where)
    try:
        if isinstance(doc.get("baseline"), dict) and "trials" in doc:
            return _from_tune(where, doc)
        if isinstance(doc.get("steps"), list):
            return _from_ramp(where, doc, slo or SLO(2.0, 0.2))
    except ProfileError:
        raise
    except ValueError as err:  # a garbled fingerprint
        raise ProfileError(f"capacity profile {shown(where)}: {str(err)[:200]}") from None
    raise ProfileError(f"capacity profile {shown(where)}: neither a tune.json (baseline, trials) nor a ramp report.json (steps)")


def _measured_at(where: str, *stamps: Any) -> float:
    """The newest timestamp given (ISO, as ramp writes them), else the file's modification time."""
    found = [t for t in (_iso(s) for s in stamps) if t is not None]
    if found:
        return max(found)
    return os.stat(where).st_mtime


def _capacity(where: str, raw: Any, what: str) -> tuple[int, float, float]:
    if not isinstance(raw, Mapping):
        raise ProfileError(f"capacity profile {shown(where)}: {what} has no capacity object")
    conc = raw.get("concurrency")
    rps, tps = raw.get("requests_per_second"), raw.get("tokens_per_second")
    if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
        raise ProfileError(
            f"capacity profile {shown(where)}: {what}: no configuration met the SLO (concurrency {str(conc)[:40]!r})"
        )
    figures: list[float] = []
    for name, v in (("requests_per_second", rps), ("tokens_per_second", tps)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ProfileError(f"capacity profile {shown(where)}: {what}: capacity.{name} is not a number >= 0 ({str(v)[:40]!r})")
        figures.append(float(v))
    return conc, figures[0], figures[1]


def _from_tune(where: str, doc: dict[str, Any]) -> Profile:
    rec = doc.get("recommendation")
    part, name = (rec, "recommendation") if isinstance(rec, dict) and rec.get("capacity") else (doc["baseline"], "baseline")
    conc, rps, tps = _capacity(where, part.get("capacity"), name)
    # the recommendation carries its own fingerprint and workload; an older file's only in the best trial
    fp = fpr.parse(part.get("fingerprint"), where)
    argv = part.get("argv")
    if fp is None and isinstance(argv, list) and all(isinstance(a, str) for a in argv) and isinstance(doc.get("engine"), str):
        # a tune.json from before fingerprints: the settings its command line writes out still compare
        fp = Fingerprint().with_argv(argv, family=doc["engine"])
    prompt, output = workload_means(part.get("workload"))
    runs = part.get("runs") or doc["baseline"].get("runs") or []
    stamps = [r.get("generated_at") for r in runs if isinstance(r, dict)]
    return Profile(
        where,
        f"tune.json {name}",
        conc,
        rps,
        tps,
        _measured_at(where, doc.get("generated_at"), *stamps),
        fp,
        prompt,
        output,
    )


def _from_ramp(where: str, doc: dict[str, Any], slo: SLO) -> Profile:
    try:
        cap = capacity_at_slo(doc, slo)
    except (KeyError, TypeError, ValueError):
        raise ProfileError(f"capacity profile {shown(where)}: report.json steps are garbled") from None
    if cap.concurrency < 1:
        raise ProfileError(f"capacity profile {shown(where)}: no step of the ramp met the SLO ({slo.describe()})")
    prompt, output = workload_means(doc.get("workload"))
    return Profile(
        where,
        "ramp report.json",
        cap.concurrency,
        cap.requests_per_second,
        cap.tokens_per_second,
        _measured_at(where, doc.get("generated_at")),
        fpr.parse(doc.get("fingerprint"), where),
        prompt,
        output,
    )


__all__ = ["MAX_BYTES", "Profile", "ProfileError", "load_profile", "read_json", "workload_means"]
