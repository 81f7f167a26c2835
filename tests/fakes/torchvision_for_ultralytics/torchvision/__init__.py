"""A stand-in for torchvision, for running Ultralytics as the tests' reference (tests only).

Why: torchvision's wheel on the package index is a CUDA build that does not import with the CPU
torch the project uses, and Ultralytics 8.4 reads ``importlib.metadata.version("torchvision")``
when it is imported and calls ``torchvision.ops.nms`` when ``torchvision`` is in ``sys.modules``.
This package (and the dist-info beside it) exists only on the PYTHONPATH of the subprocess that
exports and predicts with Ultralytics (tests/vision/ultralytics_reference.py); its ``ops.nms`` is
Ultralytics' own ``TorchNMS.nms`` (utils/nms.py), the NMS it uses without torchvision, so the
reference stays Ultralytics' arithmetic.
"""

from torchvision import ops

__version__ = "0.28.0"
__all__ = ["ops"]
