"""Profile files for the capacity tests, written the way exporter/ramp/report.py and exporter/tune/record.py write them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from exporter.ramp.report import build_report
from tests.ramp.ramp_steps import table

#: a llama.cpp-like engine configuration, as exporter/capacity/fingerprint.py stores it
FINGERPRINT: dict[str, Any] = {"engine": "llamacpp", "model": "tiny", "settings": {"slots": 4.0, "context_per_slot": 512.0}}


def ramp_report(fingerprint: dict[str, Any] | None = FINGERPRINT) -> dict[str, Any]:
    """A ramp report.json: TTFT p95 0.1 s up to concurrency 8, 3 s at 16 (past a 2 s SLO)."""
    steps = table([(1, 50.0, 0.1), (4, 180.0, 0.2), (8, 300.0, 0.5), (16, 310.0, 3.0)])
    for s in steps:
        s.exporter.counters.update({"requests_finished": 100.0, "prompt_tokens": 51_200.0, "generation_tokens": 6_400.0})
    config = {"target": "http://127.0.0.1:1", "prompt_tokens": 512, "output_tokens": 64}
    return build_report(steps, None, None, config, fingerprint=fingerprint)


def tune_doc(capacity: dict[str, Any], recommendation: dict[str, Any] | None = None, **base: Any) -> dict[str, Any]:
    """A tune.json with the keys exporter/tune/record.py writes (the ones a profile reads filled in)."""
    baseline = {"argv": ["llama-server", "-np", "4"], "capacity": capacity, "knee": None, "runs": [], **base}
    return {
        "version": 1,
        "generated_at": "2026-11-29T08:00:00Z",
        "engine": "llamacpp",
        "mode": "launch",
        "slo": {"ttft_s": 2.0, "itl_s": 0.2},
        "baseline": baseline,
        "trials": [],
        "recommendation": recommendation,
        "rollback": {"argv": baseline["argv"]},
    }


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path
