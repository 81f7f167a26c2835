"""YAML to plain data plus where every key and value sits in the file (line and column).

Why not ``yaml.safe_load``: a schema error names a path (``models[0].precision``), but a person
fixes a file at a line. PyYAML's ``compose`` keeps each node's start mark; constructing the data
from the node tree ourselves records, per path, where the key and the value start. It also
refuses what ``safe_load`` silently accepts: a key written twice (the second quietly wins).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

Path_ = tuple[str | int, ...]


@dataclasses.dataclass(frozen=True)
class Position:
    """1-based line and column."""

    line: int
    column: int

    @classmethod
    def of(cls, node: yaml.Node) -> Position:
        return cls(node.start_mark.line + 1, node.start_mark.column + 1)


@dataclasses.dataclass
class Located:
    """The data, and where each path's value (``values``) and mapping key (``keys``) start."""

    data: Any
    values: dict[Path_, Position]
    keys: dict[Path_, Position]
    duplicates: list[tuple[Path_, Position, Position]]  # (path, first, again)

    def value_at(self, path: Path_) -> Position:
        """The position of ``path``'s value, else of its nearest ancestor that has one."""
        for depth in range(len(path), -1, -1):
            found = self.values.get(tuple(path[:depth]))
            if found is not None:
                return found
        return Position(1, 1)

    def key_at(self, path: Path_) -> Position:
        """The position of the key that introduces ``path`` (its value's, for list items)."""
        return self.keys.get(tuple(path)) or self.value_at(path)


class YamlSyntaxError(Exception):
    """The text is not YAML; ``position`` says where the parser stopped."""

    def __init__(self, problem: str, position: Position) -> None:
        super().__init__(problem)
        self.problem = problem
        self.position = position


def load_located(text: str) -> Located:
    """Parse ``text`` (one YAML document) into data and positions."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        position = Position(mark.line + 1, mark.column + 1) if mark else Position(1, 1)
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlSyntaxError(problem, position) from exc
    located = Located(None, {}, {}, [])
    if root is not None:
        located.data = _build(root, (), located, yaml.constructor.SafeConstructor())
    return located


def _build(node: yaml.Node, path: Path_, located: Located,
           constructor: yaml.constructor.SafeConstructor) -> Any:
    located.values[path] = Position.of(node)
    if isinstance(node, yaml.MappingNode):
        constructor.flatten_mapping(node)  # merge keys (<<: *anchor)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                key = str(key)
            child = (*path, key)
            if key in result:
                located.duplicates.append((child, located.keys[child], Position.of(key_node)))
            located.keys[child] = Position.of(key_node)
            result[key] = _build(value_node, child, located, constructor)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, index), located, constructor)
                for index, item in enumerate(node.value)]
    return constructor.construct_object(node, deep=True)
