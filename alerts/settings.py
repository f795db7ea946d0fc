"""Loads and validates alerts/config.yaml, the one place for alert thresholds.

Why a typed loader: a typo in a threshold must fail the generator with a line
naming the key, not produce a rule file that loads but never fires.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CONFIG_PATH = HERE / "config.yaml"

_DURATION = re.compile(r"^([0-9]+)(ms|s|m|h|d|w|y)$")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}

FOR_KEYS = (
    "service_degraded",
    "bottleneck_cause",
    "kv_near_full",
    "source_down",
    "gpu_lost",
    "source_errors",
    "exporter_down",
    "source_stale",
    "engine_unresponsive",  # the canary probe's outage page (alerts/alerting.py _outage_alert)
    "capacity_headroom_low",  # issue 22: load near the measured capacity at SLO (alerts/capacity.py)
    "capacity_profile_stale",
)


class ConfigError(ValueError):
    """alerts/config.yaml is missing a key or holds a value of the wrong kind."""


def duration_seconds(text: str) -> float:
    """Seconds in a Prometheus duration such as "5m" (single unit only, as we write them)."""
    match = _DURATION.match(str(text))
    if not match:
        raise ConfigError(f"expected a Prometheus duration like 5m, got {text!r}")
    return int(match.group(1)) * _SECONDS[match.group(2)]


@dataclass(frozen=True)
class BurnRate:
    """One multiwindow pair: fire when the budget burns faster than factor over both windows."""

    name: str
    long: str
    short: str
    factor: float
    severity: str
    for_: str


@dataclass(frozen=True)
class Settings:
    """Everything the generators read from config.yaml, validated."""

    raw: dict[str, Any]
    runbook_url_base: str
    exporter_job: str
    rate_window: str
    slo_objective: float
    ttft_seconds: float
    itl_seconds: float
    burn_rates: tuple[BurnRate, ...]
    kv_near_full_ratio: float
    kv_preemptions_per_second: float
    source_errors_per_second: float
    source_stale_seconds: float
    #: LLMCapacityHeadroomLow: llm_capacity_used_ratio above this (issue 22, alerts/capacity.py)
    capacity_used_ratio: float
    for_: dict[str, str]
    #: severity label value of a page (the on-call pager) and of a ticket (the layer's team)
    severity_page: str
    severity_ticket: str
    webhook_url: str
    group_wait: str
    group_interval: str
    repeat_interval: str
    layer_receivers: dict[str, str]

    @property
    def error_budget(self) -> float:
        return round(1.0 - self.slo_objective, 10)

    @property
    def slo_windows(self) -> list[str]:
        """Every window some burn-rate pair needs, shortest first."""
        windows = {w for b in self.burn_rates for w in (b.long, b.short)}
        return sorted(windows, key=duration_seconds)

    def runbook_url(self, alert: str) -> str:
        return f"{self.runbook_url_base}#{alert.lower()}"


def _get(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"alerts/config.yaml: missing key {path!r}")
        node = node[part]
    return node


def _number(data: dict[str, Any], path: str, low: float, high: float) -> float:
    value = _get(data, path)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"alerts/config.yaml: {path} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _duration(data: dict[str, Any], path: str) -> str:
    value = str(_get(data, path))
    try:
        duration_seconds(value)
    except ConfigError as err:
        raise ConfigError(f"alerts/config.yaml: {path}: {err}") from None
    return value


def _severity(data: dict[str, Any], path: str) -> str:
    value = _get(data, path)
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", value):
        raise ConfigError(f"alerts/config.yaml: {path} must be a lower-case label value like critical, got {value!r}")
    return value


def from_dict(data: dict[str, Any]) -> Settings:
    """Validate a parsed config; raise ConfigError naming the first bad key."""
    burn = []
    for name in sorted(_get(data, "burn_rates")):
        base = f"burn_rates.{name}"
        burn.append(
            BurnRate(
                name=name,
                long=_duration(data, f"{base}.long"),
                short=_duration(data, f"{base}.short"),
                factor=_number(data, f"{base}.factor", 1, 1000),
                severity=str(_get(data, f"{base}.severity")),
                for_=_duration(data, f"{base}.for"),
            )
        )
    for b in burn:
        if duration_seconds(b.short) >= duration_seconds(b.long):
            raise ConfigError(f"alerts/config.yaml: burn_rates.{b.name}: short window must be shorter than long")
    page, ticket = _severity(data, "severity.page"), _severity(data, "severity.ticket")
    if page == ticket:
        raise ConfigError("alerts/config.yaml: severity.page and severity.ticket must differ (routing tells them apart)")
    for b in burn:
        if b.severity not in (page, ticket):
            raise ConfigError(
                f"alerts/config.yaml: burn_rates.{b.name}.severity must be severity.page or severity.ticket ({page!r} or {ticket!r})"
            )
    for_ = {key: _duration(data, f"for.{key}") for key in FOR_KEYS}
    # the page must fire no later than the per-cause ticket of the same cause, or the ticket is
    # sent before the page that mutes it arrives
    if duration_seconds(for_["service_degraded"]) > duration_seconds(for_["bottleneck_cause"]):
        raise ConfigError("alerts/config.yaml: for.service_degraded must not be longer than for.bottleneck_cause")
    if "cause_severity" in data:
        raise ConfigError(
            "alerts/config.yaml: cause_severity is gone: every per-cause alert is a ticket and "
            "LLMServiceDegraded is the one page per incident (see alerts/README.md)"
        )
    return Settings(
        raw=copy.deepcopy(data),
        runbook_url_base=str(_get(data, "runbook_url_base")).rstrip("#"),
        exporter_job=str(_get(data, "exporter_job")),
        rate_window=_duration(data, "rate_window"),
        slo_objective=_number(data, "slo.objective", 0.5, 0.99999),
        ttft_seconds=_number(data, "slo.ttft_seconds", 0.001, 3600),
        itl_seconds=_number(data, "slo.itl_seconds", 0.0001, 600),
        burn_rates=tuple(burn),
        kv_near_full_ratio=_number(data, "kv_cache.near_full_ratio", 0.01, 1),
        kv_preemptions_per_second=_number(data, "kv_cache.preemptions_per_second", 0, 1e6),
        source_errors_per_second=_number(data, "exporter.source_errors_per_second", 0, 1e6),
        source_stale_seconds=_number(data, "exporter.source_stale_seconds", 1, 86400),
        capacity_used_ratio=_number(data, "capacity.headroom_low_used_ratio", 0.05, 5),
        for_=for_,
        severity_page=page,
        severity_ticket=ticket,
        webhook_url=str(_get(data, "alertmanager.webhook_url")),
        group_wait=_duration(data, "alertmanager.group_wait"),
        group_interval=_duration(data, "alertmanager.group_interval"),
        repeat_interval=_duration(data, "alertmanager.repeat_interval"),
        layer_receivers={str(k): str(v) for k, v in _get(data, "alertmanager.layer_receivers").items()},
    )


def load(path: Path = CONFIG_PATH, for_override: str | None = None) -> Settings:
    """Read config.yaml. ``for_override`` replaces every ``for:`` (the integration test's short copy)."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping")
    if for_override is not None:
        data["for"] = {key: for_override for key in FOR_KEYS}
        for pair in data.get("burn_rates", {}).values():
            pair["for"] = for_override
    return from_dict(data)
