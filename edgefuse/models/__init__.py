"""Built-in models: real architectures with seeded weights, for tests, benchmarks and the demo.

Each factory returns the full-size model in eval mode, so it can be named on the command line:
``edgefuse convert edgefuse.models:resnet50``. Three are trained, not seeded: ``shapes_yolov8`` and
``shapes_deeplabv3plus``, the camera apps' default models (``entry.app_info()`` says how to run
them), and ``dbnet_text``, a text detector. ``CATALOGUE``/``get_entry`` describe every model
(task, input and output shapes, a ``tiny`` variant for fast tests). Importing this package does not
import torch; building a model does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgefuse.models.catalogue import CATALOGUE, ModelEntry, get_entry

if TYPE_CHECKING:
    from torch import nn

# No family module may be named like a factory below: importing ``edgefuse.models.<name>`` sets
# the package attribute ``<name>`` to the module, replacing the factory.


def resnet50() -> nn.Module:
    """torchvision-layout ResNet-50, 1x3x224x224 -> [1, 1000]."""
    return get_entry("resnet50").build()


def mobilenetv2() -> nn.Module:
    """torchvision-layout MobileNetV2, 1x3x224x224 -> [1, 1000]."""
    return get_entry("mobilenetv2").build()


def deeplabv3plus_mobilenetv2() -> nn.Module:
    """DeepLabV3+ on MobileNetV2 (output stride 16), 1x3x512x512 -> [1, 21, 512, 512]."""
    return get_entry("deeplabv3plus_mobilenetv2").build()


def deeplabv3plus_resnet50() -> nn.Module:
    """DeepLabV3+ on ResNet-50 (output stride 16), 1x3x512x512 -> [1, 21, 512, 512]."""
    return get_entry("deeplabv3plus_resnet50").build()


def yolov3() -> nn.Module:
    """YOLOv3 (Darknet-53), 1x3x416x416 -> [1, 10647, 85] decoded boxes and scores."""
    return get_entry("yolov3").build()


def yolov5s() -> nn.Module:
    """YOLOv5s (v6.0+), 1x3x640x640 -> [1, 25200, 85] decoded boxes and scores."""
    return get_entry("yolov5s").build()


def yolov8n() -> nn.Module:
    """YOLOv8n, 1x3x640x640 -> [1, 84, 8400] decoded boxes and class scores."""
    return get_entry("yolov8n").build()


def shapes_yolov8() -> nn.Module:
    """YOLOv8 (width 0.125) trained on generated shapes, 1x3x256x256 -> [1, 10, 1344]."""
    return get_entry("shapes_yolov8").build()


def shapes_deeplabv3plus() -> nn.Module:
    """DeepLabV3+ (MobileNetV2 x0.35) trained on shapes, 1x3x256x256 -> [1, 7, 256, 256]."""
    return get_entry("shapes_deeplabv3plus").build()


def dbnet_text() -> nn.Module:
    """DBNet text detector (MobileNetV2 x0.5, PP-OCR's DBFPN and DB head) trained on generated
    text, 1x3x160x160 (RGB, ImageNet mean/std) -> [1, 1, 160, 160] text probability."""
    return get_entry("dbnet_text").build()


__all__ = [
    "CATALOGUE",
    "ModelEntry",
    "dbnet_text",
    "deeplabv3plus_mobilenetv2",
    "deeplabv3plus_resnet50",
    "get_entry",
    "mobilenetv2",
    "resnet50",
    "shapes_deeplabv3plus",
    "shapes_yolov8",
    "yolov3",
    "yolov5s",
    "yolov8n",
]
