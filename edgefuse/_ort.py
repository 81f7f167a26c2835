"""ONNX Runtime's exception classes, for the places that turn its refusals into edgefuse errors.

Why a helper: ONNX Runtime raises classes from its pybind module that derive from Exception
directly, with no common base, and catching Exception instead would swallow edgefuse's own bugs.
"""

from __future__ import annotations


def ort_errors() -> tuple[type[BaseException], ...]:
    """Every exception class ONNX Runtime's Python binding defines (imported on first use)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: PLC0415

    return tuple(
        value
        for value in vars(state).values()
        if isinstance(value, type) and issubclass(value, Exception)
    )
