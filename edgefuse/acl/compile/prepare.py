"""Prepare an ONNX model for ATC's parser: gears, domains, opset; then prove nothing changed.

Why a separate step: ATC looks each node up as ``<domain>::<opset>::<OpType>`` in the parser's
registry (Ascend/parser@parser/onnx/onnx_parser.cc), so the same math is accepted or refused
depending on how the file spells it. This step changes the spelling only:

- gears: dimensions that ``--dynamic_batch_size`` / ``--dynamic_image_size`` make dynamic become
  symbolic in the graph inputs (ATC gets ``-1`` there in ``--input_shape``);
- domains: nodes spelled ``ai.onnx`` join the default domain; nodes of a custom domain whose op
  type CANN (or a registered plugin) claims in the default domain are moved there, mmdeploy's
  way (open-mmlab/mmdeploy@mmdeploy/backend/ascend/onnx2ascend.py); unused ``opset_import``
  entries are dropped, since several entries make the parser refuse default-domain nodes (E16005);
- opset: the lowest opset, from ``target_opset`` up, at which the parser table registers every op
  of the model. 11 by default, the opset Ascend's own samples export for 310/310B
  (Ascend/ModelZoo-PyTorch ACL_PyTorch/built-in/cv/Yolov5_for_Pytorch/README.md; reference
  ascend-toolchain.md §1.2). Up-conversion uses ``onnx.version_converter``; down-conversion
  ``edgefuse.convert.opset_downgrade`` (onnx's converter lacks most down-adapters); nodes of a
  parser plugin (the edgefuse ops register theirs at opsets 8-18) pass it unchanged, and the
  decompositions of moved custom nodes are dropped, since a model-local function pins the opset
  it imports.

Then the prepared model and the original run on ONNX Runtime CPU on the same seeded inputs and
every output must reach cosine >= 0.99999 (``edgefuse.reference``); each gear shape must also run.

Why not ``edgefuse.convert``: it converts within its own supported range (11..21) with its own
tolerance and no notion of the parser table; here the target opset is chosen per op by the table
and the gate is the compile stage's cosine.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from edgefuse._graph_walk import all_nodes
from edgefuse.acl.compile.opsupport import DEFAULT_DOMAINS, load_table, opset_imports
from edgefuse.acl.ops.host import inline_custom_ops
from edgefuse.acl.ops.registry import OPS_BY_NAME
from edgefuse.acl.ops.spec import DOMAIN as CUSTOM_DOMAIN
from edgefuse.acl.ops.spec import DOMAIN_VERSION
from edgefuse.convert.onnx_load import graph_input_names
from edgefuse.convert.opset_downgrade import DowngradeError, downgrade
from edgefuse.errors import InputError, ModelLoadError, Ref
from edgefuse.reference.compare import compare_arrays
from edgefuse.reference.feeds import input_specs, random_feeds
from edgefuse.reference.onnx_runner import RUN_FAILURES, run_onnx
from edgefuse.session import TensorSpec

DEFAULT_TARGET_OPSET = 11
MIN_COSINE = 0.99999
PARITY_SEED = 0

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Gears:
    """The dynamic dimensions ATC will compile gears for, per input."""

    dims: Mapping[str, tuple[int, ...]]  # input name -> dimension indices that are dynamic
    shapes: tuple[Mapping[str, tuple[int, ...]], ...]  # one concrete shape set per gear

    @property
    def empty(self) -> bool:
        return not self.dims


NO_GEARS = Gears({}, ())


@dataclasses.dataclass
class PreparedModel:
    model: onnx.ModelProto
    source_opset: int
    opset: int
    changes: list[str]
    parity: dict[str, Any]  # {"checked", "min_cosine", "outputs": {name: cosine}, "reason"}

    def to_json(self) -> dict[str, Any]:
        return {
            "source_opset": self.source_opset,
            "opset": self.opset,
            "changes": self.changes,
            "parity": self.parity,
        }


def make_gears(
    model: onnx.ModelProto,
    *,
    dynamic_batch: Sequence[int] | None = None,
    dynamic_image_size: Sequence[tuple[int, int]] | None = None,
) -> Gears:
    """Which input dimensions each gear option makes dynamic, and the shapes of every gear.

    ``dynamic_batch`` gears dimension 0 of every input (ATC's own example gears ``data`` and
    ``img_info`` together); ``dynamic_image_size`` gears H and W of every 4-D input.
    """
    if dynamic_batch is None and dynamic_image_size is None:
        return NO_GEARS
    if dynamic_batch is not None and dynamic_image_size is not None:
        raise InputError(
            "--dynamic-batch and --dynamic-image-size cannot be used together",
            hint="ATC accepts one kind of gear per model",
            reference=Ref.BAD_ATC_OPTIONS,
        )
    for gear in [*(dynamic_batch or ()), *(v for hw in dynamic_image_size or () for v in hw)]:
        if isinstance(gear, bool) or not isinstance(gear, int) or gear < 1:
            raise InputError(
                f"gear sizes must be positive integers, got "
                f"{list(dynamic_batch or dynamic_image_size or ())}",
                hint="e.g. --dynamic-batch 1,2,4 or --dynamic-image-size 480,640;720,1280",
                reference=Ref.BAD_ATC_OPTIONS,
            )
    shapes = _declared_shapes(model)
    if dynamic_batch is not None:
        scalars = [name for name, shape in shapes.items() if not shape]
        if scalars:
            raise InputError(
                f"--dynamic-batch gears dimension 0 of every input, but "
                f"{', '.join(repr(n) for n in scalars)} is a scalar: it has no batch dimension",
                hint="drop --dynamic-batch, or export the model with a batch dimension",
                reference=Ref.BAD_ATC_OPTIONS,
            )
        dims = {name: (0,) for name in shapes}
        gears = tuple(
            {name: (batch, *shape[1:]) for name, shape in shapes.items()} for batch in dynamic_batch
        )
        return Gears(dims, gears)
    four_d = {name: shape for name, shape in shapes.items() if len(shape) == 4}
    if not four_d:
        raise InputError(
            "--dynamic-image-size needs an NCHW input; the model has none",
            reference=Ref.BAD_ATC_OPTIONS,
        )
    dims = {name: (2, 3) for name in four_d}
    gears = tuple(
        {name: ((*shape[:2], h, w) if name in four_d else shape) for name, shape in shapes.items()}
        for h, w in dynamic_image_size or ()
    )
    return Gears(dims, gears)


def prepare_for_atc(
    model: onnx.ModelProto,
    *,
    target_opset: int = DEFAULT_TARGET_OPSET,
    gears: Gears = NO_GEARS,
    plugins: Collection[str] = (),
    min_cosine: float = MIN_COSINE,
) -> PreparedModel:
    """A copy of ``model`` spelled the way ATC's parser accepts it, verified against the original.

    Raises when the prepared model computes something else (cosine below ``min_cosine``) or a
    gear shape does not run. Ops the table does not know are left for ``check_model`` to report.
    """
    work = onnx.ModelProto()
    work.CopyFrom(model)
    changes: list[str] = []
    source_opset = opset_imports(model).get("", 0)
    _relax_gear_dims(work, gears, changes)
    _normalize_domains(work, plugins, changes)
    work, opset = _choose_opset(work, target_opset, plugins, changes)
    parity = _check_parity(model, work, gears, min_cosine)
    _check_gears_run(work, gears)
    return PreparedModel(work, source_opset, opset, changes, parity)


# ---- spelling changes ---------------------------------------------------------------------------


def _declared_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of the graph inputs; a dynamic dimension is -1."""
    values = {value.name: value for value in model.graph.input}
    shapes = {}
    for name in graph_input_names(model):
        dims = values[name].type.tensor_type.shape.dim
        shapes[name] = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in dims)
    return shapes


def _relax_gear_dims(model: onnx.ModelProto, gears: Gears, changes: list[str]) -> None:
    if gears.empty:
        return
    for value in model.graph.input:
        for index in gears.dims.get(value.name, ()):
            dim = value.type.tensor_type.shape.dim[index]
            if not dim.HasField("dim_param"):
                dim.dim_param = f"{value.name}_dim{index}"
    # Intermediate and output shapes recorded for the old static dims would now be wrong.
    del model.graph.value_info[:]
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(model)
    model.graph.ClearField("output")
    model.graph.output.extend(inferred.graph.output)
    listed = ", ".join(f"{name}{list(dims)}" for name, dims in gears.dims.items())
    changes.append(f"made gear dimensions dynamic: {listed}")


def _normalize_domains(
    model: onnx.ModelProto, plugins: Collection[str], changes: list[str]
) -> None:
    table = load_table()
    moved: dict[str, str] = {}
    for node in all_nodes(model.graph):
        if node.domain == "ai.onnx":
            node.domain = ""
        elif node.domain and (
            node.op_type in table.ops
            or any(p.startswith("ai.onnx::") and p.endswith(f"::{node.op_type}") for p in plugins)
        ):
            moved[f"{node.domain}::{node.op_type}"] = node.op_type
            node.domain = ""
    if moved:
        changes.append(
            "moved custom-domain nodes to the default domain, where CANN registers them: "
            + ", ".join(sorted(moved))
        )
    _drop_uncalled_functions(model, changes)
    used = {node.domain for node in all_nodes(model.graph)} | {""}
    kept = [
        entry
        for entry in model.opset_import
        if ("" if entry.domain in DEFAULT_DOMAINS else entry.domain) in used
    ]
    dropped = [entry.domain for entry in model.opset_import if entry not in kept]
    if dropped:
        del model.opset_import[:]
        model.opset_import.extend(kept)
        changes.append(f"dropped unused opset_import entries {dropped}")
    for entry in model.opset_import:
        if entry.domain == "ai.onnx":
            entry.domain = ""


def _drop_uncalled_functions(model: onnx.ModelProto, changes: list[str]) -> None:
    """Model-local functions no node calls any more: the decompositions of the custom nodes just
    moved to the default domain. Kept, they would pin the default domain's opset (a function
    must import the model's version) and carry a domain the model no longer imports."""
    called: set[tuple[str, str]] = set()
    pending = list(all_nodes(model.graph))
    functions = {(f.domain, f.name): f for f in model.functions}
    while pending:
        node = pending.pop()
        key = (node.domain, node.op_type)
        if key in functions and key not in called:
            called.add(key)
            pending.extend(functions[key].node)
    dropped = [f"{domain}::{name}" for domain, name in functions if (domain, name) not in called]
    if dropped:
        kept = [f for f in model.functions if (f.domain, f.name) in called]
        del model.functions[:]
        model.functions.extend(kept)
        changes.append(f"dropped model-local functions no node calls: {', '.join(dropped)}")


def _unregistered_at(model: onnx.ModelProto, opset: int, plugins: Collection[str]) -> list[str]:
    """Default-domain op types of ``model`` that the parser table lacks at ``opset``."""
    table = load_table()
    missing: dict[str, None] = {}
    for node in all_nodes(model.graph):
        if node.domain:
            continue
        entry = table.ops.get(node.op_type)
        key = f"ai.onnx::{opset}::{node.op_type}"
        if key not in plugins and (entry is None or not entry.supports(opset)):
            missing.setdefault(node.op_type, None)
    return list(missing)


def _choose_opset(
    model: onnx.ModelProto, target: int, plugins: Collection[str], changes: list[str]
) -> tuple[onnx.ModelProto, int]:
    table = load_table()
    current = opset_imports(model).get("", 0)
    blockers: list[str] = []
    plugin_ops = _plugin_op_types(model, plugins)
    for opset in range(target, table.max_opset + 1):
        missing = _unregistered_at(model, opset, plugins)
        if missing:
            blockers.append(f"{opset} ({', '.join(missing)} not registered)")
            continue
        if opset == current:
            candidate = model
        else:
            try:
                candidate = _convert(model, current, opset, plugin_ops)
            except (DowngradeError, RuntimeError, onnx.checker.ValidationError) as exc:
                logger.info("opset %d -> %d failed: %s", current, opset, exc)
                blockers.append(f"{opset} ({exc})")
                continue
            missing = _unregistered_at(candidate, opset, plugins)
            if missing:
                blockers.append(f"{opset} (conversion introduced {', '.join(missing)})")
                continue
        why = f"; lower opsets were not usable: {'; '.join(blockers)}" if blockers else ""
        if opset != current:
            changes.append(f"converted opset {current} -> {opset}{why}")
        elif blockers:
            changes.append(f"kept opset {current}{why}")
        return candidate, opset
    changes.append(
        f"kept opset {current}: no opset from {target} to {table.max_opset} has every op "
        "registered (see the op-support report)"
    )
    return model, current


def _plugin_op_types(model: onnx.ModelProto, plugins: Collection[str]) -> set[str]:
    """Default-domain op types of ``model`` that a plugin claims and its opset does not define.

    The edgefuse ops register their parser plugins at every opset from 8 to 18, so a model
    the Ascend optimizer rewrote converts like any other, these nodes unchanged. (ONNX defines
    a ``Swish`` of its own from opset 24, beyond what ATC parses.)
    """
    claimed = {origin.rsplit("::", 1)[-1] for origin in plugins if origin.startswith("ai.onnx::")}
    opset = opset_imports(model).get("", 0)
    return {
        node.op_type
        for node in all_nodes(model.graph)
        if not node.domain and node.op_type in claimed and not _defined(node.op_type, opset)
    }


def _defined(op_type: str, opset: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, opset)
    except onnx.defs.SchemaError:
        return False
    return True


def _convert(
    model: onnx.ModelProto, current: int, opset: int, plugin_ops: Collection[str]
) -> onnx.ModelProto:
    """Up with onnx's converter (it has the up-adapters), down with edgefuse's own."""
    if opset < current:
        return downgrade(model, opset, opaque=plugin_ops)
    converted = onnx.version_converter.convert_version(model, opset)
    onnx.checker.check_model(converted)
    return converted


# ---- verification -------------------------------------------------------------------------------


def _feeds(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Seeded random inputs for ``model``'s inputs, at ``shapes`` where given."""
    specs = [TensorSpec(spec.name, tuple(shapes.get(spec.name, spec.shape)), spec.dtype)
             for spec in input_specs(model)]
    return random_feeds(specs, seed=PARITY_SEED)


def _check_parity(
    original: onnx.ModelProto, prepared: onnx.ModelProto, gears: Gears, min_cosine: float
) -> dict[str, Any]:
    shapes = _declared_shapes(original)
    if any(-1 in shape for shape in shapes.values()):
        if not gears.shapes:
            return {"checked": False, "reason": "dynamic input dimensions without gears"}
        shapes = dict(gears.shapes[0])
    feeds = _feeds(original, shapes)
    original, prepared = host_runnable(original), host_runnable(prepared)
    try:
        expected = run_onnx(original, feeds)
    except RUN_FAILURES as exc:  # recorded in the manifest, and logged
        reason = exc.message
        logger.warning("parity not checked: ONNX Runtime cannot run the original: %s", reason)
        return {"checked": False, "reason": f"ONNX Runtime cannot run the original: {reason}"}
    broken = [name for name, value in expected.items()
              if value.dtype.kind == "f" and np.isnan(value).any()]
    if broken:
        raise ModelLoadError(
            f"the model computes NaN on seeded random inputs (output(s) {', '.join(broken)}), "
            "so no build of it can be checked",
            context=f"seeded random inputs, seed {PARITY_SEED}",
            hint="look for NaN weights (numpy.isnan on the initializers) or a division by zero; "
            "`edgefuse verify MODEL MODEL --per-layer` shows the first layer that gives NaN",
            reference=Ref.PREPARE_PARITY_FAILED,
        )
    try:
        actual = run_onnx(prepared, feeds)
    except RUN_FAILURES as exc:
        raise ModelLoadError(
            "the model prepared for ATC does not run on ONNX Runtime, the original does",
            context=exc.message,
            hint="pass --opset with the model's own opset to skip the conversion",
            reference=Ref.PREPARE_PARITY_FAILED,
        ) from exc
    cosines: dict[str, float] = {}
    for name, reference in expected.items():
        if name not in actual or actual[name].shape != reference.shape:
            got = actual[name].shape if name in actual else "missing"
            raise ModelLoadError(
                f"output '{name}' changed shape in the prepared model: {got}, "
                f"original {reference.shape}",
                reference=Ref.PREPARE_PARITY_FAILED,
            )
        cosines[name] = compare_arrays(reference, actual[name])[0]
    failed = {name: c for name, c in cosines.items() if not c >= min_cosine}
    if failed:
        listing = "\n".join(f"{name}: cosine {c:.8f}" for name, c in failed.items())
        raise ModelLoadError(
            f"the model prepared for ATC differs from the original (cosine < {min_cosine})",
            context=listing + f"\n(seeded random inputs, seed {PARITY_SEED})",
            hint="the opset conversion mis-translated an op: pass --opset with the model's own "
            "opset, or one closer to it",
            reference=Ref.PREPARE_PARITY_FAILED,
        )
    return {
        "checked": True,
        "min_cosine": min(cosines.values(), default=1.0),
        "gate": min_cosine,
        "seed": PARITY_SEED,
        "outputs": cosines,
    }


def host_runnable(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its edgefuse custom ops spelled as their ONNX decompositions, for ORT.

    ATC gets the custom nodes (its parser plugins claim them, in the default domain after
    prepare); the host checks run what those nodes compute, so the parity gate also covers a
    model the Ascend optimizer rewrote.
    """
    custom = [
        node
        for node in model.graph.node
        if node.domain == CUSTOM_DOMAIN
        or (node.domain in ("", "ai.onnx") and node.op_type in OPS_BY_NAME)
    ]
    if not custom:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type in OPS_BY_NAME:
            node.domain = CUSTOM_DOMAIN
    if all(entry.domain != CUSTOM_DOMAIN for entry in copy.opset_import):
        copy.opset_import.append(onnx.helper.make_opsetid(CUSTOM_DOMAIN, DOMAIN_VERSION))
    return inline_custom_ops(copy)


def _check_gears_run(prepared: onnx.ModelProto, gears: Gears) -> None:
    """Every gear shape must run on ONNX Runtime: a batch or size baked into the graph fails here,
    on the host, instead of as a wrong OM on the board."""
    prepared = host_runnable(prepared)
    for shapes in gears.shapes:
        feeds = _feeds(prepared, shapes)
        try:
            outputs = run_onnx(prepared, feeds)
        except RUN_FAILURES as exc:
            raise InputError(
                f"the model does not run at gear shape {dict(shapes)}",
                context=exc.message,
                hint="the batch or image size is baked into the graph (e.g. a Reshape to a fixed "
                "shape); re-export with dynamic axes or drop the gear option",
                reference=Ref.GEAR_SHAPE_FAILS,
            ) from exc
        if not all(np.all(np.isfinite(v)) for v in outputs.values() if v.dtype.kind == "f"):
            raise InputError(
                f"the model gives non-finite outputs at gear shape {dict(shapes)}",
                reference=Ref.GEAR_SHAPE_FAILS,
            )
