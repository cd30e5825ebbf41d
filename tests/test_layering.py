"""The packages' layering and the absence of import cycles, read statically from the source with ``ast``.

Layers, bottom up: ``partition`` (IR, passes, reports) < ``engine`` (running
graphs) < ``app`` (the web debugger) < ``sglens`` (the command line, the only
module that knows all three). A module may import only from its own layer or
below. Every import counts, also those inside functions (they run sooner or
later), ``if __name__ == "__main__":`` blocks included (a module run as a
program still runs them: a lower module that imports ``sglens`` there is a knot
all the same); only ``if TYPE_CHECKING:`` blocks (they never run) are left out.

Inside ``engine/``, ``engine.kernels`` is a sub-layer: kernels are functions of
arrays, so they never import the engine modules above them (the executor, the
plan, the dependency engine). And no two folders import each other, even
through different modules (``partition.report -> partition.tensorrt.groups``
beside ``partition.tensorrt.real_trt -> partition.report`` is such a circle).

An edge goes to the most specific module the import names (``from .api import
X`` -> ``partition.api``; ``from . import report`` -> ``partition.report``),
not to the parent packages Python also initialises on the way: a package's
``__init__`` re-exporting its modules is not a cycle worth breaking.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("partition", "engine", "app", "sglens")
#: a package may import the packages listed after it, never those before (sglens sits on top)
LAYER = {name: rank for rank, name in enumerate(PACKAGES)}
#: Known cycles owned by another change in flight; each entry names its owner. The integrator removes an
#: entry once the fix is merged (an entry that no longer matches a cycle fails the test, so none go stale).
KNOWN_CYCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
        # compiled modules (setup.py's extensions): named by their C file's PyInit_ function
        for path in sorted((ROOT / package).rglob("*.c")):
            for line in path.read_text().splitlines():
                if line.startswith("PyMODINIT_FUNC PyInit_"):
                    name = line.split("PyInit_", 1)[1].split("(", 1)[0]
                    found[".".join([*path.relative_to(ROOT).parent.parts, name])] = path
    return found


def _never_on_import(test: ast.expr) -> bool:
    """``TYPE_CHECKING``: a block importing the module never runs."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[tuple[str, int, list[str]]]:
    """(module, relative level, imported names) of every import that can run."""
    found: list[tuple[str, int, list[str]]] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _never_on_import(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.extend((alias.name, 0, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", node.level, [a.name for a in node.names]))
        stack.extend(ast.iter_child_nodes(node))
    return found


def _resolve(importer: str, is_package: bool, module: str, level: int) -> str:
    if level == 0:
        return module
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def import_graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        if path.suffix != ".py":  # a compiled module imports nothing of ours
            continue
        is_package = path.name == "__init__.py"
        for module, level, names in _imports(ast.parse(path.read_text(), str(path))):
            target = _resolve(name, is_package, module, level)
            for imported in names or [None]:
                full = f"{target}.{imported}" if imported else target
                dest = full if full in modules else target
                while dest not in modules and "." in dest:
                    dest = dest.rsplit(".", 1)[0]
                if dest in modules and dest != name:
                    graph.add_edge(name, dest)
    return graph


def _layer(module: str) -> int:
    return LAYER[module.split(".")[0]]


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    graph = import_graph()
    assert len(graph) > 40
    assert graph.has_edge("sglens.cli", "engine.run_cli")          # absolute
    assert graph.has_edge("partition.cli", "partition.selection")  # relative, module level
    assert graph.has_edge("engine.kernels.native", "engine.kernels._native")  # inside a function
    assert not graph.has_edge("partition.build", "partition.api")  # only under TYPE_CHECKING


def test_lower_layers_never_import_higher_ones() -> None:
    graph = import_graph()
    bad = sorted(f"{a} imports {b}" for a, b in graph.edges if _layer(b) > _layer(a))
    assert not bad, "layering broken (partition < engine < app < sglens):\n" + "\n".join(bad)


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            cycles.append(frozenset(component))
    unknown = [c for c in cycles if c not in KNOWN_CYCLES]
    stale = [c for c in KNOWN_CYCLES if c not in cycles]
    assert not stale, f"these known cycles are gone, remove them from KNOWN_CYCLES: {stale}"
    if unknown:
        path = nx.find_cycle(graph.subgraph(unknown[0]))
        shown = " -> ".join([a for a, _ in path] + [path[0][0]])
        raise AssertionError(f"{len(unknown)} import cycle(s); for example: {shown}; "
                             f"all modules on cycles: {sorted(set().union(*unknown))}")


def test_no_hidden_imports() -> None:
    """``__import__`` hides an edge from this test (the old CLI dropped whole commands that way)."""
    found = []
    for name, path in _modules().items():
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
                found.append(f"{name}:{node.lineno}")
    assert not found, f"__import__ in {found}; import the module normally"


def _unit(module: str) -> str:
    """A sub-folder (``partition.tensorrt``, ``engine.kernels``) is one unit; other modules are their own."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (len(parts) == 2 and _is_subfolder(parts)) else module


def _is_subfolder(parts: list[str]) -> bool:
    return (ROOT / parts[0] / parts[1] / "__init__.py").exists()


def test_kernels_never_import_the_engine_above_them() -> None:
    graph = import_graph()
    bad = sorted(f"{a} imports {b}" for a, b in graph.edges
                 if a.startswith("engine.kernels") and b.startswith("engine.") and not b.startswith("engine.kernels")
                 and b not in KERNEL_LAYER_BELOW)
    assert not bad, "engine/kernels imports the engine above it:\n" + "\n".join(bad)


#: engine modules below the kernels (plain helpers the kernels may use): errors and dtypes only.
KERNEL_LAYER_BELOW = {"engine.errors"}


def test_no_import_circles_between_folders() -> None:
    """With each sub-folder drawn as one node, no circle: a module that imports a sub-folder is never
    imported back by it (``report -> tensorrt.groups`` beside ``tensorrt.real_trt -> report`` is one)."""
    units = nx.DiGraph()
    for a, b in import_graph().edges:
        ua, ub = _unit(a), _unit(b)
        if ua != ub:
            units.add_edge(ua, ub, via=f"{a} -> {b}")
    circles = [c for c in nx.strongly_connected_components(units) if len(c) > 1]
    shown = [" / ".join(units.edges[e]["via"] for e in nx.find_cycle(units.subgraph(c))) for c in circles]
    assert not circles, f"folders and modules importing each other: {shown}"


def test_main_blocks_count() -> None:
    """An import under ``if __name__ == "__main__":`` is an edge (the old partition.cli shim hid one)."""
    tree = ast.parse('if __name__ == "__main__":\n    import sglens.cli\n')
    assert _imports(tree) == [("sglens.cli", 0, [])]


def test_the_subgraph_api_does_not_reach_down_to_the_pass_it_describes() -> None:
    """``partition.build`` and ``partition.state`` use ``SubgraphProperty``; the property must not
    import them back to name its default pass (the runner chooses that, issue 22)."""
    graph = import_graph()
    assert not {"partition.build", "partition.state"} & set(graph.successors("partition.api"))
