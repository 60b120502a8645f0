"""No import circles inside greengpu: import-linter's layers contract keeps the packages in order, and
this keeps the modules within a package from importing each other round (sim/traces.py and
sim/fast_traces.py once did, through a lazy import). Imports made only for type checking
(`if TYPE_CHECKING:`) are not followed: they never run, and the scheduler's memory object
(greengpu.sched.memory) names the types of the memos it keeps for the very modules that take it."""

from __future__ import annotations

import grimp


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components of more than one module are the circles."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for imported in graph[module]:
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return circles


def test_the_finder_sees_a_circle() -> None:
    assert strongly_connected({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert strongly_connected({"a": ["b"], "b": [], "c": ["a", "b"]}) == []


def test_no_module_of_greengpu_imports_itself_round() -> None:
    imports = grimp.build_graph("greengpu", exclude_type_checking_imports=True)
    graph = {m: sorted(i for i in imports.find_modules_directly_imported_by(m) if i.startswith("greengpu"))
             for m in imports.modules}
    assert strongly_connected(graph) == []
