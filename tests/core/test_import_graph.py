"""No import circles: the simulator's and the demo's modules import each other one way only.

An AST pass over every import statement (tests/support/imports.py), so an import inside a
function or under ``TYPE_CHECKING`` counts: hiding a circle from the interpreter does not
untie it. The whole house is checked too; until config.py's circle is broken (issue 24,
item 1) the only circle allowed is the one through ``exporter.config``, and
``WHOLE_HOUSE_HAS_NO_CIRCLE`` switches on the full check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.imports import circles, describe, import_graph, within

#: True once config.py's circle is broken: then no module of exporter/ may sit on a circle
WHOLE_HOUSE_HAS_NO_CIRCLE = False
#: the circle still open while the switch above is off
OPEN_CIRCLE_THROUGH = "exporter.config"


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


def test_the_house_has_no_circle_but_the_open_one(graph: dict[str, set[str]]) -> None:
    if WHOLE_HOUSE_HAS_NO_CIRCLE:
        assert_the_whole_house_has_no_circle(graph)
    else:
        found = [c for c in circles(graph) if OPEN_CIRCLE_THROUGH not in c]
        assert found == [], describe(graph, found)


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
