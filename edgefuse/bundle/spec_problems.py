"""One record per thing wrong with a spec, and the error that lists them all.

Why all at once: a spec with five mistakes should cost one edit round, not five; each problem
names the line and column, the path in the document, what is wrong and what to write instead.
``from_schema_error`` turns a ``jsonschema`` error into that record, using the schema's
``examples`` for the suggestion and the YAML positions for the place.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from typing import Any

import yaml

from edgefuse.bundle.yaml_positions import Located, Path_, Position
from edgefuse.errors import InputError, Ref

_JSON_TYPES = {"object": "a mapping", "array": "a list", "string": "a string",
               "integer": "an integer", "number": "a number", "boolean": "true or false",
               "null": "null"}


@dataclasses.dataclass(frozen=True)
class SpecProblem:
    position: Position
    path: Path_
    message: str
    fix: str | None = None

    def render(self, file: str) -> str:
        where = f"{file}:{self.position.line}:{self.position.column}"
        text = f"{where}: {dotted(self.path) or '(top level)'}: {self.message}"
        return text + (f"\n  fix: {self.fix}" if self.fix else "")


class SpecError(InputError):
    """The spec has problems; ``problems`` lists every one (sorted by position)."""

    reference = Ref.BAD_BUILD_SPEC.value

    def __init__(self, file: str, problems: Sequence[SpecProblem]) -> None:
        ordered = sorted(problems, key=lambda p: (p.position.line, p.position.column, p.message))
        count = len(ordered)
        super().__init__(
            f"the build spec {file} has {count} problem{'s' if count != 1 else ''}",
            context="\n".join(problem.render(file) for problem in ordered),
            hint="fix each line above; nothing was built",
        )
        self.file = file
        self.problems = tuple(ordered)


def dotted(path: Path_) -> str:
    """``models[0].precision.keep_fp32``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def inline(value: Any) -> str:
    """A value as one line of YAML: ``[1, 3, 640, 640]``, ``{conf: 0.3}``, ``auto``."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if value is None:
        return "null"
    kind = {dict: "a mapping", list: "a list", str: "a string", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)
    shown = inline(value)
    return f"{kind}" if len(shown) > 40 else f"{shown} ({kind})"


def closest(word: str, choices: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return found[0] if found else None


def _example(schema: dict[str, Any]) -> Any:
    examples = schema.get("examples")
    return examples[0] if examples else None


def _write(key: Any, schema: dict[str, Any]) -> str | None:
    example = _example(schema)
    if example is None:
        return schema.get("description")
    if not isinstance(key, str):  # a list item
        return f"write e.g. `{inline(example)}` (without quotes for a number)"
    text = f"{key}: {inline(example)}"
    note = schema.get("description")
    return f"write e.g. `{text}`" + (f" ({note})" if note else "")


def from_schema_error(error: Any, located: Located) -> list[SpecProblem]:
    """The problems one ``jsonschema.ValidationError`` stands for."""
    path = tuple(error.absolute_path)
    key = path[-1] if path else None
    kind = error.validator
    schema = error.schema if isinstance(error.schema, dict) else {}
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(schema.get("properties", {}))
        problems = []
        for extra in error.instance:
            if extra in allowed:
                continue
            near = closest(str(extra), allowed)
            fix = (f"did you mean '{near}'? write `{near}:`" if near
                   else f"remove it; allowed here: {', '.join(allowed)}")
            problems.append(SpecProblem(located.key_at((*path, extra)), (*path, extra),
                                        f"unknown key '{extra}'", fix))
        return problems
    if kind == "required" and isinstance(error.instance, dict):
        properties = schema.get("properties", {})
        return [
            SpecProblem(located.value_at(path), (*path, name), f"missing required key '{name}'",
                        _write(name, properties.get(name, {})) or f"add `{name}:`")
            for name in error.validator_value if name not in error.instance
        ]
    if "propertyNames" in tuple(error.relative_schema_path):
        name = error.instance
        return [SpecProblem(located.key_at((*path, name)), (*path, name),
                            f"'{name}' is not a valid environment variable name",
                            "use letters, digits and '_', not starting with a digit")]
    position = located.value_at(path)
    if kind == "type":
        wanted = error.validator_value if isinstance(error.validator_value, list) else [
            error.validator_value]
        words = " or ".join(_JSON_TYPES.get(t, t) for t in wanted)
        return [SpecProblem(position, path, f"must be {words}, got {describe(error.instance)}",
                            _write(key, schema))]
    if kind in ("enum", "const"):
        choices = error.validator_value if kind == "enum" else [error.validator_value]
        near = closest(str(error.instance), [str(c) for c in choices])
        options = ", ".join(inline(c) for c in choices)
        fix = (f"did you mean `{inline(near)}`? " if near else "") + (
            f"write one of: {options}" if kind == "enum" else f"write `{key}: {options}`")
        return [SpecProblem(position, path, f"{describe(error.instance)} is not allowed", fix)]
    if kind == "pattern":
        return [SpecProblem(position, path, f"{inline(error.instance)!s} has the wrong form",
                            _write(key, schema) or f"match {error.validator_value}")]
    bounds = {"minimum": "at least", "maximum": "at most", "exclusiveMinimum": "more than",
              "exclusiveMaximum": "less than"}
    if kind in bounds:
        limit = error.validator_value
        return [SpecProblem(position, path, f"must be {bounds[kind]} {limit}, got "
                            f"{inline(error.instance)}", _write(key, schema))]
    if kind in ("minItems", "maxItems", "minProperties", "minLength"):
        word = {"minItems": "at least {} item(s)", "maxItems": "at most {} item(s)",
                "minProperties": "at least {} entry(ies)",
                "minLength": "at least {} character(s)"}[kind].format(error.validator_value)
        return [SpecProblem(position, path, f"must have {word}", _write(key, schema))]
    return [SpecProblem(position, path, error.message, _write(key, schema))]
