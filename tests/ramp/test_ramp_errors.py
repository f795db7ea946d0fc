"""Bad input: a clear one-line message, the report so far on disk, a non-zero exit.

Real parts: the simulator and ``serve`` as subprocesses (one stack for the
module), a server that falls over under load on a uvicorn thread, and the ramp
itself run as ``python -m exporter ramp`` the way a user runs it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from tests.ramp.falling_server import MODEL as FALLING_MODEL
from tests.ramp.falling_server import FallingServer
from tests.ramp.ramp_stack import SimStack, run_ramp_cli
from tests.support.asgi import UvicornThread
from tests.support.ports import free_port

pytestmark = [pytest.mark.timeout(180)]  # a simulator + exporter stack for the module


@pytest.fixture(scope="module")
def stack() -> Iterator[SimStack]:
    with SimStack("healthy") as s:
        yield s


def _report(directory: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((directory / "report.json").read_text())
    assert (directory / "report.md").exists() and (directory / "report.png").exists()
    return doc


def test_unreachable_target(stack: SimStack, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    r = run_ramp_cli(["--target", dead, "--exporter", stack.exp_url, "--report", str(tmp_path), "--no-progress"])
    assert r.returncode == 1, r.stderr
    assert f"target {dead} is unreachable" in r.stderr
    doc = _report(tmp_path)
    assert doc["steps"] == [] and doc["complete"] is False and "unreachable" in doc["error"]
    assert doc["knee"] is None and doc["first_saturated_layer"] is None


def test_unreachable_exporter(stack: SimStack, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    r = run_ramp_cli(["--target", stack.sim_url, "--exporter", dead, "--report", str(tmp_path), "--no-progress"])
    assert r.returncode == 1, r.stderr
    assert f"exporter {dead} is unreachable" in r.stderr
    assert _report(tmp_path)["steps"] == []


def test_model_the_server_rejects(stack: SimStack, tmp_path: Path) -> None:
    r = run_ramp_cli(
        [
            "--target",
            stack.sim_url,
            "--exporter",
            stack.exp_url,
            "--model",
            "no-such-model",
            "--report",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert r.returncode == 1, r.stderr
    # the server's own words, and what it does serve
    assert "rejected model 'no-such-model': HTTP 404: The model `no-such-model` does not exist." in r.stderr
    assert "(served: sim-llama-8b)" in r.stderr
    doc = _report(tmp_path)
    assert doc["steps"] == [] and "no-such-model" in doc["error"]


def test_step_with_only_errors_keeps_the_steps_before(stack: SimStack, tmp_path: Path) -> None:
    server = FallingServer()
    with UvicornThread(server.app) as http:
        target = f"http://127.0.0.1:{http.port}"
        r = run_ramp_cli(
            [
                "--target",
                target,
                "--exporter",
                stack.exp_url,
                "--concurrency",
                "1,2,4",
                "--step-seconds",
                "1.5",
                "--report",
                str(tmp_path),
                "--no-progress",
            ]
        )
    assert server.broken
    assert r.returncode == 1, r.stderr
    assert "step 2 (concurrency 2): all" in r.stderr and "requests failed" in r.stderr
    assert "out of memory" in r.stderr  # the server's error reaches the user
    doc = _report(tmp_path)
    assert doc["complete"] is False and doc["config"]["model"] == FALLING_MODEL
    assert [s["concurrency"] for s in doc["steps"]] == [1, 2]  # step 3 never ran
    first, failed = doc["steps"]
    assert first["client"]["requests"] > 0 and first["client"]["errors"] == 0
    assert failed["client"]["requests"] == 0 and failed["client"]["errors"] >= 1
    assert failed["client"]["error_messages"] and "503" in " ".join(failed["client"]["error_messages"])
    assert doc["totals"]["requests"] == first["client"]["requests"]


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--concurrency", "4,2"), ("--concurrency", "0,1"), ("--concurrency", "a")],
)
def test_bad_concurrency_is_a_usage_error(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["ramp", "--target", "http://x", "--exporter", "http://y", flag, value])
    assert exc.value.code == 2
    assert "--concurrency" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--step-seconds", "0"), ("--shared-prefix-ratio", "1.5"), ("--ttft-jump", "1"), ("--warmup-fraction", "1")],
)
def test_bad_values_exit_2_naming_the_flag(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ramp", "--target", "http://x", "--exporter", "http://y", flag, value]) == 2
    assert flag in capsys.readouterr().err
