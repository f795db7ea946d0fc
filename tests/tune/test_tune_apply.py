"""Apply mode with a fake apply script: each candidate is "deployed" by a command template, the baseline re-applied at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.tune.tune_cli import run_tune, sim_command
from tests.tune.workload import workload

pytestmark = [pytest.mark.timeout(600)]

HERE = Path(__file__).resolve().parent


def test_apply_mode_applies_the_candidate_and_reapplies_the_baseline(tmp_path: Path) -> None:
    port = free_port()
    engine = sim_command("batching_window", port=port)
    state = tmp_path / "deployed.pid"
    apply = f"{sys.executable} {HERE / 'fake_apply.py'} {state} {{args}}"
    subprocess.run([sys.executable, str(HERE / "fake_apply.py"), str(state), *engine[1:]], check=True, timeout=30)
    try:
        doc, err, rc = run_tune(
            tmp_path / "out",
            [
                "--slo-ttft",
                "500ms",
                "--trials",
                "1",
                *workload("1,2,4", 64, 32),
                "--warmup-seconds",
                "0",  # switched off: no warm-up load, none recorded
                "--engine-url",
                f"http://127.0.0.1:{port}",
                "--apply",
                apply,
            ],  # fmt: skip
            engine,
        )
        assert rc == 0, err[-3000:]
        assert doc["mode"] == "apply"
        assert doc["baseline"]["warmup"] is None and doc["trials"][0]["warmup"] is None
        first = doc["trials"][0]
        assert first["changes"][0]["flag"] == "--batch-wait-s" and first["accepted"], first["why"]
        applied = state.with_suffix(".applied").read_text().splitlines()
        # the initial deploy, the candidate with its new flag, then the baseline again
        assert len(applied) == 3, applied
        assert "--batch-wait-s 0.2" in applied[1] and "--batch-wait-s" not in applied[2]
        assert doc["left_running"]["applied"] is True and doc["rollback"]["argv"] == engine
    finally:
        if state.exists():
            try:
                os.killpg(int(state.read_text()), signal.SIGTERM)
            except ProcessLookupError:
                pass
