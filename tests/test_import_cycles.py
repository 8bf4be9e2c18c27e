"""No module of tapgate or of the bench imports itself back through others: a cycle makes the import
order decide what works, and hides which side a rule belongs to. The graph is grimp's, the library
import-linter checks the layers with; imports inside functions and under TYPE_CHECKING count too."""

from __future__ import annotations

import grimp


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """One cycle through each group of modules that import one another, as the modules it passes
    (the first again at the end); empty when there is none."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                first = min(group)
                then = min(m for m in graph.find_modules_directly_imported_by(first) if m in group)
                back = graph.find_shortest_chain(importer=then, imported=first)
                assert back is not None
                found.append([first, *back])

    for module in sorted(graph.modules):
        if module not in order:
            visit(module)
    return found


def test_no_module_of_tapgate_or_the_bench_imports_itself_back_through_another() -> None:
    # An import made only for the type checker (under TYPE_CHECKING) runs nothing: the error tree names the
    # invocation a duplicate replay found that way, and the invocations module raises those errors.
    graph = grimp.build_graph("tapgate", "bench", cache_dir=None, exclude_type_checking_imports=True)
    assert "bench.runner" in graph.modules and "tapgate.cli" in graph.modules
    assert cycles(graph) == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles(graph))


def test_the_cycle_check_names_each_cycle_it_finds_and_passes_a_chain_without_one() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [
        ("app.cli", "app.console"),
        ("app.console", "app.common"),
        ("app.common", "app.cli"),  # back to the start through two others
        ("app.runner", "app.scaleout"),
        ("app.scaleout", "app.runner"),
        ("app.report", "app.runner"),  # a module that only imports into a cycle is not in it
    ]:
        graph.add_import(importer=importer, imported=imported)
    assert cycles(graph) == [
        ["app.cli", "app.console", "app.common", "app.cli"],
        ["app.runner", "app.scaleout", "app.runner"],
    ]
    graph.remove_import(importer="app.scaleout", imported="app.runner")
    assert cycles(graph) == [["app.cli", "app.console", "app.common", "app.cli"]]
