"""Input shapes as the user writes them: ``NAME:1,3,224,224``, or ``1,3,224,224`` for one input.

Why a parser of its own: a shape typo is the most common convert mistake, and it should be caught
here with the offending text quoted, before a model is loaded or exported. The result maps input
names to static shapes; the key ``None`` stands for "the model's only input", resolved once the
model's input names are known (see ``resolve_unnamed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from edgefuse.errors import InputError, Ref

# name -> static shape; the None key is an unnamed shape meant for a single-input model
InputShapes = dict[str | None, tuple[int, ...]]

_EXAMPLE = "--input images:1,3,224,224 (or --input 1,3,224,224 for a single-input model)"


def _bad(text: str, why: str) -> InputError:
    return InputError(
        f"bad input shape '{text}': {why}",
        hint=f"write NAME:D0,D1,... with positive integers, e.g. {_EXAMPLE}",
        reference=Ref.BAD_INPUT_SHAPE,
    )


def parse_input_spec(text: str) -> tuple[str | None, tuple[int, ...]]:
    """One ``NAME:D0,D1,...`` spec as (name or None, shape).

    The shape is what follows the last colon, so names that contain colons (``input:0``, as
    TensorFlow-made models have) still work.
    """
    name, colon, dims_text = text.strip().rpartition(":")
    if colon and not name.strip():
        raise _bad(text, "the name before ':' is empty")
    dims = [part.strip() for part in dims_text.split(",")]
    if not dims_text.strip() or any(not part for part in dims):
        raise _bad(text, "a dimension is missing")
    shape = []
    for part in dims:
        try:
            value = int(part)
        except ValueError:
            raise _bad(text, f"'{part}' is not an integer") from None
        if value <= 0:
            raise _bad(text, f"dimension {value} is not positive (shapes given here are static)")
        shape.append(value)
    return (name.strip() if colon else None), tuple(shape)


def parse_input_specs(texts: Iterable[str]) -> InputShapes:
    """Several specs, as given by repeated ``--input`` flags."""
    shapes: InputShapes = {}
    for text in texts:
        name, shape = parse_input_spec(text)
        _add(shapes, name, shape, text)
    return shapes


def normalize_shapes(
    inputs: Mapping[str | None, Sequence[int]] | Sequence[int] | None,
) -> InputShapes:
    """The API's ``inputs`` argument as InputShapes.

    A name -> shape mapping (the key None meaning "the only input", as ``parse_input_specs``
    returns it), or one bare shape for a single-input model.
    """
    if inputs is None:
        return {}
    if isinstance(inputs, Mapping):
        shapes: InputShapes = {}
        for name, shape in inputs.items():
            if name is not None and (not isinstance(name, str) or not name):
                raise _bad(repr(name), "input names must be non-empty strings")
            _add(shapes, name, _as_shape(shape, name), name)
        return shapes
    return {None: _as_shape(inputs, "the input")}


def resolve_unnamed(shapes: InputShapes, input_names: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Give an unnamed shape the model's only input name; a multi-input model needs names."""
    if None not in shapes:
        return {name: shape for name, shape in shapes.items() if name is not None}
    if len(input_names) != 1:
        raise InputError(
            f"an input shape without a name fits only a single-input model, and this model has "
            f"{len(input_names)} inputs: {', '.join(input_names)}",
            hint="name each input, e.g. "
            + " ".join(f"--input {name}:..." for name in input_names),
            reference=Ref.BAD_INPUT_SHAPE,
        )
    resolved = {name: shape for name, shape in shapes.items() if name is not None}
    if input_names[0] in resolved:
        raise InputError(
            f"input '{input_names[0]}' is given a shape twice (once by name, once without)",
            reference=Ref.BAD_INPUT_SHAPE,
        )
    resolved[input_names[0]] = shapes[None]
    return resolved


def format_shape(shape: Sequence[int | str | None]) -> str:
    """A shape as the CLI prints and parses it: ``1,3,224,224``."""
    return ",".join("?" if dim is None else str(dim) for dim in shape)


def _as_shape(shape: Sequence[int], name: str) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise _bad(f"{name}={shape!r}", "a shape is a sequence of integers")
    dims = []
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise _bad(f"{name}={list(shape)!r}", f"{dim!r} is not a positive integer")
        dims.append(int(dim))
    if not dims:
        raise _bad(f"{name}=[]", "the shape is empty; scalar inputs need no shape")
    return tuple(dims)


def _add(shapes: InputShapes, name: str | None, shape: tuple[int, ...], text: str) -> None:
    if name in shapes:
        which = f"input '{name}'" if name is not None else "the unnamed input"
        raise InputError(
            f"{which} is given a shape twice ('{text}')",
            hint="give each input's shape once",
            reference=Ref.BAD_INPUT_SHAPE,
        )
    shapes[name] = shape
