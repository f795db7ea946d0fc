"""Apply mode: for engines the tuner cannot start (Kubernetes, a remote host), a command template applies a candidate.

Why a template: ``helm upgrade --set``, ``kubectl patch`` or an ssh line is the
user's; the tuner runs it with ``/bin/sh -c``, then waits for ``--engine-url`` to
be healthy and, where the engine shows the setting (llama.cpp's ``/props`` slot
count, the simulator's KV blocks), for the new value.

Why no value is ever pasted into the shell text: engine flags may hold ``$(...)``,
backticks, quotes or newlines, and the right quoting depends on where the user put
the placeholder. The candidate reaches the command in its environment and in a
file only; ``{args}``, ``{changes}`` and ``{env}`` are replaced, in one pass, by
references to those variables that fit their quoting context (exporter/tune/template.py):
unquoted one word per argument, inside quotes the shell-quoted text as one word.

What the command gets: ``LLM_TUNE_ARGS`` (the engine arguments without the program,
shell-quoted), ``LLM_TUNE_CHANGES`` (``flag=value`` pairs of the changes, shell-quoted),
``LLM_TUNE_ENV`` (the candidate's ``NAME=VALUE`` environment, shell-quoted),
``LLM_TUNE_ARG_<n>`` / ``LLM_TUNE_CHANGE_<n>`` / ``LLM_TUNE_ENV_<n>`` (one word each,
from 1), and ``LLM_TUNE_ARGS_FILE``: a JSON file (mode 0600, removed after the
command) with ``argv``, ``program``, ``args``, ``env``, ``changes`` and the shell-quoted
forms ``args_shell``, ``changes_shell``, ``env_shell``. The real values, credentials
included; the log shows the template and the candidate redacted (exporter/tune/redact.py),
then the command's output, copied in when it exits so the credentials' values can be
taken out of it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from exporter.tune import redact
from exporter.tune.argv import Change, EngineCommand
from exporter.tune.launch import wait_healthy
from exporter.tune.template import PLACEHOLDERS, expand

ARGS_FILE_VAR = "LLM_TUNE_ARGS_FILE"
#: the apply command's output kept in its log (what it prints past this is dropped, and said so)
MAX_OUTPUT_BYTES = 16 << 20


def _words(cmd: EngineCommand, changes: list[Change], hide: bool = False) -> dict[str, list[str]]:
    """Each placeholder's words: the arguments, the ``flag=value`` pairs, the ``NAME=VALUE`` assignments
    (``hide``: credentials redacted, for the log)."""
    argv, env = (redact.argv(cmd.argv), redact.env(cmd.env)) if hide else (cmd.argv, cmd.env)
    return {
        "args": list(argv[1:]),
        "changes": [
            f"{c.flag}={redact.MARK if hide and redact.is_secret(c.flag) else c.new}" for c in changes if c.new is not None
        ],
        "env": [f"{k}={v}" for k, v in env.items()],
    }


def candidate(cmd: EngineCommand, changes: list[Change]) -> dict[str, Any]:
    """What ``$LLM_TUNE_ARGS_FILE`` holds: the candidate, as lists and as shell-quoted texts (real values)."""
    words = _words(cmd, changes)
    return {
        "argv": cmd.full(),
        "program": cmd.argv[0] if cmd.argv else None,
        "args": words["args"],
        "env": dict(cmd.env),
        "changes": [c.as_dict() for c in changes],
        **{f"{name}_shell": shlex.join(items) for name, items in words.items()},
    }


def child_env(cmd: EngineCommand, changes: list[Change], args_file: Path | None = None) -> dict[str, str]:
    """The apply command's environment: the tuner's own (less any inherited ``LLM_TUNE_*``) and the candidate's variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_TUNE_")}
    for name, items in _words(cmd, changes).items():
        text_var, prefix = PLACEHOLDERS[name]
        env[text_var] = shlex.join(items)
        env.update({f"{prefix}{i}": w for i, w in enumerate(items, 1)})
    if args_file is not None:
        env[ARGS_FILE_VAR] = str(args_file)
    return env


def render(template: str, cmd: EngineCommand, changes: list[Change]) -> str:
    """The shell text run for ``cmd``: the template with its placeholders as variable references (no value in it)."""
    return expand(template, {name: len(items) for name, items in _words(cmd, changes).items()})


def _log_header(template: str, cmd: EngineCommand, changes: list[Change]) -> str:
    """The log's record of one run: the template as written, then what each placeholder stood for (redacted)."""
    lines = [f"$ {template}"] + [f"#   {{{name}}} = {shlex.join(items)}" for name, items in _words(cmd, changes, True).items()]
    return "\n".join(lines) + "\n"


def run_apply(template: str, cmd: EngineCommand, changes: list[Change], log_path: Path, timeout_s: float) -> str | None:
    """Run the filled template; None on exit status 0, else why. Its output goes to the log with credentials redacted."""
    script = render(template, cmd, changes)
    secrets = redact.values(cmd.full())
    with tempfile.TemporaryDirectory(prefix="llm-tune-") as private, open(log_path, "ab") as log:
        args_file = Path(private) / "candidate.json"
        fd = os.open(args_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(candidate(cmd, changes), fh, indent=2)
        log.write(redact.text(_log_header(template, cmd, changes), secrets).encode())
        log.flush()
        with tempfile.TemporaryFile(dir=private) as output:
            try:
                rc: int | None = subprocess.run(
                    ["/bin/sh", "-c", script],
                    env=child_env(cmd, changes, args_file),
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    timeout=timeout_s,
                ).returncode
            except subprocess.TimeoutExpired:
                rc = None
            output.seek(0)
            data = output.read(MAX_OUTPUT_BYTES + 1)
        text = redact.text(data[:MAX_OUTPUT_BYTES].decode(errors="replace"), secrets)
        log.write(text.encode())
        if len(data) > MAX_OUTPUT_BYTES:
            log.write(f"\n(output past {MAX_OUTPUT_BYTES} bytes dropped)\n".encode())
    if rc is None:
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


__all__ = ["ARGS_FILE_VAR", "candidate", "child_env", "confirm", "observed", "render", "run_apply"]
