"""The source files a factory model (``module:callable``) is built from: part of its convert key.

Why more than the factory's own file: a factory that imports a helper module builds a different
network when the helper changes, and a key over the factory's file alone reused the stale model
(issue 27 §2). What counts, without running the user's code at key time (a cached build must not
import PyTorch just to find its key):

- a factory inside a package (``pkg.nets:build``): the whole top-level package ``pkg``, every file
  in it, data included, wherever it is found (the spec's folder first, as ``convert`` imports it,
  else the installed one);
- a top-level module beside the spec (``mynet:build``): that file and, transitively, every module
  or package of the spec's folder that it imports (``import x`` and ``from x import y``; a package
  counts whole), read from the source with ``ast``.

Names built at run time (``importlib.import_module(name)``) cannot be read from the source: the
convert stage checks what the import really loaded against this set
(``uncovered_local_modules``) and refuses to store a model whose import reached a file of the
spec's folder that the key does not cover, with a hint to import it by name.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

from edgefuse.bundle.digests import tree_files
from edgefuse.manifest import file_sha256


def factory_source_digests(source: str, directory: Path) -> dict[str, str]:
    """{path: sha256} of every file the factory ``source`` is built from (module docstring);
    paths are relative to ``directory`` where they lie in it, else absolute."""
    module = source.partition(":")[0]
    top = module.split(".")[0]
    local = _local_module(top, directory)
    if local is not None:
        return {_name(path, directory): file_sha256(path)
                for path in _local_closure(local, directory)}
    installed = _installed_location(top)
    if installed is None:
        return {}
    files = tree_files(installed) if installed.is_dir() else [installed]
    return {_name(path, directory): file_sha256(path) for path in files}


def covered_files(source: str, directory: Path) -> set[Path]:
    """The resolved paths ``factory_source_digests`` hashes (for the loaded-modules check)."""
    return {(directory / name if not Path(name).is_absolute() else Path(name)).resolve()
            for name in factory_source_digests(source, directory)}


def uncovered_local_modules(covered: set[Path], directory: Path) -> list[str]:
    """Files of ``directory``'s own modules that are loaded now but not in the key (relative)."""
    root = directory.resolve()
    return sorted(path.relative_to(root).as_posix()
                  for _, path in _local_modules(directory) if path not in covered)


def forget_local_modules(directory: Path) -> None:
    """Drop the modules loaded from ``directory``, and those of the same names loaded from
    another spec's folder, so the next import reads this folder's files as they are now, as a
    fresh ``python -m`` would (a second build in one process must not reuse them). Modules of
    the interpreter's own installation (the standard library, site-packages) are left alone."""
    installed = tuple(Path(prefix).resolve() for prefix in {sys.prefix, sys.base_prefix})
    for name, _ in _local_modules(directory):
        del sys.modules[name]
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or _local_module(name.split(".")[0], directory) is None:
            continue
        if not any(Path(file).resolve().is_relative_to(prefix) for prefix in installed):
            del sys.modules[name]
    importlib.invalidate_caches()


def _local_modules(directory: Path) -> list[tuple[str, Path]]:
    """(name, file) of the loaded modules imported from ``directory`` through ``sys.path``: the
    file's first part under it is the module's top-level name (a virtual environment kept in the
    spec's folder is not the user's code: its ``torch`` lies under ``venv/``, not ``torch/``)."""
    root = directory.resolve()
    found = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if not path.is_relative_to(root):
            continue
        first = path.relative_to(root).parts[0]
        if first.removesuffix(".py") == name.split(".")[0]:
            found.append((name, path))
    return found


def _local_module(name: str, directory: Path) -> Path | None:
    """``directory/name.py`` or the package folder ``directory/name/``, if either exists."""
    package = directory / name
    if (package / "__init__.py").is_file():
        return package
    single = directory / f"{name}.py"
    if single.is_file():
        return single
    return package if package.is_dir() and name.isidentifier() else None  # a namespace package


def _local_closure(start: Path, directory: Path) -> list[Path]:
    """``start`` (a module file or a package folder, whole) and every file of ``directory``'s
    modules that it imports, transitively."""
    seen: set[Path] = set()
    pending = [start]
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        if path.is_dir():
            pending.extend(tree_files(path))
            continue
        if path.suffix != ".py":
            continue
        for name in _imported_top_names(path):
            target = _local_module(name, directory)
            if target is not None:
                pending.append(target)
    return sorted(path for path in seen if not path.is_dir())


def _imported_top_names(path: Path) -> set[str]:
    """The top-level names ``path`` imports (relative imports resolve inside its own package,
    which is counted whole already, so they add nothing)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return set()  # the import fails at convert, with the user's own error
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _installed_location(name: str) -> Path | None:
    """Where the installed top-level module or package ``name`` lives, None if not found."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    if found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations)))
    return Path(found.origin) if found.origin and Path(found.origin).is_file() else None


def _name(path: Path, directory: Path) -> str:
    try:
        return path.relative_to(directory).as_posix()
    except ValueError:
        return str(path)
