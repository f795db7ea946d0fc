"""The package's import graph, read from its source, and the circles in it.

Why from the AST and not from ``sys.modules``: an import inside a function, or under
``if TYPE_CHECKING:``, hides a circle from the interpreter (it only runs later, or never)
but it still ties the two modules together for whoever changes them. So every ``import``
and ``from ... import`` statement anywhere in a module counts, relative ones resolved.

``from pkg import name`` is an edge to ``pkg.name`` when that is a module of the package,
else to ``pkg`` itself; a package's ``__init__.py`` is the node ``pkg``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

Graph = dict[str, set[str]]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root``, dotted name -> file."""
    names: dict[str, Path] = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _imported(tree: ast.AST, module: str, is_package: bool, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that the import statements of one module name."""
    found: set[str] = set()
    # a relative import counts from the module's package: the module itself when it is an __init__
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[: len(here) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {name for name in found if name in known and name != module}


def import_graph(package: str = "exporter", root: Path = ROOT) -> Graph:
    """Module -> the package's modules it imports (at module level, in functions, under TYPE_CHECKING)."""
    known = module_names(root, package)
    return {
        name: _imported(ast.parse(path.read_text(encoding="utf-8"), str(path)), name, path.name == "__init__.py", known)
        for name, path in known.items()
    }


def within(graph: Graph, prefix: str) -> Graph:
    """The part of the graph among ``prefix`` and its submodules (edges leaving it dropped)."""

    def inside(name: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return {name: {t for t in targets if inside(t)} for name, targets in graph.items() if inside(name)}


def circles(graph: Graph) -> list[list[str]]:
    """The circles: every set of modules that import each other round (strongly connected, two or
    more), each sorted, the list sorted. Tarjan's algorithm, iterative (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def one_round(graph: Graph, members: Iterable[str]) -> list[str]:
    """One concrete way round a circle (``a -> b -> ... -> a``), for a message a reader can follow."""
    group = set(members)
    first = min(group)
    # breadth-first from the first member back to it, inside the group
    paths: dict[str, list[str]] = {first: [first]}
    queue = [first]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph.get(node, ())):
            if nxt == first:
                return paths[node] + [first]
            if nxt in group and nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                queue.append(nxt)
    return sorted(group)


def describe(graph: Graph, found: list[list[str]]) -> str:
    """The circles, one a line, each with one way round it."""
    return "\n".join(f"{len(c)} modules: {' -> '.join(one_round(graph, c))}" for c in found)
