"""convert: any supported model source in, one canonical ONNX model out.

Why one entry point for every source: later stages (optimize, quantize, compile) read only the
canonical ONNX file, so whether the model came from a file, a TorchScript archive, a factory or a
live ``nn.Module`` must not matter after this step. See ``canonical.py`` for what "canonical"
promises and ``torch_export.py`` for how the PyTorch exporter was chosen.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx

from edgefuse._files import check_outputs_spare_inputs, save_onnx
from edgefuse.convert.canonical import SUPPORTED_OPSETS, canonicalize
from edgefuse.convert.input_spec import InputShapes, normalize_shapes, resolve_unnamed
from edgefuse.convert.onnx_load import graph_input_names, load_onnx
from edgefuse.convert.torch_export import (
    EXPORTERS,
    build_from_factory,
    default_input_names,
    describe_module,
    example_inputs_from_shapes,
    export_torch,
    is_factory_spec,
    load_torchscript,
)
from edgefuse.errors import InputError, Ref

__all__ = ["EXPORTERS", "SUPPORTED_OPSETS", "convert"]

logger = logging.getLogger(__name__)

_NO_EXPORT = "none (ONNX source)"


def convert(
    source: str | os.PathLike[str] | onnx.ModelProto | Any,
    *,
    output: str | os.PathLike[str] | None = None,
    inputs: Mapping[str | None, Sequence[int]] | Sequence[int] | None = None,
    example_inputs: Any = None,
    opset: int | None = None,
    exporter: str = "auto",
) -> onnx.ModelProto:
    """Turn ``source`` into the canonical ONNX model the rest of edgefuse works on.

    ``source``: an ONNX file (external data is read), a TorchScript file, a
    ``"package.module:factory"`` string, a ``torch.nn.Module`` / ``torch.jit.ScriptModule``, or
    an ``onnx.ModelProto``. ``inputs`` maps input names to static shapes (one bare shape for a
    single input): for ONNX sources it fixes dynamic dims, for PyTorch sources it names the
    inputs and, without ``example_inputs``, gives the shapes of float32 example tensors.
    ``opset`` requests an opset in ``SUPPORTED_OPSETS``; ``exporter`` is ``auto``, ``dynamo`` or
    ``torchscript`` (PyTorch sources only). ``output``, when given, is written atomically: on
    any error nothing is written.
    """
    shapes = normalize_shapes(inputs)
    _check_options(opset, exporter)
    if output is not None:
        _check_output_path(Path(output))
        check_outputs_spare_inputs({"output": output}, {"source": source})
    loaded = _load_source(source, shapes, example_inputs, opset, exporter)
    canonical = canonicalize(
        loaded.model, input_shapes=loaded.fixed_shapes, opset=opset, provenance=loaded.provenance
    )
    if output is not None:
        save_onnx(canonical, output)
        logger.info("wrote %s", output)
    return canonical


@dataclasses.dataclass
class _Loaded:
    model: onnx.ModelProto
    provenance: dict[str, str]
    fixed_shapes: dict[str, tuple[int, ...]]  # shapes canonicalize writes into the graph inputs


def _load_source(
    source: Any, shapes: InputShapes, example_inputs: Any, opset: int | None, exporter: str
) -> _Loaded:
    if isinstance(source, onnx.ModelProto):
        return _onnx_source(source, "onnx.ModelProto (in memory)", shapes, exporter)
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if isinstance(text, str) and not os.path.exists(text) and is_factory_spec(text):
            module = build_from_factory(text)
            return _torch_source(module, text, shapes, example_inputs, opset, exporter)
        script = load_torchscript(text) if os.path.isfile(text) else None
        if script is not None:
            return _torch_source(script, str(text), shapes, example_inputs, opset, exporter)
        return _onnx_source(load_onnx(text), str(text), shapes, exporter)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(source, (torch.nn.Module, torch.jit.ScriptFunction)):
        label = describe_module(source)
        return _torch_source(source, label, shapes, example_inputs, opset, exporter)
    raise InputError(
        f"cannot convert a {type(source).__name__}",
        hint="pass a path (.onnx or TorchScript), 'package.module:factory', a torch.nn.Module "
        "or an onnx.ModelProto",
        reference=Ref.BAD_MODEL_SOURCE,
    )


def _onnx_source(
    model: onnx.ModelProto, label: str, shapes: InputShapes, exporter: str
) -> _Loaded:
    if exporter != "auto":
        logger.info("--exporter %s ignored: the source is already ONNX", exporter)
    provenance = {"edgefuse.source": label, "edgefuse.exporter": _NO_EXPORT}
    return _Loaded(model, provenance, resolve_unnamed(shapes, graph_input_names(model)))


def _torch_source(
    module: Any, label: str, shapes: InputShapes, example_inputs: Any, opset: int | None,
    exporter: str,
) -> _Loaded:
    examples, names = _examples_and_names(shapes, example_inputs)
    exported = export_torch(module, examples, input_names=names, opset=opset, exporter=exporter)
    # The export already has the example shapes; nothing is left to fix.
    return _Loaded(exported.model, {"edgefuse.source": label, **exported.provenance()}, {})


def _examples_and_names(shapes: InputShapes, example_inputs: Any) -> tuple[tuple, list[str]]:
    """Example tensors and input names from ``example_inputs`` and/or the given shapes."""
    if None in shapes and len(shapes) > 1:
        raise InputError(
            "an unnamed input shape cannot be mixed with named ones",
            hint="name every input: --input NAME:D0,D1,...",
            reference=Ref.BAD_INPUT_SHAPE,
        )
    if example_inputs is None:
        if not shapes:
            raise InputError(
                "a PyTorch model needs its input shapes to be exported",
                hint="give them: --input input:1,3,224,224 (or example_inputs= in Python)",
                reference=Ref.MISSING_INPUT_SHAPE,
            )
        names = default_input_names(1) if None in shapes else [str(n) for n in shapes]
        return example_inputs_from_shapes(dict(zip(names, shapes.values(), strict=True))), names
    examples = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (
        example_inputs,)
    if not shapes:
        return examples, default_input_names(len(examples))
    if len(shapes) != len(examples):
        raise InputError(
            f"{len(shapes)} input shape(s) given for {len(examples)} example input(s)",
            hint="give one name and shape per example input, in order",
            reference=Ref.BAD_INPUT_SHAPE,
        )
    names = default_input_names(1) if None in shapes else [str(n) for n in shapes]
    for name, shape, example in zip(names, shapes.values(), examples, strict=True):
        actual = tuple(getattr(example, "shape", ()))
        if actual != shape:
            raise InputError(
                f"input '{name}' is given shape {list(shape)} but its example has {list(actual)}",
                hint="give shapes that match the example tensors, or leave inputs out",
                reference=Ref.BAD_INPUT_SHAPE,
            )
    return examples, names


def _check_options(opset: int | None, exporter: str) -> None:
    """Refuse bad options before any slow export starts."""
    if opset is not None and opset not in SUPPORTED_OPSETS:
        raise InputError(
            f"opset {opset} is not supported",
            hint=f"choose an opset in {SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1}",
            reference=Ref.UNSUPPORTED_OPSET,
        )
    if exporter not in EXPORTERS:
        raise InputError(
            f"unknown exporter '{exporter}'",
            hint=f"choose one of {', '.join(EXPORTERS)}",
            reference=Ref.BAD_EXPORTER,
        )


def _check_output_path(path: Path) -> None:
    """Refuse an unwritable output before the conversion, not after it."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not parent.is_dir():
        raise InputError(
            f"cannot write '{path}': "
            + ("it is a directory" if path.is_dir() else f"'{parent}' does not exist"),
            hint="give a file name in an existing directory, e.g. -o model.onnx",
            reference=Ref.BAD_OUTPUT_PATH,
        )
