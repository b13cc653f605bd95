"""No import cycle in the package, between modules or between its sub-packages.

Imports are read from the sources with :mod:`ast`, at module level and inside functions both:
a lazy import inside a function only hides a cycle until that function runs, and two layers
that need each other (``search`` and ``runtime``, ``data.meta`` and ``data.fairseq_dir``
before issue 19) are one layer. ``if TYPE_CHECKING:`` imports count too: a type that must
come from a module that imports this one is the same knot.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import naspipe

PACKAGE = Path(naspipe.__file__).parent


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Module name -> source file, for every module of ``package`` (a package is its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a ``from X import Y`` names module ``X.Y`` if it is one)."""
    known = modules(package)
    root = package.name
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        for target in _imported(ast.parse(path.read_text(encoding="utf-8")), name, is_package):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith(root) and target != name:
                graph[name].add(target)
    return graph


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterable[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted: every import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layers(graph: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """The graph between sub-packages (``naspipe.sim``, ``naspipe.runtime``, ...; a top-level module is its own)."""
    def layer(module: str) -> str:
        return ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        out.setdefault(layer(module), set()).update(layer(t) for t in targets if layer(t) != layer(module))
    return out


def test_no_module_cycle() -> None:
    assert cycles(import_graph()) == []


def test_no_cycle_between_sub_packages() -> None:
    assert cycles(layers(import_graph())) == []


def test_the_walk_sees_lazy_relative_and_type_only_imports(tmp_path: Path) -> None:
    """The checks above can fail: a cycle through a function-level relative import is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .a import x\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from .b import y\n")
    (pkg / "sub" / "b.py").write_text("from pkg.sub import a\n")
    (pkg / "other.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.b import y\n")
    graph = import_graph(pkg)
    assert graph["pkg.sub.a"] == {"pkg.sub.b"} and graph["pkg.other"] == {"pkg.sub.b"}
    assert cycles(graph) == [["pkg.sub", "pkg.sub.a", "pkg.sub.b"]]
    assert cycles({"x": {"y"}, "y": set()}) == []
