"""Checks of the arguments the public functions take, with errors that name the argument.

Why one place: the CLI passes flags straight to the API, and a value outside its range (``--samples
0``, ``--min-cosine -3``, ``threads="two"``) must stop there with a sentence naming it, not pass
silently (a gate of -3 passes everything) or fail later inside numpy or ONNX Runtime.
"""

from __future__ import annotations

import math
import numbers

from edgefuse.errors import InputError, Ref


def integer_at_least(name: str, value: object, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (bools are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _bad(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise _bad(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def number_in(name: str, value: object, low: float, high: float) -> float:
    """``value`` as a finite float in [low, high]."""
    number = _number(name, value)
    if not low <= number <= high:
        raise _bad(f"{name} must be in [{low:g}, {high:g}], got {number:g}")
    return number


def positive_number(name: str, value: object) -> float:
    """``value`` as a finite float > 0."""
    number = _number(name, value)
    if not number > 0:
        raise _bad(f"{name} must be positive, got {number:g}")
    return number


def non_negative_number(name: str, value: object) -> float:
    """``value`` as a finite float >= 0."""
    number = _number(name, value)
    if number < 0:
        raise _bad(f"{name} must be at least 0, got {number:g}")
    return number


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _bad(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    number = float(value)
    if not math.isfinite(number):
        raise _bad(f"{name} must be a finite number, got {number}")
    return number


def _bad(message: str) -> InputError:
    return InputError(message, reference=Ref.BAD_ARGUMENT)
