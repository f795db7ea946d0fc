"""Apply mode: for engines the tuner cannot start (Kubernetes, a remote host), a command template applies a candidate.

Why a template: ``helm upgrade --set``, ``kubectl patch`` or an ssh line is the
user's; the tuner fills ``{args}`` (the candidate's engine arguments,
shell-quoted) and ``{changes}`` (``flag=value`` pairs), runs it, then waits for
``--engine-url`` to be healthy and, where the engine shows the setting
(llama.cpp's ``/props`` slot count, the simulator's KV blocks), for the new value.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx

from exporter.tune.argv import Change, EngineCommand
from exporter.tune.launch import wait_healthy


def render(template: str, cmd: EngineCommand, changes: list[Change]) -> str:
    pairs = " ".join(f"{c.flag}={c.new}" for c in changes if c.new is not None)
    return template.replace("{args}", cmd.args_text()).replace("{changes}", pairs)


def run_apply(template: str, cmd: EngineCommand, changes: list[Change], log_path: Path, timeout_s: float) -> str | None:
    """Run the filled template; None on exit status 0, else why."""
    text = render(template, cmd, changes)
    with open(log_path, "ab") as log:
        log.write(f"$ {text}\n".encode())
        log.flush()
        try:
            rc = subprocess.run(text, shell=True, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            return f"the apply command did not finish within {timeout_s:g} s"
    return None if rc == 0 else f"the apply command exited with status {rc}; see {log_path.name}"


def observed(url: str, engine: str, client: httpx.Client) -> dict[str, str]:
    """The settings the running engine shows, by the flag that sets them (empty when it shows none)."""
    try:
        if engine == "llamacpp":
            props = client.get(url + "/props").json()
            return {"-np": str(props.get("total_slots"))}
        if engine == "simulator":
            state = client.get(url + "/sim/state").json()
            return {"--num-gpu-blocks": str(state["kv"]["blocks_total"])}
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    return {}


def confirm(url: str, engine: str, cmd: EngineCommand, timeout_s: float) -> tuple[str | None, str]:
    """Wait for health and for the shown settings to match ``cmd``: (why not, or None; a note)."""
    deadline = time.monotonic() + timeout_s
    why = wait_healthy(url, timeout_s)
    if why is not None:
        return f"after apply: {why}", ""
    with httpx.Client(timeout=2.0) as client:
        while True:
            shown = observed(url, engine, client)
            wanted = {f: cmd.get(f) for f in shown if cmd.has(f)}
            if all(shown[f] == v for f, v in wanted.items()):
                return None, ("confirmed " + ", ".join(f"{f}={v}" for f, v in wanted.items())) if wanted else (
                    "the engine shows none of the changed settings: applied as far as health tells"
                )
            if time.monotonic() > deadline:
                return f"after apply the engine still shows {shown}, expected {wanted}", ""
            time.sleep(0.5)


__all__ = ["confirm", "observed", "render", "run_apply"]
