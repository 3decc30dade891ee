"""The package's import graph has no circle: each module can be read knowing only what it imports.

import-linter's layer contract (make lint) keeps the layers in order but not the modules inside
one layer, so this reads the whole graph with grimp (import-linter's own graph builder),
imports made only for type checking included: a circle hidden behind TYPE_CHECKING is still
two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import grimp


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_module_of_the_package_imports_itself_back():
    graph = grimp.build_graph("gpu_scheduler", exclude_type_checking_imports=False, cache_dir=None)
    assert len(graph.modules) > 50  # the package was found and read
    assert circles(graph) == []


def test_a_circle_is_found():
    """The check itself: two modules importing each other (the shape the scheduler package had
    between its state and its gang decisions) are reported."""
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.state", "pkg.gangs", "pkg.queue"):
        graph.add_module(module)
    graph.add_import(importer="pkg.state", imported="pkg.gangs")
    graph.add_import(importer="pkg.gangs", imported="pkg.state")
    graph.add_import(importer="pkg.state", imported="pkg.queue")
    assert circles(graph) == [["pkg.gangs", "pkg.state"]]
