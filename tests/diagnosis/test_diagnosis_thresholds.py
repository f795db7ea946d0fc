"""The `diagnosis:` config section: defaults, overrides, and one clear line per mistake."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.diagnosis.thresholds import Thresholds


def test_empty_or_missing_section_gives_defaults() -> None:
    assert Thresholds.from_mapping({}) == Thresholds() == Thresholds.from_mapping(None)
    assert Thresholds().slo_ttft_p95_seconds == 2.0 and Thresholds().slo_itl_p95_seconds == 0.2


def test_overrides_accept_yaml_text_and_dashes() -> None:
    t = Thresholds.from_mapping({"slo-ttft-p95-seconds": "1.5", "persistence_cycles": 3, "window_seconds": "30s"})
    assert (t.slo_ttft_p95_seconds, t.persistence_cycles, t.window_seconds) == (1.5, 3, 30.0)
    assert isinstance(t.persistence_cycles, int)


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"slo_ttft": 1}, "diagnosis.slo_ttft: unknown setting"),
        ({"kv_usage_full": "lots"}, "diagnosis.kv_usage_full: expected a number"),
        ({"kv_usage_full": 1.5}, "diagnosis.kv_usage_full: expected a ratio between 0 and 1"),
        ({"slo_itl_p95_seconds": 0}, "diagnosis.slo_itl_p95_seconds: expected a positive number"),
        ({"persistence_cycles": 1.5}, "diagnosis.persistence_cycles: expected an integer"),
        ({"persistence_cycles": 0}, "diagnosis.persistence_cycles: expected an integer >= 1"),
        ({"window_seconds": float("nan")}, "diagnosis.window_seconds: expected a finite number"),
        ({"warning_score": 0.9, "bottleneck_score": 0.8}, "diagnosis.warning_score: must not exceed"),
        ({"kv_usage_low": 0.95}, "diagnosis.kv_usage_low: must be below kv_usage_full"),
        ({"imbalance_skew": 0.5}, "diagnosis.imbalance_skew: expected a number >= 1"),
        ({"spec_acceptance_min": True}, "diagnosis.spec_acceptance_min: expected a number"),
        ({"failure_min_requests": -1}, "diagnosis.failure_min_requests: expected a number >= 0"),
        ({"preemption_min_count": -2}, "diagnosis.preemption_min_count: expected a number >= 0"),
        ({"throttle_min_share": 1.2}, "diagnosis.throttle_min_share: expected a ratio between 0 and 1"),
    ],
)
def test_bad_values_name_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        Thresholds.from_mapping(raw)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_not_a_mapping() -> None:
    with pytest.raises(ValueError, match="^diagnosis: expected a mapping"):
        Thresholds.from_mapping(["slo_ttft_p95_seconds"])  # type: ignore[arg-type]
