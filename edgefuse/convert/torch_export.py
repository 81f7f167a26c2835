"""PyTorch -> ONNX: pick the exporter by measurement, never switch exporters silently.

Why the dynamo exporter (``torch.onnx.export(dynamo=True)``, opset 18, its optimizer on) is the
default, measured on a ResNet-50 with torch 2.13 (bench/convert.py; ORT CPU, ENABLE_ALL, 2 threads,
fresh interleaved processes, paired ratios against the TorchScript exporter's graph):

  dynamo, opset 18, optimize=True   122 nodes, 0 BN    1.00x
  TorchScript exporter, opset 17    122 nodes, 0 BN    1.00x (baseline)
  dynamo, optimize=False            447 nodes, 53 BN   1.48x slower

The two good paths tie on graph and latency; dynamo wins the tie because the TorchScript exporter
is deprecated (torch warns it "will be removed"), and because torch.export refuses data-dependent
control flow where tracing silently bakes in one branch. ``optimize=False`` is never a convert
path: it leaves every BatchNormalization unfolded behind a computed zero Conv bias
(``export_unfused`` gives that graph to the demo and the benchmark, as the optimizer's input).

``auto`` takes the TorchScript exporter, recording why in ``edgefuse.exporter_reason``, for a
TorchScript module (torch.export cannot capture TorchScript) and when an opset below 18 is
requested: the dynamo exporter builds only 18+, and its graphs do not down-convert (onnx's
converter has no Relu 14->13 adapter; Reshape carries allowzero=1).

If the dynamo exporter fails under ``auto``, the TorchScript exporter is tried, with a WARNING and
the reason kept in the model's ``edgefuse.exporter_fallback`` metadata; an exporter the caller
named is never replaced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import logging
import os
import re
import sys
import warnings
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from edgefuse._deps import require_torch
from edgefuse._quiet import quiet_logger
from edgefuse.errors import InputError, Ref, ToolError

EXPORTERS = ("auto", "dynamo", "torchscript")
DYNAMO_OPSET = 18  # the dynamo exporter builds opset 18 natively; lower opsets are down-converted
TORCHSCRIPT_OPSET = 17
TORCHSCRIPT_MAX_OPSET = 20  # torch.onnx._constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET in 2.13

_FACTORY = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Exported:
    """An exported model and how it was made (recorded in the canonical model's metadata)."""

    model: onnx.ModelProto
    exporter: str
    fallback_reason: str | None = None
    reason: str | None = None  # why ``auto`` chose a non-default exporter

    def provenance(self) -> dict[str, str]:
        entries = {"edgefuse.exporter": self.exporter}
        if self.reason is not None:
            entries["edgefuse.exporter_reason"] = self.reason
        if self.fallback_reason is not None:
            entries["edgefuse.exporter_fallback"] = self.fallback_reason
        return entries


def is_factory_spec(text: str) -> bool:
    """Whether ``text`` reads as ``package.module:callable``."""
    return bool(_FACTORY.match(text))


def build_from_factory(spec: str) -> Any:
    """Import ``package.module`` and call ``factory()``; it must return a ``torch.nn.Module``.

    The current directory is importable, as with ``python -m``, so a project's own module works
    without installing it.
    """
    torch = require_torch("converting a PyTorch model")
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(
            f"cannot import '{module_name}' for the factory '{spec}'",
            context=f"{type(exc).__name__}: {exc}",
            hint="run from the directory that contains the package, or install it",
            reference=Ref.BAD_FACTORY,
        ) from None
    except Exception as exc:  # noqa: BLE001 - the user's module: any failure is theirs to fix
        raise InputError(
            f"importing '{module_name}' for the factory '{spec}' raised {type(exc).__name__}",
            context=_last_lines(exc),
            hint=f"run `python -c 'import {module_name}'` to see the problem in your module",
            reference=Ref.FACTORY_FAILED,
        ) from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise InputError(
            f"'{module_name}' has no callable '{attribute}'",
            hint=f"name a function or class in {module_name} that returns a torch.nn.Module",
            reference=Ref.BAD_FACTORY,
        )
    try:
        built = factory()
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is the user's error
        raise InputError(
            f"the factory '{spec}' raised {type(exc).__name__}",
            context=_last_lines(exc),
            hint="call it in Python to debug it; it must take no arguments",
            reference=Ref.FACTORY_FAILED,
        ) from None
    if not isinstance(built, torch.nn.Module):
        raise InputError(
            f"the factory '{spec}' returned {type(built).__name__}, not a torch.nn.Module",
            reference=Ref.BAD_FACTORY,
        )
    return built


def load_torchscript(path: str | os.PathLike[str]) -> Any | None:
    """The TorchScript module in ``path``, or None when the file is not a zip archive at all.

    A zip that torch.jit.load refuses is an error, not "not TorchScript": it is usually a
    ``torch.save`` checkpoint, which holds weights or pickled Python but no program.
    """
    if not zipfile.is_zipfile(path):
        return None
    torch = require_torch("converting a TorchScript model")
    try:
        return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError) as exc:
        raise InputError(
            f"'{path}' is a zip archive but not a TorchScript program",
            context=_last_lines(exc),
            hint="a torch.save() checkpoint holds no program: build the model in Python and "
            "pass 'package.module:factory', or save it with torch.jit.save(torch.jit.trace(...))",
            reference=Ref.NOT_TORCHSCRIPT,
        ) from None


def default_input_names(count: int) -> list[str]:
    """``input`` for a single input, ``input_0``, ``input_1``, ... for several."""
    return ["input"] if count == 1 else [f"input_{index}" for index in range(count)]


def example_inputs_from_shapes(shapes: Mapping[str, Sequence[int]]) -> tuple[Any, ...]:
    """Seeded float32 tensors of the given shapes (an export needs values, not only shapes)."""
    torch = require_torch("converting a PyTorch model")
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*shape, generator=generator) for shape in shapes.values())


def export_torch(
    module: Any,
    example_inputs: tuple[Any, ...],
    *,
    input_names: Sequence[str],
    opset: int | None = None,
    exporter: str = "auto",
) -> Exported:
    """Export ``module`` at the shapes of ``example_inputs``; outputs are named ``output[_N]``."""
    torch = require_torch("converting a PyTorch model")
    if exporter not in EXPORTERS:
        raise InputError(
            f"unknown exporter '{exporter}'",
            hint=f"choose one of {', '.join(EXPORTERS)}",
            reference=Ref.BAD_EXPORTER,
        )
    is_script = isinstance(module, (torch.jit.ScriptModule, torch.jit.ScriptFunction))
    if is_script and exporter == "dynamo":
        raise InputError(
            "the dynamo exporter cannot export a TorchScript module",
            hint="use --exporter torchscript (or auto)",
            reference=Ref.BAD_EXPORTER,
        )
    was_training = getattr(module, "training", False)
    if was_training:
        logger.info("exporting in eval mode (the module was in training mode)")
        module.eval()
    try:
        output_names = _output_names(module, example_inputs)
        names = {"input_names": list(input_names), "output_names": output_names}
        auto_reason = _auto_torchscript_reason(is_script, opset) if exporter == "auto" else None
        if exporter == "torchscript" or auto_reason is not None:
            model = _torchscript(module, example_inputs, opset, names)
            return Exported(model, _torchscript_label(opset), reason=auto_reason)
        try:
            return Exported(_dynamo(module, example_inputs, opset, names), _dynamo_label(opset))
        except ToolError as exc:
            if exporter == "dynamo":
                raise
            reason = f"dynamo exporter failed: {exc.context or exc.message}"
            logger.warning("%s; retrying with the TorchScript exporter", reason)
            model = _torchscript(module, example_inputs, opset, names)
            return Exported(model, _torchscript_label(opset), fallback_reason=reason)
    finally:
        if was_training:
            module.train()


def _auto_torchscript_reason(is_script: bool, opset: int | None) -> str | None:
    """Why ``auto`` picks the TorchScript exporter here, or None for the default (dynamo)."""
    if is_script:
        return "auto: a TorchScript module (torch.export cannot capture TorchScript)"
    if opset is not None and opset < DYNAMO_OPSET:
        return (
            f"auto: opset {opset} requested; the dynamo exporter builds only opset "
            f"{DYNAMO_OPSET}+, and its graphs do not down-convert (Reshape allowzero, Relu-14)"
        )
    return None


def _output_names(module: Any, example_inputs: tuple[Any, ...]) -> list[str]:
    """Run the module once: a model that fails on the inputs fails here, with a clear message."""
    torch = require_torch("converting a PyTorch model")
    try:
        with torch.no_grad():
            outputs = module(*example_inputs)
    except Exception as exc:  # noqa: BLE001 - the user's model: any failure is the user's error
        shapes = ", ".join(str(list(getattr(t, "shape", []))) for t in example_inputs)
        raise InputError(
            f"the model fails on example inputs of shape {shapes}",
            context=_last_lines(exc),
            hint="check the --input shapes (and their order) against the model's forward()",
            reference=Ref.MODEL_CALL_FAILED,
        ) from None
    count = sum(
        1 for leaf in torch.utils._pytree.tree_leaves(outputs) if isinstance(leaf, torch.Tensor)
    )
    return ["output"] if count == 1 else [f"output_{index}" for index in range(count)]


def export_unfused(
    module: Any, example_inputs: tuple[Any, ...], *, input_names: Sequence[str],
    dynamic_batch: bool = False,
) -> onnx.ModelProto:
    """What ``torch.onnx.export(dynamo=True, optimize=False)`` gives: every BatchNorm a node.

    Never a convert path (see the table above). The demo and bench/optimize.py start from it:
    it is the kind of graph users hand over, and the one where the optimizer's fusions matter.
    ``dynamic_batch``: dimension 0 of every input is one symbolic ``batch`` (Ultralytics'
    ``dynamic=True``), so the shapes the model reshapes to are computed from it at run time.
    """
    names = {"input_names": list(input_names),
             "output_names": _output_names(module, example_inputs)}
    if dynamic_batch:
        torch = require_torch("converting a PyTorch model")
        batch = torch.export.Dim("batch")
        names["dynamic_shapes"] = tuple({0: batch} for _ in example_inputs)
    return _dynamo(module, example_inputs, None, names, optimize=False)


def _dynamo(
    module: Any,
    example_inputs: tuple[Any, ...],
    opset: int | None,
    names: dict,
    *,
    optimize: bool = True,
) -> Any:
    torch = require_torch("converting a PyTorch model")
    build_opset = max(opset or DYNAMO_OPSET, DYNAMO_OPSET)
    with _quiet_export():
        try:
            program = torch.onnx.export(
                module, example_inputs, dynamo=True, optimize=optimize, opset_version=build_opset,
                verbose=False, **names,
            )
        except Exception as exc:  # noqa: BLE001 - any exporter failure is reported as ToolError
            raise _export_failed("dynamo", exc) from exc
    return program.model_proto


def _torchscript(
    module: Any, example_inputs: tuple[Any, ...], opset: int | None, names: dict
) -> onnx.ModelProto:
    torch = require_torch("converting a PyTorch model")
    build_opset = min(opset or TORCHSCRIPT_OPSET, TORCHSCRIPT_MAX_OPSET)
    buffer = io.BytesIO()
    with _quiet_export():
        try:
            torch.onnx.export(
                module, example_inputs, buffer, dynamo=False, opset_version=build_opset, **names
            )
        except Exception as exc:  # noqa: BLE001 - any exporter failure is reported as ToolError
            raise _export_failed("torchscript", exc) from exc
    return onnx.load_from_string(buffer.getvalue())


def _dynamo_label(opset: int | None) -> str:
    build = max(opset or DYNAMO_OPSET, DYNAMO_OPSET)
    return f"torch.onnx.export(dynamo=True, optimize=True, opset {build})"


def _torchscript_label(opset: int | None) -> str:
    build = min(opset or TORCHSCRIPT_OPSET, TORCHSCRIPT_MAX_OPSET)
    return f"torch.onnx.export(dynamo=False, opset {build})"


@contextlib.contextmanager
def _quiet_export():
    """Keep the exporters' progress prints and deprecation notes off the user's terminal.

    Tracer warnings are kept: they say the trace may not generalise (a baked-in branch).
    """
    torch = require_torch("converting a PyTorch model")
    captured = io.StringIO()
    # torch logs "torchvision is not installed. Skipping torchvision::nms" through a handler that
    # holds the real stderr; it concerns ops a vision model without torchvision cannot contain.
    with quiet_logger("torch.onnx._internal.exporter._registration"), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
                yield
        finally:
            tracer_notes = {
                str(warning.message) for warning in caught
                if issubclass(warning.category, torch.jit.TracerWarning)
            }
            for note in sorted(tracer_notes):
                logger.warning("tracer: %s", note)
            if captured.getvalue():
                logger.debug("exporter output:\n%s", captured.getvalue())


def _export_failed(exporter: str, exc: BaseException) -> ToolError:
    other = "torchscript" if exporter == "dynamo" else "dynamo"
    return ToolError(
        f"the {exporter} exporter failed",
        context=_root_cause(exc),
        hint=f"try --exporter {other}; run with -v for the exporter's own output",
        reference=Ref.TORCH_EXPORT_FAILED,
    )


def _root_cause(exc: BaseException) -> str:
    """The innermost exception's type and first line: the exporters wrap the real reason."""
    root = exc
    while root.__cause__ is not None:
        root = root.__cause__
    lines = [line for line in _ANSI.sub("", str(root)).splitlines() if line.strip()]
    return f"{type(root).__name__}: {lines[0].strip() if lines else ''}"


def _last_lines(exc: BaseException, count: int = 3) -> str:
    lines = [line for line in _ANSI.sub("", str(exc)).splitlines() if line.strip()]
    return f"{type(exc).__name__}: " + "\n".join(lines[-count:])



def describe_module(module: Any) -> str:
    """A provenance label for an in-memory module: its class's import path."""
    kind = type(module)
    return f"{kind.__module__}.{kind.__qualname__}"
