"""The gears of a dynamic OM and which one a feed runs on: one rule for the board and the host.

Why its own module: the board backend reads the gears from pyACL (``acl.mdl.get_dynamic_batch``
and friends) and the ``sim`` backend from ``manifest.json``; both must accept and refuse the same
shapes with the same words, or a host test passes on a feed the board rejects. The rule (ATC's
gear models, reference ascend-toolchain.md §1.4 and §5.5; mmdeploy's AscendWrapper does the same):

- ``batch`` gears (``--dynamic_batch_size``): every input gears dimension 0 and all inputs must
  share one batch; a batch that is not a gear runs on the next larger gear and the outputs are cut
  back to the real batch; a batch above the largest gear is refused;
- ``hw`` gears (``--dynamic_image_size``): the (height, width) of every geared input must be one
  gear exactly;
- ``dims`` gears (``--dynamic_dims``): the concatenated dimensions of every input must be one gear
  exactly.

A refusal is ``InputError`` with the reference ``no-matching-gear``, naming the OM, the kind of
gear, what was given and the gears there are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from edgefuse.errors import InputError, Ref

GEAR_KINDS = ("batch", "hw", "dims")


@dataclasses.dataclass(frozen=True)
class OmGears:
    """The shapes a gear OM accepts: batch sizes, (height, width) pairs, or concatenated dims."""

    kind: str  # "batch" | "hw" | "dims"
    values: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class GearChoice:
    """The gear a feed runs on, and the real batch when it runs on a larger batch gear."""

    value: Any  # a batch (int), an (h, w) pair, or a dims tuple
    real_batch: int | None = None


def select_gear(gears: OmGears, dynamic: Sequence[tuple[np.ndarray, Sequence[int]]],
                om_name: str) -> GearChoice:
    """The gear for the feeds; ``dynamic`` pairs each input array with the axes a gear decides.

    Raises ``InputError`` (``no-matching-gear``) when no gear takes the feeds.
    """
    if gears.kind == "batch":
        batches = {array.shape[0] for array, axes in dynamic if list(axes) == [0]}
        batch = batches.pop() if len(batches) == 1 else None
        fitting = [g for g in gears.values if batch is not None and g >= batch]
        if not fitting:
            raise no_gear_error(om_name, gears, f"batch {batch if batch is not None else '?'}")
        return GearChoice(fitting[0], batch if fitting[0] != batch else None)
    if gears.kind == "hw":
        sizes = {tuple(array.shape[axis] for axis in axes) for array, axes in dynamic if axes}
        size = sizes.pop() if len(sizes) == 1 else None
        if size not in gears.values:
            raise no_gear_error(om_name, gears, f"image size {size if size else '?'} "
                                                "(height, width)")
        return GearChoice(size)
    dims = tuple(int(d) for array, _ in dynamic for d in array.shape)
    if dims not in gears.values:
        raise no_gear_error(om_name, gears, f"dims {dims}")
    return GearChoice(dims)


def geared_axes(gears: OmGears, dims: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """Per input, the axes the gears decide, from the dims the OM reports for it.

    Why not just the -1 entries: the Atlas 200I DK A2's pyACL page says ``get_input_dims_v2``
    returns the largest gear's combination for a gear model where ``get_input_dims`` gives -1
    (aclpythondevg "get_input_dims_v2", Atlas200IDKA2DeveloperKit 23.0.RC2 aadgp/
    aclpythondevg_01_0190), so both readings are accepted: a -1 is geared; without one, ``batch``
    gears decide axis 0, ``hw`` gears the H and W of an NCHW input that holds the largest
    gear's (or any gear's) size, and ``dims`` gears every position whose value differs between
    gears.
    """
    if gears.kind == "batch":
        return [(0,) if len(d) else () for d in dims]
    if gears.kind == "hw":
        largest = (max(h for h, _ in gears.values), max(w for _, w in gears.values))
        axes = []
        for d in dims:
            minus = tuple(i for i, v in enumerate(d) if v < 0)
            sized = len(d) == 4 and (tuple(d[2:]) == largest or tuple(d[2:]) in gears.values)
            axes.append(minus or ((2, 3) if sized else ()))
        return axes
    varying = {i for i in range(len(gears.values[0]))
               if len({gear[i] for gear in gears.values}) > 1} if gears.values else set()
    axes, offset = [], 0
    for d in dims:
        minus = tuple(i for i, v in enumerate(d) if v < 0)
        axes.append(minus or tuple(i for i in range(len(d)) if offset + i in varying))
        offset += len(d)
    return axes


def no_gear_error(om_name: str, gears: OmGears, given: str) -> InputError:
    """The refusal of a feed no gear takes, as the board and the simulation word it."""
    return InputError(
        f"{om_name} has no {gears.kind} gear for {given}",
        context=f"gears: {list(gears.values)}",
        hint="feed one of the gears, or recompile with the gear you need",
        reference=Ref.NO_MATCHING_GEAR,
    )


def gears_from_manifest(record: Mapping[str, Any] | None) -> tuple[OmGears | None,
                                                                   dict[str, tuple[int, ...]]]:
    """The gears a build's ``manifest.json`` records (``compile``'s ``"gears"`` entry), and per
    input the axes they decide; (None, {}) for a static build."""
    if not record:
        return None, {}
    axes = {name: tuple(int(a) for a in dims) for name, dims in record.get("dims", {}).items()}
    if record.get("dynamic_batch"):
        return OmGears("batch", tuple(sorted(int(b) for b in record["dynamic_batch"]))), axes
    if record.get("dynamic_image_size"):
        return OmGears("hw", tuple((int(h), int(w)) for h, w in record["dynamic_image_size"])), axes
    return None, {}
