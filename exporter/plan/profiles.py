"""``--profile [MODEL=]FILE``: one replica's capacity at SLO from a tune.json or a ramp report.json.

Why a reader of our own (not the one ``serve`` uses): ``plan`` reads a saved file
once, offline, and needs only the three figures; the formats are the documented
ones of exporter/tune/record.py (``recommendation.capacity``, else
``baseline.capacity``: the measured capacity at SLO) and exporter/ramp/report.py
(the knee step, else the last step: a ramp has no SLO, and its knee is where
throughput stopped scaling; with no knee the highest step is a lower bound).
The model comes from ``MODEL=`` when given, else from the file's ramp config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.errors import UsageError
from exporter.jsonsafe import loads_bounded

#: a tune.json with every ramp record is a few MiB; anything far larger is not one
MAX_PROFILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Profile:
    """One replica's measured capacity; ``model`` None: applies to every model without its own."""

    source: str
    model: str | None
    concurrency: float
    requests_per_second: float
    tokens_per_second: float
    kind: str  # "tune recommendation", "tune baseline", "ramp knee", "ramp last step"
    #: the model was given as MODEL=FILE (else read from the file, or None)
    explicit: bool = False


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _from_tune(doc: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    for key in ("recommendation", "baseline"):
        part = doc.get(key)
        if isinstance(part, dict) and isinstance(part.get("capacity"), dict):
            return part["capacity"], f"tune {key}"
    return None


def _from_ramp(doc: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    steps = [s for s in doc.get("steps") or [] if isinstance(s, dict) and isinstance(s.get("client"), dict)]
    knee = doc.get("knee")
    chosen, kind = (knee, "ramp knee") if isinstance(knee, dict) and isinstance(knee.get("client"), dict) else (None, "")
    if chosen is None and steps:
        chosen, kind = steps[-1], "ramp last step"
    if chosen is None:
        return None
    client = chosen["client"]
    return {
        "concurrency": chosen.get("concurrency"),
        "requests_per_second": client.get("requests_per_s"),
        "tokens_per_second": client.get("output_tokens_per_s"),
    }, kind


def _model_in(doc: dict[str, Any]) -> str | None:
    """The model the ramp (or the tune's baseline ramp) was run against, when the file says."""
    configs = [doc.get("config")]
    baseline = doc.get("baseline")
    if isinstance(baseline, dict):
        configs += [r.get("config") for r in baseline.get("runs") or [] if isinstance(r, dict)]
    for config in configs:
        if isinstance(config, dict) and isinstance(config.get("model"), str) and config["model"]:
            return str(config["model"])
    return None


def parse_profile(doc: Any, source: str, model: str | None = None) -> Profile:
    """A loaded tune.json / report.json -> Profile; UsageError (one line) when it holds no usable capacity."""
    if not isinstance(doc, dict):
        raise UsageError(f"--profile {source}: expected a tune.json or a ramp report.json object")
    found = _from_tune(doc) if ("baseline" in doc or "recommendation" in doc) else _from_ramp(doc)
    if found is None:
        raise UsageError(f"--profile {source}: no capacity in it (no tune baseline/recommendation, no ramp step)")
    figures, kind = found
    rps = _number(figures.get("requests_per_second"))
    conc = _number(figures.get("concurrency"))
    tps = _number(figures.get("tokens_per_second"))
    if not rps or not conc:
        raise UsageError(f"--profile {source}: the {kind} has no positive requests/s and concurrency (nothing met the SLO?)")
    return Profile(source, model or _model_in(doc), conc, rps, tps or 0.0, kind, explicit=model is not None)


def load_profile(spec: str) -> Profile:
    """``FILE`` or ``MODEL=FILE``: read, bounded, and parse."""
    model, sep, path = spec.partition("=")
    if not sep or Path(spec).exists():
        model, path = "", spec
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise UsageError(f"--profile {path}: cannot read the file: {err.strerror or type(err).__name__}") from None
    if len(data) > MAX_PROFILE_BYTES:
        raise UsageError(f"--profile {path}: over {MAX_PROFILE_BYTES} bytes, not a tune.json or report.json")
    try:
        doc = loads_bounded(data, max_bytes=MAX_PROFILE_BYTES)
    except ValueError:
        raise UsageError(f"--profile {path}: not JSON") from None
    return parse_profile(doc, path, model or None)


def profile_for(model: str, profiles: list[Profile]) -> Profile | None:
    """The profile naming ``model``, else one naming no model, else the only one given (the last given wins).

    Why the only one too: a ramp records the name its target answered to, which
    need not be the ``model`` label Prometheus holds (a served-model-name alias);
    one profile with no ``MODEL=`` means "this is the replica's capacity".
    """
    named = [p for p in profiles if p.model == model]
    if named:
        return named[-1]
    generic = [p for p in profiles if p.model is None]
    if generic:
        return generic[-1]
    return profiles[0] if len(profiles) == 1 and not profiles[0].explicit else None


__all__ = ["MAX_PROFILE_BYTES", "Profile", "load_profile", "parse_profile", "profile_for"]
