"""edgefuse: vision models from PyTorch/ONNX to a verified program on Ascend boards, GPUs and CPUs.

The public API is the pipeline's verbs; everything else is an implementation detail.
"""

from __future__ import annotations

from edgefuse._version import __version__
from edgefuse.acl.compile.compile import compile_model as compile  # noqa: A004 - the stage's name
from edgefuse.convert import convert
from edgefuse.optimize import optimize
from edgefuse.quantize import quantize
from edgefuse.runtime import open_session
from edgefuse.verify import verify

__all__ = ["__version__", "compile", "convert", "open_session", "optimize", "quantize", "verify"]
