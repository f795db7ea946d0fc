"""The README's install and its documented `serve` line, exactly as written, in a fresh clone.

A new user copies two lines from the README's "Using it": ``pip install .`` in a
virtual environment, then ``llm-layer-exporter serve --engine http://127.0.0.1:8000
--engine-process vllm``. This test takes both lines from README.md itself (so a
README edit that breaks them fails here), runs them with the venv first on PATH in
a ``git clone`` of this checkout, and checks that the program came from that
install and serves the engine's values. The engine is a local HTTP server on
127.0.0.1:8000 serving a recorded vLLM exposition; the exporter's listen address
comes from the environment (``LLM_EXPORTER_LISTEN_ADDRESS``, documented) so the
command line stays exactly the README's and the test binds 127.0.0.1 only.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support.fake_engine import FakeEngine
from tests.support.ports import free_port
from tests.support.processes import Child

pytestmark = [pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIXTURE = ROOT / "tests" / "engines" / "fixtures" / "vllm-0.33-v1-2dp.prom"
ENGINE_PORT = 8000


def readme_code_lines() -> list[str]:
    """Every line inside the README's ```sh blocks, comments stripped."""
    lines, inside = [], False
    for raw in README.read_text(encoding="utf-8").splitlines():
        if raw.startswith("```"):
            inside = raw.strip() == "```sh" if not inside else False
            continue
        if inside:
            words = shlex.split(raw, comments=True)  # the shell's own reading: comments dropped
            if words:
                lines.append(shlex.join(words))
    return lines


def readme_line(pattern: str) -> str:
    found = [line for line in readme_code_lines() if re.match(pattern, line)]
    assert found, f"README.md has no code line matching {pattern!r}"
    return found[0]


def test_readme_install_then_serve_line_as_written(tmp_path: Path) -> None:
    install = readme_line(r"pip install \.")
    serve = readme_line(r"llm-layer-exporter serve --engine http://127\.0\.0\.1:8000 ")
    assert shlex.split(serve)[:2] == ["llm-layer-exporter", "serve"]

    try:
        engine = FakeEngine(FIXTURE.read_bytes(), port=ENGINE_PORT)
    except OSError as err:
        pytest.skip(f"127.0.0.1:{ENGINE_PORT} is taken ({err.strerror}); the README's line names that port")
    clone = tmp_path / "clone"
    proc = None
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
        subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
        bindir = tmp_path / "venv" / "bin"
        env = {
            "HOME": os.environ.get("HOME", str(tmp_path)),
            "PATH": f"{bindir}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        done = subprocess.run(["bash", "-c", install], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        program = bindir / "llm-layer-exporter"
        assert program.is_file(), "the install did not put llm-layer-exporter in the venv's bin/"

        port = free_port()
        proc = Child(
            ["bash", "-c", f"exec {serve}"],
            "serve",
            env={**env, "LLM_EXPORTER_LISTEN_ADDRESS": f"127.0.0.1:{port}"},
            inherit_env=False,
            cwd=tmp_path,
            log_dir=tmp_path,
            group=True,
            grace_s=15.0,
        ).start()

        def vllm_values() -> str | None:
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            return text if "llm_engine_info{" in text and 'engine="vllm"' in text else None

        text = proc.wait_ready(vllm_values, 60, "vLLM values on /metrics", interval=0.5)
        assert text is not None
        assert re.search(r"llm_exporter_build_info\{", text)
        verdict = requests.get(f"http://127.0.0.1:{port}/diagnosis", timeout=5).json()
        assert verdict["schema_version"] == 2 and verdict["state"] in ("healthy", "degraded", "unknown")
    finally:
        if proc is not None:
            proc.stop()
        engine.close()


def test_the_readme_serve_lines_parse_as_real_commands() -> None:
    """Every documented `llm-layer-exporter serve` line is accepted by the real argument parser."""
    from exporter.cli import build_parser

    lines = [line for line in readme_code_lines() if line.startswith("llm-layer-exporter serve")]
    assert len(lines) >= 3  # vLLM, SGLang, llama.cpp
    for line in lines:
        argv = shlex.split(line)[1:]
        args = build_parser(argv).parse_args(argv)
        assert args.command == "serve" and args.engine, line
