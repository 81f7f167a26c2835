"""The package's architecture, checked: layers only import downwards, and no import cycle exists.

Why a test: a cycle held together by a function-local import (verify <-> feeds <-> emulate once)
works until someone tidies the import to the top of the file; an upward import (a stage reaching
into the backends) works until the backend imports the stage. Both are cheap to catch here from
the source, and expensive to find later.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "edgefuse"

# Lowest first. A module belongs to the layer of its longest matching prefix; it may import its
# own layer and the layers below. Folder names carry the architecture: reference/ is host ground
# truth under every stage, acl/compile/{soc,aipp,opsupport,precision}, acl/atc and acl/ops are the
# Ascend knowledge the stages consult, acl/compile/{prepare,compile} is the compile stage,
# acl/session + fallback/ are the backends that runtime dispatches to, the records that travel
# with a model (preprocess, model_info) are contracts every stage reads, the camera library
# (vision/, one sub-package per job) sits above the runtime, and the apps and the demo are
# programs over all of it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaf", ("edgefuse._version", "edgefuse.errors", "edgefuse._deps", "edgefuse._files",
              "edgefuse._graph_walk", "edgefuse._ort", "edgefuse._quiet", "edgefuse._checks",
              "edgefuse._cv", "edgefuse._records", "edgefuse.nms")),
    ("contracts", ("edgefuse.session", "edgefuse.manifest", "edgefuse.model_source",
                   "edgefuse.preprocess", "edgefuse.model_info",
                   "edgefuse.metrics", "edgefuse.models", "edgefuse.acl.compile.aipp",
                   "edgefuse.acl.compile.soc", "edgefuse.acl.compile.opsupport",
                   "edgefuse.acl.compile.precision", "edgefuse.acl.compile.unified_buffer",
                   "edgefuse.acl.atc", "edgefuse.acl.ops",
                   "edgefuse.acl.return_codes", "edgefuse.acl.gears",
                   "edgefuse.acl.dvpp.geometry")),
    ("reference", ("edgefuse.reference",)),
    ("convert", ("edgefuse.convert",)),
    ("optimize", ("edgefuse.optimize",)),
    ("verify", ("edgefuse.verify",)),
    ("quantize", ("edgefuse.quantize",)),
    ("compile", ("edgefuse.acl.compile.prepare", "edgefuse.acl.compile.compile",
                 "edgefuse.acl.compile.int8")),
    ("backends", ("edgefuse.acl.session", "edgefuse.acl.resources", "edgefuse.acl.dvpp",
                  "edgefuse.fallback")),
    ("runtime", ("edgefuse.runtime",)),
    ("tools", ("edgefuse.benchmark", "edgefuse.doctor", "edgefuse.vision", "edgefuse.goldens",
               "edgefuse.profile")),
    ("apps", ("edgefuse.apps", "edgefuse.demo", "edgefuse.testing")),
    ("bundle", ("edgefuse.bundle",)),
    ("cli", ("edgefuse.cli", "edgefuse.__main__")),
    ("api", ("edgefuse",)),
)
# Modules that import an optional dependency (torch) at their top: they may be imported inside a
# function, once the caller knows the dependency is there.
OPTIONAL_DEPENDENCY_MODULES = ("edgefuse.models._weights",)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "tbe" in path.relative_to(PACKAGE).parts:  # TBE kernels run inside CANN, not here
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _layer(module: str) -> int:
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")
    return best


def _imports(module: str) -> list[tuple[str, bool, int]]:
    """(imported edgefuse module, at the top level?, line) for every import in ``module``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    top = {id(node) for node in tree.body}
    type_checking = {id(inner) for node in tree.body if isinstance(node, ast.If)
                     and "TYPE_CHECKING" in ast.unparse(node.test) for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in type_checking:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from package import submodule`` imports the submodule; ``from m import name``, m
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES
                     else node.module for a in node.names]
        else:
            continue
        found += [(name, id(node) in top, node.lineno) for name in names
                  if name == "edgefuse" or name.startswith("edgefuse.")]
    return found


def test_every_module_is_in_a_layer():
    for module in MODULES:
        _layer(module)


def test_no_module_imports_a_higher_layer():
    upward = [
        f"{module}:{line} ({LAYERS[_layer(module)][0]}) imports {target} "
        f"({LAYERS[_layer(target)][0]})"
        for module in MODULES
        for target, _, line in _imports(module)
        if _layer(target) > _layer(module)
    ]
    assert upward == []


def test_package_modules_are_imported_at_the_top_of_the_file():
    deferred = [
        f"{module}:{line} imports {target} inside a function"
        for module in MODULES
        for target, at_top, line in _imports(module)
        if not at_top and target not in OPTIONAL_DEPENDENCY_MODULES
    ]
    assert deferred == []


def test_the_module_level_import_graph_has_no_cycle():
    graph = {module: set() for module in MODULES}
    for module in MODULES:
        own_packages = _ancestors(module) | {module}
        for target, at_top, _ in _imports(module):
            if not at_top:
                continue
            graph[module].add(target)
            # Importing a.b.c runs a.b's __init__ first (the root's is the API layer, and the
            # packages a module sits in are already being imported when it runs).
            graph[module].update(p for p in _ancestors(target) if p not in own_packages)
    assert _cycles(graph) == []


def _ancestors(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:depth]) for depth in range(2, len(parts))}


def _imports_torch(module: str) -> bool:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.Import, ast.ImportFrom)) and "torch" in ast.unparse(node)
               for node in tree.body)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a self-loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_every_module_imports_in_a_fresh_interpreter(order):
    torch_here = importlib.util.find_spec("torch") is not None
    names = sorted(m for m in MODULES if m != "edgefuse.__main__"  # __main__ runs the CLI
                   and (torch_here or not _imports_torch(m)))
    if order == "reversed":
        names.reverse()
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    done = subprocess.run([sys.executable, "-c", script, *names], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
