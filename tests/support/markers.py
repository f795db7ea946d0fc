"""``external`` where a test's own file does not write it: found from what the test needs.

Why a rule and not only decorators: some files are other people's (tests/monitoring,
tests/deploy/test_deploy_helm*.py, tests/integration/test_vllm.py) and new tests
there should be marked without anyone remembering to. Each rule is exact for
what it looks at:

* every test under tests/integration/ starts vLLM or llama.cpp;
* a fixture decorated ``@external_fixture`` runs a tool (the compose fixtures call docker-compose);
* a ``skipif`` whose reason names a tool is the guard of a test that runs it;
* a test or one of its fixtures whose own code holds a program's name as a whole string
  (``run("promtool", ...)``, ``tool("amtool")``, ``shutil.which("promtool")``) or a real
  engine's set-up script (``run_setup("setup_llamacpp.sh", ...)``) starts that program.
  Only names that mean nothing else count (``vllm`` and ``prometheus`` are also label
  values and datasource types; the rules above catch the tests that start those).
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])

#: the programs ``external`` stands for (pyproject.toml's marker line names them)
EXTERNAL_TOOLS = frozenset(
    {
        "promtool",
        "amtool",
        "prometheus",
        "alertmanager",
        "prometheus-alertmanager",
        "chromium",
        "chromium-browser",
        "docker-compose",
        "helm",
        "vllm",
        "llama-server",
    }
)
#: names that, as a whole string in a test's code, can only be the program it starts
PROGRAM_NAMES = frozenset(
    {
        "promtool",
        "amtool",
        "prometheus-alertmanager",
        "chromium",
        "chromium-browser",
        "docker-compose",
        "llama-server",
        "setup_vllm.sh",
        "setup_llamacpp.sh",
    }
)
INTEGRATION_DIR = Path(__file__).resolve().parents[1] / "integration"
_ATTR = "_runs_external_tool"


def external_fixture(func: F) -> F:
    """Put under ``@pytest.fixture``: every test using this fixture is marked ``external``."""
    setattr(func, _ATTR, True)
    return func


def _constants(code: types.CodeType) -> Iterator[object]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _constants(const)
        else:
            yield const


def why_external(item: pytest.Item) -> str | None:
    """The rule that makes ``item`` external, or None."""
    if INTEGRATION_DIR in Path(str(item.path)).parents:
        return "under tests/integration/"
    info = getattr(item, "_fixtureinfo", None)
    names: list[str] = getattr(item, "fixturenames", [])  # a pytest.Function's (a plain Item has none)
    fixtures = [fd.func for name in names for fd in (info.name2fixturedefs.get(name, ()) if info else ())]
    for func in fixtures:
        if getattr(func, _ATTR, False):
            return f"fixture {func.__name__}"
    for mark in item.iter_markers("skipif"):
        named = EXTERNAL_TOOLS & set(re.findall(r"[\w-]+", str(mark.kwargs.get("reason", ""))))
        if named:
            return f"skipif naming {sorted(named)[0]}"
    for func in [getattr(item, "function", None), *fixtures]:
        code = getattr(func, "__code__", None)
        programs = PROGRAM_NAMES & {c for c in _constants(code) if isinstance(c, str)} if code is not None else set()
        if programs:
            return f"{func.__name__} runs {sorted(programs)[0]}"
    return None


def mark_external(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("external") is None and why_external(item):
            item.add_marker(pytest.mark.external)
