"""No import circles in src/leased: a module never reaches, through what it imports, back to itself.

Every import counts, at the top, inside a function and under TYPE_CHECKING alike: an import moved
into a function to dodge a circle at load time still ties the two modules together, and then the
folder tree no longer shows which part stands on which.
"""

from __future__ import annotations

import ast
from pathlib import Path

from paths import SRC

SOURCE = SRC


def _modules() -> dict[str, Path]:
    found = {}
    for path in SOURCE.glob("leased/**/*.py"):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of leased that `name` imports: `from a import b` is a's submodule b if there is one."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in modules else base)
    return {target for target in targets if target in modules and target != name}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_the_package_has_no_import_circles():
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    circles = _circles(graph)
    described = ["; ".join(f"{module} imports {', '.join(sorted(graph[module] & set(circle)))}" for module in circle)
                 for circle in circles]
    assert not circles, "import circles (move what both sides need below both):\n" + "\n".join(described)


def test_a_circle_is_found_when_there_is_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
