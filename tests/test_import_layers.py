"""The package layout: imports only point down the layers of docs/architecture.md, no cycles.

The import graph of ``src/fedlabels`` is read with :mod:`ast`: every ``import`` and ``from
... import`` at module level and inside functions and classes, relative imports resolved, a
``from package import name`` counted as an import of the submodule when ``name`` is one.
Imports under ``if TYPE_CHECKING:`` never run: they must still point down (or sideways),
but they are not edges of the cycle check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "fedlabels"

#: the layers, top to bottom, as docs/architecture.md draws them; a module may import its
#: own layer and those below it. A prefix names a module and everything under it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("entry points", ("fedlabels", "fedlabels.__main__", "fedlabels.cli", "fedlabels.demo")),
    ("Python API", ("fedlabels.api", "fedlabels.testing")),
    ("tools on runs", ("fedlabels.audit", "fedlabels.reporting", "fedlabels.deploy")),
    ("engines", ("fedlabels.engines",)),
    ("run", ("fedlabels.runs",)),
    ("methods", ("fedlabels.methods",)),
    ("plug-in interface", ("fedlabels.method",)),
    ("results", ("fedlabels.results",)),
    ("data", ("fedlabels.data",)),
    ("learners", ("fedlabels.learners",)),
    ("mechanisms", ("fedlabels.privacy", "fedlabels.secure", "fedlabels.propagation",
                    "fedlabels.consensus", "fedlabels.consensus_regression",
                    "fedlabels.comm", "fedlabels.analysis")),
    ("downloads", ("fedlabels.downloads",)),
    ("core", ("fedlabels.core",)),
]


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_package)
    return out


MODULES = _modules()


def _known(name: str) -> str:
    """The longest prefix of a dotted name that is a module of the package."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str) -> list[tuple[str, bool, int]]:
    path, is_package = MODULES[module]
    return imports_in(path.read_text(), module, is_package)


def imports_in(source: str, module: str, is_package: bool) -> list[tuple[str, bool, int]]:
    """(imported module, runs at import or call time, line) for each import in ``source``."""
    here = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, runs: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, runs)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    found.append((_known(alias.name), runs, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            if source.split(".")[0] == PACKAGE:
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    found.append((full if full in MODULES else _known(source), runs,
                                  node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, runs)

    visit(ast.parse(source), True)
    return [(target, runs, line) for target, runs, line in found if target != module]


GRAPH = {module: _imports(module) for module in MODULES}


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    return rank


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    source = ("from typing import TYPE_CHECKING\n"
              "from . import loop\n"
              "from ..method import base\n"
              "if TYPE_CHECKING:\n"
              "    from fedlabels.api import run\n"
              "def f():\n"
              "    import fedlabels.core.errors\n"
              "    from fedlabels.data.federation import make_federation\n")
    assert imports_in(source, "fedlabels.runs.config", False) == [
        ("fedlabels.runs.loop", True, 2), ("fedlabels.method.base", True, 3),
        ("fedlabels.api", False, 5), ("fedlabels.core.errors", True, 7),
        ("fedlabels.data.federation", True, 8)]
    # DP-FedCT imports the empirical sensitivity inside a method
    assert ("fedlabels.methods.fedct.sensitivity", True) in {
        (t, r) for t, r, _ in GRAPH["fedlabels.methods.fedct.dp_fedct"]}
    tree = {"fedlabels.x": ["fedlabels.y"], "fedlabels.y": ["fedlabels.z"],
            "fedlabels.z": ["fedlabels.x"], "fedlabels.w": ["fedlabels.x"]}
    assert cycles(tree) == [["fedlabels.x", "fedlabels.y", "fedlabels.z"]]


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if layer_of(m) < 0] == []


def test_no_import_cycles() -> None:
    runtime = {m: sorted({t for t, runs, _ in edges if runs}) for m, edges in GRAPH.items()}
    assert cycles(runtime) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    own = layer_of(module)
    upward = [f"line {line}: {target} ({LAYERS[layer_of(target)][0]})"
              for target, _, line in GRAPH[module] if layer_of(target) < own]
    assert upward == [], f"{module} ({LAYERS[own][0]}) imports a layer above it"


def _loaded_methods(code: str) -> list[str]:
    import json
    import os
    import subprocess
    import sys

    code += ("; import sys, json; print(json.dumps(sorted(m for m in sys.modules "
             "if m.startswith('fedlabels.methods.'))))")
    path = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": path}).stdout
    return list(json.loads(out))


def test_the_plug_in_interface_loads_no_method() -> None:
    assert _loaded_methods("import fedlabels.method, fedlabels.methods") == [
        "fedlabels.methods.registry"]


def test_looking_up_a_method_loads_its_family_only() -> None:
    loaded = _loaded_methods("from fedlabels.methods import get_method; get_method('fedct')")
    assert "fedlabels.methods.fedct.fedct" in loaded
    assert not [m for m in loaded if m.startswith(("fedlabels.methods.xclp",
                                                   "fedlabels.methods.teacher_student",
                                                   "fedlabels.methods.fedct.dp_fedct"))]
