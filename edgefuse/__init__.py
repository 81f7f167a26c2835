"""edgefuse: vision models from PyTorch/ONNX to a verified program on Ascend boards, GPUs and CPUs.

The public API is the pipeline's verbs; everything else is an implementation detail.
"""

from __future__ import annotations

__version__ = "0.1.0"

from edgefuse.convert import convert  # noqa: E402
from edgefuse.optimize import optimize  # noqa: E402
from edgefuse.quantize import quantize  # noqa: E402
from edgefuse.runtime import open_session  # noqa: E402
from edgefuse.verify import verify  # noqa: E402

__all__ = ["__version__", "convert", "open_session", "optimize", "quantize", "verify"]
