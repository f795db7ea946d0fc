"""The knob tables: complete for every cause id on every engine, each move well formed and cited in docs/tune.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.diagnosis.rules import RULES
from exporter.tune.knobs import ENGINES, GROUPS, LIMITS, OPS, TABLES, lookup

ROOT = Path(__file__).resolve().parents[2]
CAUSE_IDS = sorted({r.cause for r in RULES})


def _anchors() -> set[str]:
    text = (ROOT / "docs" / "tune.md").read_text()
    heads = re.findall(r"^#+ (.+)$", text, flags=re.M)
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-") for h in heads}


@pytest.mark.parametrize("engine", ENGINES)
def test_every_cause_has_moves_or_an_explicit_no_knob_entry(engine: str) -> None:
    table = TABLES[engine]
    missing = [c for c in CAUSE_IDS if c not in table]
    assert not missing, f"{engine}: no entry for {missing}"
    for cause in CAUSE_IDS:
        knob = table[cause]
        if knob.limit is not None:
            assert knob.limit in LIMITS and not knob.moves and knob.reason.startswith("no knob: "), (engine, cause)
        else:
            assert knob.group in GROUPS and knob.moves and knob.reason, (engine, cause)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_move_is_well_formed_and_cites_the_knob_reference(engine: str) -> None:
    anchors = _anchors()
    for cause, knob in TABLES[engine].items():
        for move in knob.moves:
            assert move.op in OPS, (engine, cause, move)
            if move.op in ("mul", "add"):
                assert isinstance(move.by, (int, float)) and (move.low is not None or move.high is not None), move
            path, _, anchor = move.doc.partition("#")
            assert (ROOT / path).is_file() and anchor in anchors, f"{engine}/{cause}: {move.flag} cites {move.doc}"


def test_the_gpu_at_its_limit_is_a_hardware_stop_everywhere() -> None:
    for engine in ENGINES:
        for cause in ("compute_bound", "memory_bandwidth_bound", "power_or_thermal_throttling"):
            assert lookup(engine, cause).knob.limit == "hardware"


def test_a_cause_the_table_does_not_know_is_a_capacity_stop_not_a_crash() -> None:
    found = lookup("vllm", "a_cause_added_later")
    assert not found.known and found.knob.limit == "capacity"
