"""docs/diagnosis.md keeps up with the rules table and the thresholds."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from exporter.diagnosis.rules import RULES
from exporter.diagnosis.thresholds import Thresholds

DOC = (Path(__file__).resolve().parents[2] / "docs" / "diagnosis.md").read_text()


def test_every_cause_has_a_section_under_its_layer() -> None:
    sections = re.split(r"^### ", DOC, flags=re.MULTILINE)
    for rule in RULES:
        layer_section = next((s for s in sections if s.startswith(rule.layer + "\n")), "")
        assert f"**`{rule.cause}`**" in layer_section, rule.cause


def test_every_threshold_is_listed_with_its_default() -> None:
    defaults = Thresholds()
    for f in fields(Thresholds):
        row = re.search(rf"^\| `{f.name}` \| ([^|]+) \|", DOC, flags=re.MULTILINE)
        assert row, f.name
        assert float(row.group(1)) == float(getattr(defaults, f.name)), f.name
