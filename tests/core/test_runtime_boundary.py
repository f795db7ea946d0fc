"""The runtime apart from its tools: nothing the exporter imports needs rich, httpx or matplotlib.

``pip install llm-layer-exporter`` (and the production image) carries the runtime
only; the tools (``demo``, ``simulate``, ``ramp``, ``report``) come with the
``tools`` extra. Two checks keep it so: no runtime module names a tools package or
a tool module in any import (also inside functions, which importing cannot see),
and, in a child interpreter where importing a tools package raises ImportError
(a meta-path finder: as if the extra were not installed), every runtime module
imports, ``serve --help`` and ``diagnose --help`` work, and each tool command
says in one line that it needs the extra and exits 2.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.cli import COMMANDS
from exporter.commands.tools import HINT, TOOLS_MODULES

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "exporter"
#: the tools: packages and modules the runtime must never import (docs/ARCHITECTURE.md)
TOOL_MODULES = (
    "exporter.simulator",
    "exporter.loadgen",
    "exporter.ramp",
    "exporter.report",
    "exporter.demo",
    "exporter.commands.demo",
    "exporter.commands.simulate",
    "exporter.commands.ramp",
    "exporter.commands.report",
    "exporter.tune",
    "exporter.commands.tune",
    "exporter.commands.compare",
    "exporter.plan",
    "exporter.commands.plan",
)
#: modules that run something on import
ENTRY_MODULES = {"exporter.__main__"}
TOOL_COMMANDS = sorted(name for name, c in COMMANDS.items() if c.tool)

#: prepended to every child: importing a tools package fails as if it were not installed
BLOCK = f"""
import sys

class _BlockTools:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {TOOLS_MODULES!r}:
            raise ImportError(f"{{name}}: blocked (the tools extra is not installed)")
        return None

sys.meta_path.insert(0, _BlockTools())
"""


def _is_tool(module: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in TOOL_MODULES)


def runtime_modules() -> list[str]:
    """Every module of the package that is not a tool, by its dotted name."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if not _is_tool(name) and name not in ENTRY_MODULES:
            names.append(name)
    return names


def _imports(tree: ast.AST, module: str) -> set[str]:
    """Every module an import statement anywhere in the tree names (relative ones resolved)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(module.split(".")[: -node.level] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from exporter import demo`
    return out


def _run(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_child_cannot_import_the_tools() -> None:
    """The block itself: otherwise the checks below would pass in a venv that has the tools."""
    for module in TOOLS_MODULES:
        done = _run(f"import {module}")
        assert done.returncode == 1 and "blocked (the tools extra is not installed)" in done.stderr, module


def test_the_runtime_module_list_covers_the_runtime() -> None:
    names = set(runtime_modules())
    for expected in (
        "exporter.cli",
        "exporter.config",
        "exporter.errors",
        "exporter.commands.registry",
        "exporter.collector",
        "exporter.server",
        "exporter.commands.serve",
        "exporter.commands.diagnose",
        "exporter.commands.schema",
        "exporter.commands.tools",
        "exporter.diagnosis.client",
        "exporter.engines.source",
        "exporter.gpu",
        "exporter.process",
        "exporter.probe",
        "exporter.kubernetes",
    ):
        assert expected in names, expected
    assert not {n for n in names if _is_tool(n)}


def test_no_runtime_module_imports_a_tool_or_a_tools_package() -> None:
    offenders = []
    for name in runtime_modules():
        path = ROOT / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = ROOT / name.replace(".", "/") / "__init__.py"
        for imported in _imports(ast.parse(path.read_text(encoding="utf-8")), name):
            if imported.partition(".")[0] in TOOLS_MODULES or _is_tool(imported):
                offenders.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not offenders, "\n".join(offenders)


def test_every_runtime_module_imports_without_the_tools() -> None:
    done = _run(
        "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\nprint('imported', len(sys.argv) - 1)",
        *runtime_modules(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"imported {len(runtime_modules())}"


@pytest.mark.parametrize("command", ["serve", "diagnose", "schema"])
def test_runtime_commands_run_without_the_tools(command: str) -> None:
    done = _run("from exporter.cli import main\nraise SystemExit(main(sys.argv[1:]))", command, "--help")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"usage: llm-layer-exporter {command}")
    if command == "serve":
        assert "--no-source.gpu" in done.stdout  # the registry's switches are listed


def test_schema_command_prints_the_schema_without_the_tools() -> None:
    done = _run("from exporter.cli import main\nraise SystemExit(main(sys.argv[1:]))", "schema")
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"llm_gpu_utilization_ratio"' in done.stdout


def test_the_tool_commands_are_the_documented_ones() -> None:
    assert TOOL_COMMANDS == ["compare", "demo", "plan", "ramp", "report", "simulate", "tune"]


@pytest.mark.parametrize("command", TOOL_COMMANDS)
def test_tool_commands_without_the_tools_say_so_in_one_line(command: str) -> None:
    for argv in ([command], [command, "--help"]):
        done = _run("from exporter.cli import main\nraise SystemExit(main(sys.argv[1:]))", *argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert lines[0].startswith(f"llm-layer-exporter {command}: {HINT}"), lines[0]
        assert done.stdout == ""
