"""No import circles anywhere in exporter/ (issue 24's proof), the simulator and the demo included.

An AST pass over every import statement (tests/support/imports.py), so an import inside a
function or under ``TYPE_CHECKING`` counts: hiding a circle from the interpreter does not
untie it. The configuration was the last circle: the value parsers are a leaf
(exporter/values.py), each component owns its section, and exporter/config.py imports the
sections, never the other way round; serve hands it the `sources:` section
(exporter/commands/registry.py), which imports the sources.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.imports import circles, describe, import_graph, within

#: the wiring of serve: the command and the source registry assemble, so they alone may import the
#: assembly; every component's factory takes its own section (and what else it needs, named)
WIRING = {"exporter.commands.serve", "exporter.commands.registry"}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph("exporter")


@pytest.mark.parametrize("package", ["exporter.simulator", "exporter.demo"])
def test_no_circle_within_the_package(graph: dict[str, set[str]], package: str) -> None:
    inside = within(graph, package)
    assert len(inside) > 3, f"{package}: its modules were not found"
    found = circles(inside)
    assert found == [], describe(inside, found)


@pytest.mark.parametrize("package", ["exporter.simulator", "exporter.demo"])
def test_no_circle_of_the_house_runs_through_the_package(graph: dict[str, set[str]], package: str) -> None:
    """Nor round through a module outside it (the package -> elsewhere -> the package)."""
    found = [c for c in circles(graph) if any(m == package or m.startswith(package + ".") for m in c)]
    assert found == [], describe(graph, found)


def assert_the_whole_house_has_no_circle(graph: dict[str, set[str]]) -> None:
    """Issue 24's proof: no circle anywhere in exporter/."""
    found = circles(graph)
    assert found == [], describe(graph, found)


def test_the_whole_house_has_no_circle(graph: dict[str, set[str]]) -> None:
    assert_the_whole_house_has_no_circle(graph)


def test_the_sections_import_the_values_never_the_assembly(graph: dict[str, set[str]]) -> None:
    """exporter/config.py imports each component's section; none of them imports it back, and
    the value parsers they share import nothing of the package but the errors."""
    assert graph["exporter.values"] <= {"exporter.errors"}, "exporter/values.py is a leaf"
    sections = graph["exporter.config"] - {"exporter.errors", "exporter.values"}
    assert {"exporter.engines.config", "exporter.probe.config", "exporter.kubernetes.settings"} <= sections
    assert "exporter.commands.registry" not in sections, "the source registry is serve's, handed in as a Section"
    importers = {m for m, targets in graph.items() if "exporter.config" in targets}
    assert importers & sections == set()
    others = importers - WIRING
    assert others == set(), f"import exporter.config, not their own section: {sorted(others)}"


# --------------------------------------------------------------------------- the checker itself


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_finds_a_circle_hidden_in_a_function(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": "def later():\n    from pkg.c import x\n",
            "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\nx = 1\n",
            "pkg/d.py": "import pkg.a\n",
            "pkg/sub/__init__.py": "from .e import y\n",
            "pkg/sub/e.py": "from .. import d\ny = 2\n",
        },
    )
    graph = import_graph("pkg", tmp_path)
    assert graph["pkg.a"] == {"pkg.b"}  # a submodule named in `from pkg import b`
    assert graph["pkg.b"] == {"pkg.c"}  # inside a function
    assert graph["pkg.c"] == {"pkg.a"}  # relative, under TYPE_CHECKING
    assert graph["pkg.sub"] == {"pkg.sub.e"} and graph["pkg.sub.e"] == {"pkg.d"}
    found = circles(graph)
    assert found == [["pkg.a", "pkg.b", "pkg.c"]]
    assert describe(graph, found) == "3 modules: pkg.a -> pkg.b -> pkg.c -> pkg.a"
    assert circles(within(graph, "pkg.sub")) == []
    with pytest.raises(AssertionError, match=r"pkg\.a -> pkg\.b"):
        assert_the_whole_house_has_no_circle(graph)


def test_the_checker_passes_a_package_that_imports_one_way(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import a\n",
            "pkg/a.py": "from pkg.b import x\nimport os\n",
            "pkg/b.py": "x = 1\n",
        },
    )
    graph = import_graph("pkg", tmp_path)
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": set()}
    assert circles(graph) == []
    assert_the_whole_house_has_no_circle(graph)
