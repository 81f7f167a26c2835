"""The built-in model catalogue: what each model is, what it takes and returns, how to build it.

Why a catalogue: tests, benchmarks and the demo need the same few real architectures (a ResNet,
a mobile net, two segmenters, three detector generations) without downloading weights, and each
needs a ``tiny`` miniature with the same operators, heads and output layout so the test-suite can
push every architecture through every stage in seconds.

Three entries are trained rather than seeded (``shapes_yolov8``, ``shapes_deeplabv3plus``, the
camera apps' default models, see ``shapes.py``; ``dbnet_text``, a text detector trained on generated
text by ``python -m training.text_detector``): their full variant loads the shipped weights and
ignores the seed; their tiny variant is the same architecture on a smaller input with seeded
weights, like every other tiny variant, so the suite can push them through every stage without
reading a file and with the tiny variants' promise (seeded, non-trivial BatchNorm statistics) true
for every entry.

Importing this module needs no PyTorch (the CLI lists the names on a board without it); ``build``
imports torch and the model's family module when called.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgefuse._deps import require_torch
from edgefuse.errors import InputError, Ref
from edgefuse.models import _trained, shapes

if TYPE_CHECKING:
    from torch import nn

TASKS = ("classify", "detect", "segment")
VARIANTS = ("full", "tiny")


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """One catalogue model: shapes of both variants and where its builder lives."""

    name: str
    task: str
    input_shape: tuple[int, ...]
    tiny_input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    tiny_output_shape: tuple[int, ...]
    output_layout: str
    builder: str  # "edgefuse.models.<family>:<function>"; function(variant) -> nn.Module
    weights: str | None = None  # trained full variant: a file in edgefuse/models/weights
    trainer: str | None = None  # trained: the module (and arguments) that trains the weights
    app: Callable[[], dict[str, Any]] | None = None  # trained: its application info

    def shapes(self, variant: str = "full") -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(input shape, output shape) of ``variant``."""
        _check_variant(variant)
        if variant == "tiny":
            return self.tiny_input_shape, self.tiny_output_shape
        return self.input_shape, self.output_shape

    def build(self, variant: str = "full", seed: int = 0) -> nn.Module:
        """The model as an ``nn.Module`` in eval mode, with weights determined by ``seed``.

        Weights are random but deterministic, with non-trivial BatchNorm statistics and
        activations kept O(1) (see ``edgefuse.models._weights``); the global RNG is untouched.
        A trained entry's full variant loads its shipped weights instead (``seed`` is unused).
        """
        input_shape, _ = self.shapes(variant)
        torch = require_torch(f"building the catalogue model '{self.name}'")
        # _weights imports torch at its top: it loads only once torch is known to be here.
        from edgefuse.models._weights import build_seeded  # noqa: PLC0415

        module_name, _, function = self.builder.partition(":")
        factory = getattr(importlib.import_module(module_name), function)
        if variant == "full" and self.weights is not None:
            with torch.random.fork_rng(devices=[]):  # construction draws default weights
                module = factory(variant)
            return _trained.load_trained(module, _trained.WEIGHTS_DIR / self.weights,
                                         f"python -m {self.trainer}")
        return build_seeded(lambda: factory(variant), seed=seed, calibration_shape=input_shape)

    def app_info(self) -> dict[str, Any]:
        """What an app needs to run the trained model: task, classes, pre/postprocess records.

        Stored in an ONNX file as ``metadata_props["edgefuse.app"]`` (a JSON string).
        """
        if self.app is None:
            trained = ", ".join(name for name, entry in CATALOGUE.items() if entry.app)
            raise InputError(
                f"the catalogue model '{self.name}' has no application info",
                hint=f"only the trained models carry one: {trained}",
                reference=Ref.NO_APP_INFO,
            )
        return self.app()


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise InputError(
            f"unknown model variant '{variant}'",
            hint=f"choose one of: {', '.join(VARIANTS)}",
            reference=Ref.UNKNOWN_VARIANT,
        )


def _detect_rows(size: int, per_cell: int, strides: tuple[int, ...] = (8, 16, 32)) -> int:
    return sum(per_cell * (size // s) ** 2 for s in strides)


CATALOGUE: dict[str, ModelEntry] = {
    entry.name: entry
    for entry in (
        ModelEntry(
            name="resnet50",
            task="classify",
            input_shape=(1, 3, 224, 224),
            tiny_input_shape=(1, 3, 64, 64),
            output_shape=(1, 1000),
            tiny_output_shape=(1, 1000),
            output_layout="[1,1000] logits (no softmax)",
            builder="edgefuse.models.resnet:resnet50",
        ),
        ModelEntry(
            name="mobilenetv2",
            task="classify",
            input_shape=(1, 3, 224, 224),
            tiny_input_shape=(1, 3, 64, 64),
            output_shape=(1, 1000),
            tiny_output_shape=(1, 1000),
            output_layout="[1,1000] logits (no softmax)",
            builder="edgefuse.models.mobilenet:mobilenetv2",
        ),
        ModelEntry(
            name="deeplabv3plus_mobilenetv2",
            task="segment",
            input_shape=(1, 3, 512, 512),
            tiny_input_shape=(1, 3, 128, 128),
            output_shape=(1, 21, 512, 512),
            tiny_output_shape=(1, 21, 128, 128),
            output_layout="[1,21,H,W] class logits at input resolution (no softmax)",
            builder="edgefuse.models.deeplabv3plus:deeplabv3plus_mobilenetv2",
        ),
        ModelEntry(
            name="deeplabv3plus_resnet50",
            task="segment",
            input_shape=(1, 3, 512, 512),
            tiny_input_shape=(1, 3, 128, 128),
            output_shape=(1, 21, 512, 512),
            tiny_output_shape=(1, 21, 128, 128),
            output_layout="[1,21,H,W] class logits at input resolution (no softmax)",
            builder="edgefuse.models.deeplabv3plus:deeplabv3plus_resnet50",
        ),
        ModelEntry(
            name="yolov3",
            task="detect",
            input_shape=(1, 3, 416, 416),
            tiny_input_shape=(1, 3, 96, 96),
            output_shape=(1, _detect_rows(416, 3), 85),
            tiny_output_shape=(1, _detect_rows(96, 3), 85),
            output_layout="[1,N,85] xywh(pixels)+obj+80cls, sigmoid scores, strides 32,16,8",
            builder="edgefuse.models.darknet:yolov3",
        ),
        ModelEntry(
            name="yolov5s",
            task="detect",
            input_shape=(1, 3, 640, 640),
            tiny_input_shape=(1, 3, 96, 96),
            output_shape=(1, _detect_rows(640, 3), 85),
            tiny_output_shape=(1, _detect_rows(96, 3), 85),
            output_layout="[1,N,85] xywh(pixels)+obj+80cls, sigmoid scores, strides 8,16,32",
            builder="edgefuse.models.yolov5:yolov5s",
        ),
        ModelEntry(
            name="yolov8n",
            task="detect",
            input_shape=(1, 3, 640, 640),
            tiny_input_shape=(1, 3, 96, 96),
            output_shape=(1, 84, _detect_rows(640, 1)),
            tiny_output_shape=(1, 84, _detect_rows(96, 1)),
            output_layout="[1,84,N] xywh(pixels)+80cls, sigmoid scores, strides 8,16,32",
            builder="edgefuse.models.yolov8:yolov8n",
        ),
        ModelEntry(
            name=shapes.DETECTOR,
            task="detect",
            input_shape=(1, 3, *shapes.DETECTOR_INPUT),
            tiny_input_shape=(1, 3, 96, 96),
            output_shape=(1, 4 + shapes.NUM_CLASSES, _detect_rows(shapes.DETECTOR_INPUT[0], 1)),
            tiny_output_shape=(1, 4 + shapes.NUM_CLASSES, _detect_rows(96, 1)),
            output_layout="[1,10,N] xywh(pixels)+6 shape classes, sigmoid scores, strides 8,16,32",
            builder="edgefuse.models.yolov8:yolov8_shapes",
            weights="shapes_yolov8.pt",
            trainer="training.shapes --task detect",
            app=shapes.detector_app_info,
        ),
        ModelEntry(
            name=shapes.SEGMENTER,
            task="segment",
            input_shape=(1, 3, *shapes.SEGMENTER_INPUT),
            tiny_input_shape=(1, 3, 128, 128),
            output_shape=(1, 1 + shapes.NUM_CLASSES, *shapes.SEGMENTER_INPUT),
            tiny_output_shape=(1, 1 + shapes.NUM_CLASSES, 128, 128),
            output_layout="[1,7,H,W] logits of background + 6 shape classes at input resolution",
            builder="edgefuse.models.deeplabv3plus:deeplabv3plus_shapes",
            weights="shapes_deeplabv3plus.pt",
            trainer="training.shapes --task segment",
            app=shapes.segmenter_app_info,
        ),
        ModelEntry(
            name="dbnet_text",
            task="segment",
            input_shape=(1, 3, 160, 160),
            tiny_input_shape=(1, 3, 64, 64),
            output_shape=(1, 1, 160, 160),
            tiny_output_shape=(1, 1, 64, 64),
            output_layout="[1,1,H,W] text probability (sigmoid applied) at input resolution",
            builder="edgefuse.models.dbnet:dbnet_text",
            weights="dbnet_text.pt",
            trainer="training.text_detector",
        ),
    )
}


def get_entry(name: str) -> ModelEntry:
    """The catalogue entry called ``name``; an unknown name is the user's error."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise InputError(
            f"unknown model '{name}'",
            hint=f"the catalogue has: {', '.join(CATALOGUE)}",
            reference=Ref.UNKNOWN_MODEL,
        ) from None
