"""Which detector layout a model's outputs are, from their names, shapes and the graph's tail.

Why it refuses rather than guesses: several layouts share shapes, and a wrong decoder does not
fail, it draws wrong boxes (a raw YOLOX read as YOLOv5 gives 20 boxes where YOLOX gives 4). So:

1. every layout whose shapes fit is a candidate (``fit``): ``[1, 4+C, N]`` yolov8, ``[1, N, 5+C]``
   yolov5, the same with N = the YOLOX grid's size yolox, ``[1, K, 6]`` end2end, two outputs
   ``boxes [1, Q, 4]`` + ``[1, Q, C]`` DETR (end2end) or + ``[1, C, N]`` ppyoloe, pairs of
   ``[1, N_s, C]`` + ``[1, N_s, 4 (reg_max + 1)]`` per stride PicoDet (ppyoloe), YoloHead's four;
   with class names given, a layout that reads a different class count is no candidate;
2. where several remain, the graph's tail decides (``graph_tail``): box channels that pass
   through a grid Add/Mul, an Exp or a Pow are decoded (yolov5, not yolox); a TopK or gather in
   the tail is an NMS-free export (end2end, not yolov5);
3. where the graph does not say (no graph, as for an OM-only model, or no telling op), it stops
   with the candidates and the ``layout:`` key to set.

A layout named by the user (``layout:`` in the config, ``postprocess.layout`` in the app info)
goes through ``bind``: the same fit, so a layout that cannot read the outputs, or a class count
that disagrees with the class names, stops before the first frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from edgefuse.errors import InputError, Ref
from edgefuse.vision.detect.graph_tail import Tail
from edgefuse.vision.detect.heads import (
    HEAD_OUTPUTS,
    YOLOX_STRIDES,
    Heads,
    head_outputs,
    pico_stride,
    yolox_grid_count,
)

Output = tuple[str, tuple, str]  # name, shape, dtype name
ARITHMETIC_OPS = ("Mul", "Add", "Sub", "Div")
ALL_LAYOUTS = ("yolov8", "yolov5", "yolo_head", "yolox", "end2end", "ppyoloe")


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What besides the output shapes tells a layout."""

    input_size: tuple[int, int]  # model input (height, width)
    num_classes: int | None = None  # from class_names / the app info's classes
    strides: tuple[int, ...] | None = None  # configured FPN strides
    tails: Mapping[str, Tail] | None = None  # None: no graph to read
    box_format: str | None = None  # end2end [1, K, 6] boxes, when the config or app info says


class Unfit(Exception):
    """A layout cannot read the outputs; the message says why (internal to this module)."""


def recognise(outputs: Sequence[Output], evidence: Evidence) -> tuple[Heads, str] | None:
    """The one detector layout the outputs fit, and why; None when none fits (not a detector).

    Raises InputError when several fit and the graph does not tell them apart, or when only a
    class count that disagrees with the class names would make one fit.
    """
    outputs = _fixed(outputs)
    if outputs is None:
        return None
    fits = _fits(outputs, evidence)
    if not fits and evidence.num_classes is not None:
        loose = _fits(outputs, dataclasses.replace(evidence, num_classes=None))
        if loose:
            raise _class_mismatch(loose, evidence.num_classes, outputs)
    if not fits:
        return None
    if len(fits) == 1:
        _check_decoded(fits[0], outputs, evidence)
        return _with_box_format(fits[0], evidence), "told from the output shapes"
    heads, why = _narrow(fits, outputs, evidence)
    return _with_box_format(heads, evidence), why


def bind(layout: str, outputs: Sequence[Output], evidence: Evidence) -> Heads:
    """The named layout bound to the outputs; InputError saying what was found when it cannot."""
    fixed = _fixed(outputs)
    if fixed is None:
        raise InputError(
            f"layout '{layout}' needs fixed output shapes, the model has "
            + _shapes(outputs), hint="export the model with a fixed input size",
            reference=Ref.BAD_LAYOUT)
    try:
        heads = FITS[layout](fixed, evidence)
    except Unfit as why:
        if evidence.num_classes is not None:
            try:
                loose = FITS[layout](fixed, dataclasses.replace(evidence, num_classes=None))
            except Unfit:
                loose = None
            if loose is not None:
                raise _class_mismatch([loose], evidence.num_classes, fixed) from None
        raise InputError(f"layout '{layout}' cannot read the outputs {_shapes(fixed)}: {why}",
                         hint=_layout_hint(fixed, evidence), reference=Ref.BAD_LAYOUT) from None
    return _with_box_format(heads, evidence)


def _with_box_format(heads: Heads, evidence: Evidence) -> Heads:
    """An end2end ``[1, K, 6]`` with its box format: as declared, else as the graph made the
    boxes (a Sigmoid last: normalised cx, cy, w, h, as Ultralytics' RTDETRDecoder exports them;
    a Mul/Add/Sub/Div: decoded to input pixels x1, y1, x2, y2, as YOLOv10/YOLO26 ``end2end``
    exports); where neither tells, it refuses naming both."""
    if heads.form != "k6":
        return heads
    box_format = evidence.box_format
    why = "declared"
    if box_format is None:
        tail = evidence.tails.get(heads.names[0]) if evidence.tails is not None else None
        made_by = tail.boxes_from if tail is not None else None
        if made_by in ARITHMETIC_OPS:
            box_format, why = "xyxy", f"the boxes are decoded by a {made_by} in the graph"
        elif made_by == "Sigmoid":
            box_format, why = "cxcywh", "the boxes leave a Sigmoid (0-1) in the graph"
        else:
            found = (f"the boxes come from a {made_by}" if made_by else
                     "no graph to read" if tail is None else "the graph does not say")
            raise InputError(
                f"the end2end output {heads.names[0]} [1, K, 6] may hold x1, y1, x2, y2 in input "
                f"pixels (YOLOv10, YOLO26) or normalised cx, cy, w, h (RT-DETR); {found}",
                hint="set 'box_format: xyxy' or 'box_format: cxcywh' in the config (or "
                     "postprocess.box_format in the model's app info)",
                reference=Ref.BAD_LAYOUT)
    return dataclasses.replace(heads, box_format=box_format, box_why=why)


# ---- one fit per layout -------------------------------------------------------------------------


def _fit_yolo_head(outputs: Sequence[Output], evidence: Evidence) -> Heads:
    names = head_outputs(outputs)
    if names is None:
        raise Unfit("a YoloHead has four outputs: boxes [1, D, 4], scores [1, D], integer "
                    "classes [1, D] and num_detections [1]")
    return Heads("yolo_head", tuple(names[k] for k in HEAD_OUTPUTS))


def _fit_yolov8(outputs: Sequence[Output], evidence: Evidence) -> Heads:
    name, (_, a, b) = _one_prediction(outputs)
    if a < 5:
        raise Unfit(f"[1, 4 + C, N] needs at least one class row, axis 1 has {a}")
    classes = _check_classes(a - 4, evidence, "rows 4 on of axis 1")
    if evidence.num_classes is None and a >= b:
        raise Unfit(f"[1, 4 + C, N] has more boxes than rows; axis 1 ({a}) is not shorter "
                    f"than axis 2 ({b})")
    return Heads("yolov8", (name,), classes)


def _fit_yolov5(outputs: Sequence[Output], evidence: Evidence) -> Heads:
    name, (_, a, b) = _one_prediction(outputs)
    classes = _five_plus_c(a, b, evidence)
    return Heads("yolov5", (name,), classes)


def _fit_yolox(outputs: Sequence[Output], evidence: Evidence) -> Heads:
    name, (_, a, b) = _one_prediction(outputs)
    classes = _five_plus_c(a, b, evidence)
    strides = evidence.strides or YOLOX_STRIDES
    rows = yolox_grid_count(evidence.input_size, strides)
    if a != rows:
        height, width = evidence.input_size
        raise Unfit(f"a raw YOLOX head at {height}x{width} with strides {list(strides)} has "
                    f"{rows} rows, axis 1 has {a}")
    return Heads("yolox", (name,), classes, strides=tuple(strides))


def _fit_end2end(outputs: Sequence[Output], evidence: Evidence) -> Heads:
    floats = _floats(outputs)
    if len(floats) == 1 and floats[0][1][2] == 6:
        return Heads("end2end", (floats[0][0],), form="k6")
    if len(floats) == 2:
        boxes, scores = _boxes_first(floats)
        (_, q, four), (_, q2, c) = boxes[1], scores[1]
        if four == 4 and q2 == q and (c != 4 or _named_box(boxes[0])):
            classes = _check_classes(c, evidence, "axis 2 of the scores")
            return Heads("end2end", (boxes[0], scores[0]), classes, form="detr",
                         logits=_are_logits(scores[0], evidence))
        raise Unfit(f"DETR outputs are boxes [1, Q, 4] and scores [1, Q, C], got "
                    f"{_shapes(floats)}")
    raise Unfit("end2end is one [1, K, 6] output (x1, y1, x2, y2, score, class) or DETR's "
                "boxes [1, Q, 4] and logits [1, Q, C]")


def _fit_ppyoloe(outputs: Sequence[Output], evidence: Evidence) -> Heads:
    floats = _floats(outputs)
    if len(floats) == 2:
        boxes, scores = _boxes_first(floats)
        (_, n, four), (_, c, n2) = boxes[1], scores[1]
        if four != 4 or n2 != n or c == n:
            raise Unfit(f"PP-YOLOE outputs are boxes [1, N, 4] and scores [1, C, N], got "
                        f"{_shapes(floats)}")
        classes = _check_classes(c, evidence, "axis 1 of the scores")
        return Heads("ppyoloe", (boxes[0], scores[0]), classes, form="boxes_scores")
    if len(floats) >= 4 and len(floats) % 2 == 0:
        return _fit_pico(floats, evidence)
    raise Unfit("ppyoloe is boxes [1, N, 4] + scores [1, C, N], or PicoDet's per-stride pairs "
                "of scores [1, N_s, C] and distributions [1, N_s, 4 (reg_max + 1)]")


def _fit_pico(floats: Sequence[Output], evidence: Evidence) -> Heads:
    by_rows: dict[int, list[Output]] = {}
    for item in floats:
        by_rows.setdefault(item[1][1], []).append(item)
    if any(len(pair) != 2 for pair in by_rows.values()):
        raise Unfit("PicoDet heads come in pairs of the same row count per stride, got "
                    + _shapes(floats))
    levels = sorted(by_rows.items(), key=lambda kv: -kv[0])  # most rows first: stride 8 first
    scores, dists, classes, reg_max = [], [], set(), set()
    for _, pair in levels:
        score, dist = _score_and_distribution(pair, evidence)
        scores.append(score[0])
        dists.append(dist[0])
        classes.add(score[1][2])
        reg_max.add(dist[1][2] // 4 - 1)
    if len(classes) != 1 or len(reg_max) != 1:
        raise Unfit(f"the per-stride heads disagree on classes {sorted(classes)} or reg_max "
                    f"{sorted(reg_max)}")
    strides = _pico_strides([rows for rows, _ in levels], evidence)
    num_classes = _check_classes(classes.pop(), evidence, "axis 2 of the class scores")
    return Heads("ppyoloe", (*scores, *dists), num_classes, form="pico", strides=strides,
                 reg_max=reg_max.pop())


FITS = {"yolo_head": _fit_yolo_head, "yolov8": _fit_yolov8, "yolov5": _fit_yolov5,
        "yolox": _fit_yolox, "end2end": _fit_end2end, "ppyoloe": _fit_ppyoloe}


# ---- narrowing by the graph ---------------------------------------------------------------------


def _narrow(fits: list[Heads], outputs: Sequence[Output],
            evidence: Evidence) -> tuple[Heads, str]:
    layouts = {h.layout for h in fits}
    tails = evidence.tails
    if tails is None:
        raise _ambiguous(fits, outputs, "and there is no graph to tell them apart (an OM-only "
                         "model, or a model given without its ONNX)")
    tail = tails.get(fits[0].names[0])
    if tail is None:
        raise _ambiguous(fits, outputs, "and the graph has no such output")
    why = []
    if "end2end" in layouts:
        keep_e2e = tail.selects
        fits = [h for h in fits if (h.layout == "end2end") == keep_e2e]
        why.append(("a TopK/gather" if keep_e2e else "no TopK or gather")
                   + " in the graph's tail")
    if {"yolox", "yolov5"} <= {h.layout for h in fits}:
        decoded = tail.decodes_boxes
        fits = [h for h in fits if h.layout != ("yolox" if decoded else "yolov5")]
        why.append("the box channels pass through " + tail.describe() if decoded else
                   "the box channels leave the last Conv undecoded (no grid Add, Exp or Pow)")
    if {"yolov8", "yolov5"} <= {h.layout for h in fits}:
        fits = [h for h in fits if h.layout == "yolov8"]  # a < b: see _fit_yolov8
    if len(fits) != 1:
        raise _ambiguous(fits or [], outputs, "and the graph's tail does not tell them apart")
    return fits[0], "told from the graph: " + "; ".join(why)


def _check_decoded(heads: Heads, outputs: Sequence[Output], evidence: Evidence) -> None:
    """A yolov5/yolov8 fit by shape whose graph hands over undecoded conv outputs is a raw head
    (a YOLOX with other strides, say): refuse rather than read grid offsets as pixels."""
    if heads.layout not in ("yolov5", "yolov8") or evidence.tails is None:
        return
    tail = evidence.tails.get(heads.names[0])
    if tail is None or tail.decodes_boxes:
        return
    raise InputError(
        f"the outputs {_shapes(outputs)} read as '{heads.layout}' by shape, but the graph "
        f"does not decode the boxes (its tail after the last Conv: {tail.describe()}): a raw "
        "head such as YOLOX's", hint="for a raw YOLOX head set 'layout: yolox' and 'strides:' "
        "to its FPN strides (e.g. [8, 16, 32, 64] for P6); " + key_hint(ALL_LAYOUTS),
        reference=Ref.BAD_LAYOUT)


# ---- helpers ------------------------------------------------------------------------------------


def _fixed(outputs: Sequence[Output]) -> list[Output] | None:
    items = [(n, tuple(s), d) for n, s, d in outputs]
    if not all(all(isinstance(d, int) for d in s) for _, s, _ in items):
        return None
    return items


def _floats(outputs: Sequence[Output]) -> list[Output]:
    return [o for o in outputs if o[2].startswith("float") and len(o[1]) == 3 and o[1][0] == 1]


def _one_prediction(outputs: Sequence[Output]) -> tuple[str, tuple]:
    floats = _floats(outputs)
    if len(floats) != 1 or len(floats) != len(outputs):
        raise Unfit(f"this layout reads one [1, a, b] float output, the model has "
                    f"{_shapes(outputs)}")
    return floats[0][0], floats[0][1]


def _five_plus_c(a: int, b: int, evidence: Evidence) -> int:
    if b < 6:
        raise Unfit(f"[1, N, 5 + C] needs at least one class column, axis 2 has {b}")
    classes = _check_classes(b - 5, evidence, "columns 5 on of axis 2")
    if evidence.num_classes is None and a <= b:
        raise Unfit(f"[1, N, 5 + C] has more boxes than columns; axis 1 ({a}) is not longer "
                    f"than axis 2 ({b})")
    return classes


def _check_classes(found: int, evidence: Evidence, where: str) -> int:
    if evidence.num_classes is not None and found != evidence.num_classes:
        raise Unfit(f"it reads {found} classes ({where}), the class names are "
                    f"{evidence.num_classes}")
    return found


def _boxes_first(pair: Sequence[Output]) -> tuple[Output, Output]:
    first, second = pair
    if second[1][2] == 4 and (first[1][2] != 4 or _named_box(second[0])):
        return second, first
    return first, second


def _named_box(name: str) -> bool:
    return "box" in name.lower()


def _are_logits(name: str, evidence: Evidence) -> bool:
    tail = evidence.tails.get(name) if evidence.tails is not None else None
    if tail is not None:
        return not tail.activated
    lowered = name.lower()
    if "logit" in lowered:
        return True
    if "score" in lowered or "prob" in lowered:
        return False
    raise InputError(
        f"the outputs read as DETR boxes and class scores, but nothing tells whether '{name}' "
        "holds logits or probabilities: no graph to read, and its name says neither",
        hint="give the model as ONNX (its graph tells whether a Sigmoid ends the branch), or "
             "export the output named 'logits' or 'scores'", reference=Ref.BAD_LAYOUT)


def _score_and_distribution(pair: Sequence[Output], evidence: Evidence
                            ) -> tuple[Output, Output]:
    def could_be_dfl(item: Output) -> bool:
        return item[1][2] % 4 == 0 and item[1][2] >= 8

    dfl = [item for item in pair if could_be_dfl(item)]
    if len(dfl) == 2 and evidence.tails is not None:
        dfl = [item for item in pair if item[0] in evidence.tails
               and not evidence.tails[item[0]].activated]
    if len(dfl) == 2 and evidence.num_classes is not None:
        dfl = [item for item in pair if item[1][2] != evidence.num_classes]
    if len(dfl) != 1:
        raise Unfit(f"cannot tell the class scores from the DFL distributions in "
                    f"{_shapes(pair)}")
    return next(item for item in pair if item is not dfl[0]), dfl[0]


def _pico_strides(rows: Sequence[int], evidence: Evidence) -> tuple[int, ...]:
    if evidence.strides is not None:
        if len(evidence.strides) != len(rows):
            raise Unfit(f"{len(rows)} per-stride heads, 'strides' lists {len(evidence.strides)}")
        return tuple(evidence.strides)
    found = tuple(pico_stride(evidence.input_size, n) for n in rows)
    if None in found:
        height, width = evidence.input_size
        raise Unfit(f"head rows {list(rows)} are not grids of a {height}x{width} input at "
                    f"power-of-two strides")
    return found  # type: ignore[return-value]


def _fits(outputs: Sequence[Output], evidence: Evidence) -> list[Heads]:
    fits = []
    for fit in FITS.values():
        try:
            fits.append(fit(outputs, evidence))
        except Unfit:
            continue
    return fits


def _shapes(outputs: Sequence[Output]) -> str:
    return ", ".join(f"{n} {d}[{','.join(str(x) for x in s)}]" for n, s, d in outputs)


def _layout_hint(outputs: Sequence[Output], evidence: Evidence) -> str:
    fits = _fits(outputs, evidence)
    if fits:
        return "these outputs read as " + " or ".join(f"'{h.layout}'" for h in fits) + \
            ": set 'layout:' to that, or remove it to let the app tell"
    return ("give a detector with one of the layouts yolov8, yolov5, yolo_head, yolox, "
            "end2end, ppyoloe (README: Detector output layouts)")


def _ambiguous(fits: Sequence[Heads], outputs: Sequence[Output], why: str) -> InputError:
    names = " and ".join(f"'{h.layout}'{h.describe()[len(h.layout):]}" for h in fits) \
        or "no layout"
    return InputError(f"the outputs {_shapes(outputs)} fit {names}, {why}",
                      hint=key_hint([h.layout for h in fits] or ALL_LAYOUTS),
                      reference=Ref.BAD_LAYOUT)


def key_hint(layouts: Sequence[str]) -> str:
    """Where to name the layout, and which to name."""
    return ("set 'layout:' in the config (or postprocess.layout in the model's app info): "
            + " or ".join(layouts))


def _class_mismatch(loose: Sequence[Heads], expected: int,
                    outputs: Sequence[Output]) -> InputError:
    found = "; ".join(f"as {h.layout} it has {h.num_classes} classes" for h in loose
                      if h.num_classes is not None) or "its class count differs"
    return InputError(
        f"the outputs {_shapes(outputs)} do not hold {expected} classes, the count of the "
        f"class names: {found}",
        hint="give as many class_names as the model has classes (or fix the app info's "
             "classes)", reference=Ref.BAD_LAYOUT)
