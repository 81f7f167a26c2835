"""Make ``yolox_nano_tiny.onnx``: YOLOX-Nano's own exp (``exps/default/yolox_nano.py``) narrowed
to width 1/16 and 3 classes, seeded random weights, exported as YOLOX's ``tools/export_onnx.py``
does (``replace_module(model, nn.SiLU, SiLU)``, ``head.decode_in_inference = False``, input
``images``, output ``output``, opset 11; the onnxsim step is left out: it changes no numbers).

Run with YOLOX 0.3.0's source tree (``git archive 0.3.0`` of Megvii-BaseDetection/YOLOX) and
torch; nothing downloads::

    python tests/vision/detect/exporters/make_yolox.py --yolox-src /path/to/YOLOX

YOLOX imports loguru, thop, tabulate and torchvision at module level for parts the export does
not run; they are stubbed here when absent.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from pathlib import Path

import cv2
import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
SEED = 33


def stub_missing() -> None:
    """Empty modules for YOLOX's module-level imports the export path never calls."""
    def missing(*_: object, **__: object) -> None:
        raise RuntimeError("stubbed for the fixture export")

    names = {"loguru": {"logger": types.SimpleNamespace(info=print, warning=print,
                                                        catch=lambda f: f)},
             "thop": {"profile": missing}, "tabulate": {"tabulate": missing},
             "torchvision": {}}
    for name, attributes in names.items():
        if importlib.util.find_spec(name) is None or name == "torchvision":
            module = types.ModuleType(name)
            module.__dict__.update(attributes)
            sys.modules[name] = module
    sys.modules["torchvision"].ops = types.SimpleNamespace(nms=missing, batched_nms=missing,
                                                           box_iou=missing)


def calibrate_batch_norm(model: nn.Module, size: tuple[int, int]) -> None:
    """BatchNorm statistics measured on the test photos (as YOLOX's ``preproc`` feeds them), so
    that random weights give activations that depend on the picture instead of dying out."""
    sys.path.insert(0, str(HERE))
    from yolox_reference import preproc  # noqa: PLC0415 - YOLOX's own, beside this script

    photos = sorted((HERE.parent.parent / "photos").glob("*.jpg"))
    batch = torch.from_numpy(np.stack([preproc(cv2.imread(str(p)), size)[0] for p in photos]))
    model.eval()
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a plain average over the passes
        norm.train()
    with torch.no_grad():
        model(batch)
        for conv in [*model.head.obj_preds, *model.head.cls_preds]:
            conv.bias.zero_()  # not initialize_biases' prior of 1 %: scores that vary
    model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--yolox-src", required=True, type=Path)
    parser.add_argument("--out", type=Path, default=HERE / "yolox_nano_tiny.onnx")
    args = parser.parse_args()
    stub_missing()
    sys.path.insert(0, str(args.yolox_src))
    from yolox.exp import get_exp  # noqa: PLC0415 - from the given source tree
    from yolox.models.network_blocks import SiLU  # noqa: PLC0415
    from yolox.utils import replace_module  # noqa: PLC0415

    exp = get_exp(str(args.yolox_src / "exps/default/yolox_nano.py"), None)
    exp.width, exp.num_classes = 0.0625, 3
    torch.manual_seed(SEED)
    model = exp.get_model()
    calibrate_batch_norm(model, exp.test_size)
    model = replace_module(model, nn.SiLU, SiLU)
    model.head.decode_in_inference = False
    dummy = torch.randn(1, 3, *exp.test_size)
    torch.onnx.export(model, dummy, str(args.out), input_names=["images"],
                      output_names=["output"], opset_version=11, dynamo=False)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB), input {exp.test_size}")


if __name__ == "__main__":
    main()
