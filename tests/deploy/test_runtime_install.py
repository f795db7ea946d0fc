"""Issue #14's proof: ``pip install .`` is the runtime alone, ``pip install '.[tools]'`` adds the tools.

In a fresh virtual environment (no system site-packages), from a copy of this
working tree (pyproject.toml, README.md, exporter/; the checkout is not on the
path): ``pip install .`` brings none of rich, httpx, matplotlib; ``llm-layer-exporter
serve`` from it serves /metrics, ``diagnose`` reads it, and ``demo`` says in one line
that it needs the tools extra. Then ``pip install '.[tools]'`` into the same venv
brings the three and the ``demo``, ``simulate``, ``ramp`` and ``report`` commands.

Needs PyPI (the dependencies), as scripts/bootstrap.sh does; pip's cache keeps a
second run short.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support.ports import free_port
from tests.support.processes import Child

pytestmark = [pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("rich", "httpx", "matplotlib")
TOOL_COMMANDS = ("demo", "simulate", "ramp", "report")
HINT = "needs the tools extra: pip install 'llm-layer-exporter[tools]'"
#: what pip may need from this environment: its cache (HOME), its settings, a proxy
PASS_ENV = (
    "HOME",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_TRUSTED_HOST",
    "PIP_CERT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
)


def _copy_tree(dest: Path) -> Path:
    """What `pip install .` reads, from the working tree (a clone would miss uncommitted work)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "exporter", dest / "exporter", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _installed(python: Path, env: dict[str, str], cwd: Path) -> set[str]:
    """Which of the tools packages the venv's interpreter can import (found, not imported)."""
    code = f"import importlib.util as u; print(' '.join(m for m in {TOOLS!r} if u.find_spec(m)))"
    done = subprocess.run([str(python), "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_pip_install_is_the_runtime_and_the_tools_extra_adds_the_tools(tmp_path: Path) -> None:
    src = _copy_tree(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bindir = venv / "bin"
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env.setdefault("HOME", str(tmp_path))
    env.update(
        PATH=f"{bindir}{os.pathsep}/usr/local/bin:/usr/bin:/bin", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_PROGRESS_BAR="off"
    )
    work = tmp_path / "work"  # neither the checkout nor the copy: the installed package only
    work.mkdir()
    pip = [str(bindir / "python"), "-m", "pip", "install", "-q"]

    # 1. the runtime
    done = _run([*pip, "."], env, src)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _installed(bindir / "python", env, work) == set(), "pip install . brought tools packages"
    shown = _run([str(bindir / "python"), "-m", "pip", "show", *TOOLS], env, work, timeout=60)
    assert shown.returncode != 0 and "not found" in shown.stderr.lower(), shown.stdout + shown.stderr

    program = str(bindir / "llm-layer-exporter")
    port = free_port()
    serve = Child(
        [program, "serve", "--gpu-source", "none", "--listen-address", f"127.0.0.1:{port}"],
        "serve",
        env=env,
        inherit_env=False,
        cwd=work,
        log_dir=tmp_path,
        grace_s=15.0,
    ).start()
    try:

        def metrics() -> str | None:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            return text if "llm_exporter_build_info{" in text else None

        serve.wait_ready(metrics, 60, "/metrics of the runtime-only install", interval=0.5)
        diagnose = _run([program, "diagnose", "--exporter", f"http://127.0.0.1:{port}"], env, work, timeout=60)
        # 3: it answered but measured nothing (no GPU source, no engine)
        assert diagnose.returncode in (0, 3), diagnose.stdout + diagnose.stderr
        assert diagnose.stdout.startswith("Service "), diagnose.stdout
    finally:
        serve.stop()
    for command in TOOL_COMMANDS:
        done = _run([program, command, "--help"], env, work, timeout=60)
        assert done.returncode == 2 and done.stdout == "", (command, done.stdout, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"llm-layer-exporter {command}: {HINT}"), line

    # 2. the tools extra, into the same venv
    done = _run([*pip, ".[tools]"], env, src)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _installed(bindir / "python", env, work) == set(TOOLS)
    for command in TOOL_COMMANDS:
        done = _run([program, command, "--help"], env, work, timeout=120)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
        assert done.stdout.startswith(f"usage: llm-layer-exporter {command}"), done.stdout[:300]
