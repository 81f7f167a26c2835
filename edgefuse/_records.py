"""Checks shared by the JSON/YAML records of edgefuse.vision (preprocess, app info, app config).

Why one place: every record is written by hand (a YAML config) or by another program (an ONNX's
metadata), so each must refuse an unknown key with a did-you-mean, and a value of the wrong type
with the key, the value and where it came from, in the same words.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from edgefuse.errors import InputError, Ref


def bad(message: str, where: str, reference: Ref, hint: str | None = None) -> InputError:
    return InputError(message, context=where or None, hint=hint, reference=reference)


def check_mapping(data: Any, where: str, reference: Ref) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise bad(f"expected a mapping of keys to values, got {type(data).__name__}",
                  where, reference)
    return data


def check_keys(data: Mapping[str, Any], known: Collection[str], where: str,
               reference: Ref) -> None:
    """Refuse keys outside ``known``, suggesting the closest known key: one that starts the
    other (``conf_thres`` -> ``conf``), else the closest spelling."""
    for key in data:
        if key in known:
            continue
        text = str(key)
        close = sorted((k for k in known if text.startswith(k) or k.startswith(text)),
                       key=len)[-1:] or difflib.get_close_matches(text, sorted(known), n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(known))}"
        raise bad(f"unknown key '{key}'", where, reference, hint)


def number(value: Any, key: str, where: str, reference: Ref, *, low: float | None = None,
           high: float | None = None, integer: bool = False) -> float | int:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        kind = "an integer" if integer else "a number"
        raise bad(f"'{key}' must be {kind}, got {value!r}", where, reference)
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"{'' if low is None else low}..{'' if high is None else high}"
        raise bad(f"'{key}' must be in {span}, got {value!r}", where, reference)
    return value


def choice(value: Any, key: str, choices: Sequence[str], where: str, reference: Ref) -> str:
    if value not in choices:
        raise bad(f"'{key}' must be one of {', '.join(map(repr, choices))}, got {value!r}",
                  where, reference)
    return value


def boolean(value: Any, key: str, where: str, reference: Ref) -> bool:
    if not isinstance(value, bool):
        raise bad(f"'{key}' must be true or false, got {value!r}", where, reference)
    return value


def numbers(value: Any, key: str, length: int, where: str, reference: Ref, *,
            integer: bool = False, low: float | None = None) -> tuple:
    """A list of ``length`` numbers; one number stands for all of them."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * length
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != length:
        raise bad(f"'{key}' must be a list of {length} numbers, got {value!r}", where, reference)
    return tuple(number(v, key, where, reference, integer=integer, low=low) for v in value)


def strings(value: Any, key: str, where: str, reference: Ref) -> tuple[str, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(
        isinstance(v, str) for v in value
    ):
        raise bad(f"'{key}' must be a list of strings, got {value!r}", where, reference)
    return tuple(value)


def read_yaml(path: str | os.PathLike[str], what: str, reference: Ref) -> Any:
    """The data in a YAML (or JSON) file; unreadable files and bad syntax name the line."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
        raise InputError(f"cannot read the {what} '{file}': {reason or exc}",
                         reference=reference) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)
        raise InputError(f"the {what} is not valid YAML: {getattr(exc, 'problem', exc)}",
                         context=where, reference=reference) from exc
