"""Import every module of a package in this (fresh) interpreter and report import cycles.

    python tests/import_cycles.py PACKAGE [FOLDER]

Two kinds of cycle are reported, and either makes the script exit 1:

* while importing: a module of PACKAGE runs an import statement that reaches a module of PACKAGE
  still being initialised (Python marks those: ``__spec__._initializing``). Such a cycle need not
  fail: it works until one side reads a name the other has not defined yet, so the order decides.
* in the source: modules that depend on each other through any import statement, including one
  deferred into a function. Deferring an import keeps a cycle from failing, not from existing.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path
from typing import Any

PACKAGE = ""
runtime_cycles: list[tuple[str, str]] = []
_original_import = builtins.__import__


def _initialising(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _watched_import(
    name: str,
    globals: dict[str, Any] | None = None,
    locals: Any = None,
    fromlist: tuple[str, ...] | None = (),
    level: int = 0,
) -> Any:
    module = _original_import(name, globals, locals, fromlist, level)
    importer = (globals or {}).get("__name__", "")
    if importer.split(".")[0] != PACKAGE:
        return module
    absolute = importlib.util.resolve_name("." * level + name, globals.get("__package__")) if level else name
    # `from package import name`: the target is the submodule when there is one, else the package itself
    targets = [
        f"{absolute}.{item}" if f"{absolute}.{item}" in sys.modules else absolute
        for item in (fromlist or ())
        if item != "*"
    ] or [absolute]
    for target in targets:
        if target.split(".")[0] == PACKAGE and target != importer and _initialising(target):
            runtime_cycles.append((importer, target))
    return module


def source_dependencies(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the package its import statements name (anywhere in the file)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (
                    importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level
                    else node.module or ""
                )
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # `import a.b.c` names a module; trim attributes
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of two or more modules that each reach all the others (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def main(argv: list[str]) -> int:
    global PACKAGE
    PACKAGE = argv[0]
    if len(argv) > 1:
        sys.path.insert(0, argv[1])
    builtins.__import__ = _watched_import
    package = importlib.import_module(PACKAGE)
    names = [PACKAGE] + [info.name for info in pkgutil.walk_packages(package.__path__, f"{PACKAGE}.")]
    modules = {name: Path(importlib.import_module(name).__file__) for name in names}
    builtins.__import__ = _original_import
    problems = [
        f"import cycle: {importer} imports {target} while {target} is still being imported"
        for importer, target in dict.fromkeys(runtime_cycles)
    ]
    problems += [
        f"import cycle in the source: {' <-> '.join(group)}"
        for group in strongly_connected(source_dependencies(modules))
    ]
    print("\n".join(problems) or f"{len(names)} modules, no import cycle")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
