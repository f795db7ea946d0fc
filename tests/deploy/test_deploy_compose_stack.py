"""The demo services of docker-compose.yml, run the way the compose file runs them but as
local processes (no Docker engine here): the simulator, the load script and the exporter
with the compose config, service names replaced by 127.0.0.1 ports. Proves the three
commands and the config file work together: every source of the exporter comes up and
requests finish."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from deploy_helpers import ROOT, binds, compose_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def _value(text: str, pattern: str) -> float:
    total = 0.0
    for m in re.finditer(rf"^{pattern}(?:\{{[^}}]*\}})? (\S+)$", text, re.M):
        total += float(m.group(1))
    return total


def test_demo_services_work_together(tmp_path: Path) -> None:
    services: dict[str, Any] = compose_config()["services"]
    sim_port, exp_port = _free_port(), _free_port()
    local = f"127.0.0.1:{sim_port}"

    def localise(argv: list[str]) -> list[str]:
        return [a.replace("0.0.0.0:8000", local).replace("simulator:8000", local) for a in argv]

    # the exporter's mounted config, with the service name replaced
    (config_target, config_source), = binds(services["exporter"]).items()
    config = tmp_path / "exporter.yml"
    config.write_text(config_source.read_text().replace("simulator:8000", local))
    exporter_argv = [a.replace(config_target, str(config)) for a in localise(services["exporter"]["command"])]

    procs: list[subprocess.Popen[bytes]] = []
    logs = {name: (tmp_path / f"{name}.log").open("wb") for name in ("simulator", "exporter", "load")}
    try:
        procs.append(subprocess.Popen([sys.executable, "-m", "exporter", *localise(services["simulator"]["command"])],
                                      cwd=ROOT, stdout=logs["simulator"], stderr=subprocess.STDOUT))
        procs.append(subprocess.Popen([sys.executable, "-m", "exporter", *exporter_argv, "--listen-address", f"127.0.0.1:{exp_port}"],
                                      cwd=ROOT, stdout=logs["exporter"], stderr=subprocess.STDOUT))
        load_script = binds(services["load"])[services["load"]["entrypoint"][1]]
        procs.append(subprocess.Popen([sys.executable, str(load_script), *localise(services["load"]["command"]), "--duration", "60", "--concurrency", "4"],
                                      stdout=logs["load"], stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            time.sleep(1)
            try:
                text = _metrics(exp_port)
            except OSError:
                continue
            up = {m.group(1): float(m.group(2)) for m in re.finditer(r'^llm_exporter_source_up\{source="([^"]+)"\} (\S+)$', text, re.M)}
            if (
                up.get("gpu") == 1 and up.get("engine:simulator") == 1 and up.get("process:simulator") == 1
                and _value(text, "llm_requests_finished_total") > 0
            ):
                break
        else:
            for f in logs.values():
                f.flush()
            raise AssertionError(
                "the demo services did not come up together:\n"
                + "\n".join(f"--- {n}\n{(tmp_path / f'{n}.log').read_text()[-1500:]}" for n in logs)
                + f"\n--- /metrics\n{text[-3000:]}"
            )
        assert _value(text, "llm_gpu_sm_active_ratio") > 0, "the simulated GPU reports work under load"
        assert all(p.poll() is None for p in procs), "a service exited"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs.values():
            f.close()
