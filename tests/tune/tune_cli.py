"""Run ``python -m exporter tune`` as a user does, read tune.json, and stop what it left running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from PIL import Image

from tests.support.ports import free_port
from tests.support.processes import ROOT


def sim_command(scenario: str, *knobs: str, port: int | None = None) -> list[str]:
    """The simulator as the engine command (its settings are its flags)."""
    where = f"127.0.0.1:{port or free_port()}"
    return [sys.executable, "-m", "exporter", "simulate", "--scenario", scenario, "--listen-address", where, *knobs]


def run_tune(out: Path, options: list[str], engine: list[str], timeout: float = 600.0) -> tuple[dict[str, Any], str, int]:
    """(tune.json, stderr, exit status); whatever the tuner left running is stopped here (its own process group)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    argv = [sys.executable, "-m", "exporter", "tune", "--out", str(out), "--no-progress", *options, "--", *engine]
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    doc: dict[str, Any] = json.loads((out / "tune.json").read_text()) if (out / "tune.json").exists() else {}
    stop_left_running(doc)
    return doc, r.stderr, r.returncode


def stop_left_running(doc: dict[str, Any]) -> None:
    left = doc.get("left_running") or {}
    pid = left.get("pid")
    if not pid:
        return
    try:
        os.killpg(int(pid), signal.SIGTERM)  # the tuner started it in a session of its own: pid == pgid
    except ProcessLookupError:
        pass


def _seconds(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def measured(doc: dict[str, Any]) -> str:
    """Every configuration's steps, one line per repeat: why a decision or a judgement went as it did, in a failure message."""
    lines = []
    configs = [("baseline", doc.get("baseline") or {})] + [(f"trial {t.get('trial')}", t) for t in doc.get("trials") or []]
    for label, cfg in configs:
        warm = cfg.get("warmup") or {}
        lines.append(f"{label}: warm-up {warm.get('requests', '-')} requests; {cfg.get('why', '')}")
        for i, run in enumerate(cfg.get("runs") or []):
            cells = []
            for st in run.get("steps") or []:
                c = st.get("client") or {}
                ttft = c.get("ttft_s") or {}
                p95, p99 = (_seconds(ttft.get(q)) for q in ("p95", "p99"))
                cells.append(f"c={st.get('concurrency')} {c.get('requests_per_s') or 0:.2f} req/s TTFT p95/p99 {p95}/{p99} s")
            lines.append(f"  run {i + 1}: " + "; ".join(cells))
    return "\n".join(lines)


def first_cap(cfg: dict[str, Any]) -> float:
    return float(cfg["capacity"]["requests_per_second"])


def check_outputs(out: Path, doc: dict[str, Any]) -> None:
    """tune.json has the contract keys of issue #21 (docs/tune.md), and the report, chart and engine log were written."""
    for key in ("baseline", "trials", "recommendation", "rollback"):
        assert key in doc
    assert set(doc["baseline"]) >= {"argv", "capacity", "knee", "primary", "runs"}
    assert set(doc["baseline"]["capacity"]) == {"concurrency", "requests_per_second", "tokens_per_second"}
    for t in doc["trials"]:
        assert set(t) >= {"stage", "group", "cause", "changes", "argv", "capacity", "knee", "primary", "accepted", "why"}
        assert all(set(c) == {"flag", "from", "to"} for c in t["changes"])
    if doc["recommendation"] is not None:
        assert set(doc["recommendation"]) >= {"argv", "changes", "gain", "primary_after"}
    assert set(doc["rollback"]) >= {"argv"}
    assert (out / "report.md").read_text().startswith("# Tuning report")
    assert "<h1>Tuning report</h1>" in (out / "report.html").read_text()
    with Image.open(out / "capacity.png") as img:
        assert img.size[0] > 100
    assert (out / "engine-baseline.log").exists()
