"""Every cause's severity ends at a named threshold, never a literal (issue 32, item 5).

Severity decides the primary among causes that explain as much (exporter/diagnosis/ranking.py),
so an unexplained end of one scale (HBM line + 0.25, 8x the PCIe line) silently weighs one cause
against another. Each end is a ``Thresholds`` field with its reason beside it and a row in
docs/diagnosis.md (tests/diagnosis/test_diagnosis_docs.py checks the rows).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from exporter.diagnosis import rules
from exporter.diagnosis import signals as s
from exporter.diagnosis.thresholds import Thresholds

RULES_PY = Path(rules.__file__)
#: a scale may start at 0 and end at 1 (a ratio's own bounds); any other number is a literal end
NATURAL = {0, 1}
BY_CAUSE = {r.cause: r for r in rules.RULES}


def _ramp_calls() -> list[ast.Call]:
    tree = ast.parse(RULES_PY.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "ramp"]


def test_no_severity_scale_ends_at_a_literal() -> None:
    calls = _ramp_calls()
    assert len(calls) > 20  # every rule's scale is read here
    literals = [
        (call.lineno, ast.unparse(arg))
        for call in calls
        for arg in call.args[1:]
        for node in ast.walk(arg)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and node.value not in NATURAL
    ]
    assert literals == [], f"rules.py lines whose scale ends at a number, not a threshold: {literals}"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("memory_bandwidth_dram_severe", 0.6),  # below its line (0.65)
        ("memory_bandwidth_dram_severe", 1.5),
        ("throttle_clock_loss_severe", 0.05),  # below 1 - throttle_clock_ratio
        ("failure_share_severe", 0.01),  # below failure_share
        ("pcie_busy_severe_factor", 1.0),
        ("latency_severe_factor", 0.5),
        ("imbalance_skew_severe_excess", 0.0),
        ("host_severity_margin", 0.95),
    ],
)
def test_a_scale_end_that_is_not_past_its_line_is_refused_naming_the_key(key: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"^diagnosis\.{key}: "):
        Thresholds.from_mapping({key: value})


def test_moving_an_end_moves_the_severity_and_the_defaults_keep_the_old_scales() -> None:
    rule = BY_CAUSE["memory_bandwidth_bound"]
    view = {s.DRAM: 0.8}
    assert rule.severity(view, Thresholds()) == pytest.approx(0.6)  # (0.8 - 0.65) / (0.9 - 0.65)
    assert rule.severity(view, Thresholds.from_mapping({"memory_bandwidth_dram_severe": 0.8})) == pytest.approx(1.0)
    skew = BY_CAUSE["gpu_imbalance"]
    assert skew.severity({s.GROUP_SKEW: 1.8}, Thresholds()) == pytest.approx(0.5)  # half way from 1.3 to 2.3
