"""The demo services of docker-compose.yml, run the way the compose file runs them but as
local processes (no Docker engine here): the simulator, the load script and the exporter
with the compose config, service names replaced by 127.0.0.1 ports. Proves the three
commands and the config file work together: every source of the exporter comes up and
requests finish."""

from __future__ import annotations

import re
import sys
import urllib.request
from pathlib import Path
from typing import Any

from tests.deploy.deploy_helpers import binds, compose_config
from tests.support.ports import free_port
from tests.support.processes import Child
from tests.support.waiting import WaitTimeout, wait_until


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        body: bytes = resp.read()
        return body.decode()


def _value(text: str, pattern: str) -> float:
    total = 0.0
    for m in re.finditer(rf"^{pattern}(?:\{{[^}}]*\}})? (\S+)$", text, re.M):
        total += float(m.group(1))
    return total


def test_demo_services_work_together(tmp_path: Path) -> None:
    services: dict[str, Any] = compose_config()["services"]
    sim_port, exp_port = free_port(), free_port()
    local = f"127.0.0.1:{sim_port}"

    def localise(argv: list[str]) -> list[str]:
        return [a.replace("0.0.0.0:8000", local).replace("simulator:8000", local) for a in argv]

    # the exporter's mounted config, with the service name replaced
    ((config_target, config_source),) = binds(services["exporter"]).items()
    config = tmp_path / "exporter.yml"
    config.write_text(config_source.read_text().replace("simulator:8000", local))
    exporter_argv = [a.replace(config_target, str(config)) for a in localise(services["exporter"]["command"])]

    load_script = binds(services["load"])[services["load"]["entrypoint"][1]]
    children = [
        Child([sys.executable, "-m", "exporter", *localise(services["simulator"]["command"])], "simulator", log_dir=tmp_path),
        Child(
            [sys.executable, "-m", "exporter", *exporter_argv, "--listen-address", f"127.0.0.1:{exp_port}"],
            "exporter",
            log_dir=tmp_path,
        ),
        Child(
            [sys.executable, str(load_script), *localise(services["load"]["command"]), "--duration", "60", "--concurrency", "4"],
            "load",
            log_dir=tmp_path,
            cwd=None,
        ),
    ]
    last = [""]

    def together() -> bool:
        last[0] = text = _metrics(exp_port)
        up = {
            m.group(1): float(m.group(2)) for m in re.finditer(r'^llm_exporter_source_up\{source="([^"]+)"\} (\S+)$', text, re.M)
        }
        return (
            up.get("gpu") == 1
            and up.get("engine:simulator") == 1
            and up.get("process:simulator") == 1
            and _value(text, "llm_requests_finished_total") > 0
        )

    try:
        for child in children:
            child.start()
        try:
            wait_until(together, 60, "every source up and a request finished", interval=1.0)
        except WaitTimeout as err:
            raise AssertionError(
                "the demo services did not come up together:\n"
                + "\n".join(c.describe() for c in children)
                + f"\n--- /metrics\n{last[0][-3000:]}\n{err}"
            ) from None
        assert _value(last[0], "llm_gpu_sm_active_ratio") > 0, "the simulated GPU reports work under load"
        assert all(c.alive() for c in children), "a service exited"
    finally:
        for child in children:
            child.stop(grace_s=15.0)
