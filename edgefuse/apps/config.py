"""The apps' configuration: a YAML file, then command-line flags over it, every value checked.

Why typed and strict: a YAML typo (``conf_thres`` for ``conf``) silently ignored means a run with
the default threshold and no warning. Unknown keys are refused with the closest known key, wrong
types with the key, the value and the file (``error[bad-config]``, exit 2). Flags use the same
checks, so ``--conf 2`` fails like ``conf: 2``.

Precedence: the dataclass defaults < the config file (``--config``; ``python -m apps.detection``
passes ``apps/detection/config.yaml``) < flags. Values left null defer to the model: thresholds
and class names come from the model's app info when it carries them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from edgefuse import _records as rec
from edgefuse.apps import analytics
from edgefuse.errors import InputError, Ref
from edgefuse.model_info import ACTIVATIONS, BOX_FORMATS, LAYOUTS, check_strides
from edgefuse.runtime import BACKENDS, DEFAULT_BACKENDS
from edgefuse.vision.draw import palette
from edgefuse.vision.draw.overlay import FILL_ALPHA
from edgefuse.vision.media.clips import ClipOptions
from edgefuse.vision.media.retention import Retention
from edgefuse.vision.streams.dvpp_source import DECODES
from edgefuse.vision.streams.live_files import Rotation
from edgefuse.vision.streams.pipeline import STOP_TIMEOUT_S
from edgefuse.vision.streams.sources import CameraOptions, Reconnect
from edgefuse.vision.track.byte_tracker import TrackerOptions

_REF = Ref.BAD_CONFIG
# OpenCV takes its stream timeouts in whole milliseconds, and 0 as "wait forever".
MIN_TIMEOUT_S = 0.001


@dataclasses.dataclass(frozen=True)
class StreamSpec:
    """One entry of ``sources:``: the source, its name (None: ``stream<i>``) and the per-stream
    options it sets (``STREAM_OPTIONS``; the ones it leaves out are the config's own)."""

    source: str | int
    name: str | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


STREAM_OPTIONS = ("stride", "live", "reconnect", "max_frames", "camera", "lines", "zones")


@dataclasses.dataclass(frozen=True)
class AppConfig:
    """What both apps take (see apps/*/config.yaml for the commented YAML)."""

    model: str | None = None
    source: str | int | None = None
    sources: tuple[StreamSpec, ...] = ()  # several streams (edgefuse.apps.streams)
    batch: int | None = None  # frames of different streams per model run; null: one per stream
    batch_wait_ms: float | None = None  # a batch's wait for more streams' frames (null: the
    # model's fixed cost per run, fitted; 0: greedy)
    backend: tuple[str, ...] = DEFAULT_BACKENDS
    decode: str = "auto"  # dvpp | cpu | auto: frames decoded and letterboxed on the board's DVPP
    threads: int | None = None
    device_id: int = 0
    class_names: tuple[str, ...] | None = None
    preprocess: dict[str, Any] = dataclasses.field(default_factory=dict)
    stride: int = 1
    live: bool | None = None
    max_frames: int | None = None
    save: str | None = None
    jsonl: str | None = None
    show: bool = False
    jsonl_rotate: Rotation | None = Rotation()  # live sources: the JSON Lines' rotation
    segment_s: float | None = 300.0  # live sources: --save video in segments of this length
    segment_keep: int | None = None  # live sources: video segments kept (null: all)
    retain: Retention | None = None  # live sources: each output's retention (null: keep all)
    queue_size: int = 2
    in_flight: int | None = None  # live sources; null: from the measured stage times
    stop_timeout_s: float = STOP_TIMEOUT_S  # a stop drops frames in flight after this long
    stats_every: float = 5.0
    serial: bool = False
    reconnect: Reconnect = Reconnect()
    camera: CameraOptions = CameraOptions()


@dataclasses.dataclass(frozen=True)
class DetectionConfig(AppConfig):
    conf: float | None = None
    iou: float | None = None
    max_det: int | None = None
    classes: tuple[int | str, ...] | None = None
    agnostic_nms: bool | None = None
    line_width: int | None = None
    layout: str | None = None
    strides: tuple[int, ...] | None = None
    box_format: str | None = None  # end2end [1, K, 6] boxes: xyxy or cxcywh (model_info)
    # tracking, counting and the live view (edgefuse.apps.analytics; docs/apps.md)
    track: TrackerOptions | None = None
    lines: tuple[dict[str, Any], ...] = ()
    zones: tuple[dict[str, Any], ...] = ()
    events: dict[str, Any] = dataclasses.field(default_factory=dict)
    event_media: dict[str, Any] | None = None  # snapshots (and clips) of events: folder, limits
    clips: ClipOptions | None = None
    serve: tuple[str, int] | None = None
    serve_token: str | None = None


@dataclasses.dataclass(frozen=True)
class SegmentationConfig(AppConfig):
    layout: str | None = None
    activation: str | None = None
    palette: str | tuple[Any, ...] = "distinct"
    alpha: float = FILL_ALPHA
    legend: bool = True
    background: int | None = None
    threshold: float = 0.5
    conf: float | None = None
    iou: float | None = None
    max_det: int | None = None
    mask_format: str = "polygon"
    retina_masks: bool = False  # yolov8_seg masks made at frame resolution (Ultralytics' option)


# ---- value checks ------------------------------------------------------------------------------


def _sources(value: Any, key: str, where: str) -> tuple[StreamSpec, ...]:
    """``sources:``: sources, or mappings ``{name, source (or url), <STREAM_OPTIONS>}``."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not value:
        raise rec.bad(f"'{key}' must be a non-empty list of sources or {{name, source, ...}} "
                      f"entries, got {value!r}", where, _REF)
    specs = []
    for index, item in enumerate(value):
        at = f"{key}[{index}]"
        if not isinstance(item, Mapping):
            specs.append(StreamSpec(_source(item, at, where)))
            continue
        data = dict(rec.check_mapping(item, f"{where} '{at}'", _REF))
        rec.check_keys(data, ("name", "source", "url", *STREAM_OPTIONS), f"{where} '{at}'", _REF)
        if ("source" in data) == ("url" in data):
            raise rec.bad(f"'{at}' needs one of 'source' or 'url'", where, _REF)
        source = _source(data.pop("source") if "source" in data else data.pop("url"),
                         f"{at}.source", where)
        name = _text(data.pop("name"), f"{at}.name", where) if "name" in data else None
        options = {option: CHECKS[option](v, f"{at}.{option}", where)
                   for option, v in data.items()}
        specs.append(StreamSpec(source, name, options))
    return tuple(specs)


def _optional(check: Callable[[Any, str, str], Any]) -> Callable[[Any, str, str], Any]:
    return lambda value, key, where: None if value is None else check(value, key, where)


def _text(value: Any, key: str, where: str) -> str:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if not isinstance(value, str) or not value:
        raise rec.bad(f"'{key}' must be a non-empty string, got {value!r}", where, _REF)
    return value


def _source(value: Any, key: str, where: str) -> str | int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return _text(value, key, where)


def _int(low: int) -> Callable[[Any, str, str], int]:
    return lambda value, key, where: int(rec.number(value, key, where, _REF, low=low,
                                                    integer=True))


def _fraction(value: Any, key: str, where: str) -> float:
    return float(rec.number(value, key, where, _REF, low=0, high=1))


def _boolean(value: Any, key: str, where: str) -> bool:
    return rec.boolean(value, key, where, _REF)


def _backends(value: Any, key: str, where: str) -> tuple[str, ...]:
    names = value.split(",") if isinstance(value, str) else value
    names = tuple(rec.strings(names, key, where, _REF))
    names = tuple(n.strip() for n in names if n.strip())
    unknown = [n for n in names if n not in BACKENDS]
    if unknown or not names:
        raise rec.bad(f"'{key}' names unknown backend(s) {unknown or names}", where, _REF,
                      hint=f"known backends: {', '.join(BACKENDS)}")
    return names


def _names(value: Any, key: str, where: str) -> tuple[str, ...]:
    return rec.strings(value.split(",") if isinstance(value, str) else value, key, where, _REF)


def _classes(value: Any, key: str, where: str) -> tuple[int | str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if isinstance(items, int) and not isinstance(items, bool):
        items = [items]
    if not isinstance(items, (list, tuple)) or not items:
        raise rec.bad(f"'{key}' must be a list of class ids or names, got {value!r}", where, _REF)
    out: list[int | str] = []
    for item in items:
        if isinstance(item, str) and item.strip().isdigit():
            item = int(item.strip())
        if isinstance(item, bool) or not isinstance(item, (int, str)) or item == "":
            raise rec.bad(f"'{key}' holds {item!r}, not a class id or name", where, _REF)
        out.append(item.strip() if isinstance(item, str) else item)
    return tuple(out)


def _strides(value: Any, key: str, where: str) -> tuple[int, ...]:
    if isinstance(value, str):
        value = [int(v) if v.strip().isdigit() else v for v in value.split(",")]
    return check_strides(value, key, where, _REF)


def _positive_float(value: Any, key: str, where: str) -> float:
    return float(rec.number(value, key, where, _REF, low=0))


def _mapping(value: Any, key: str, where: str) -> dict[str, Any]:
    return dict(rec.check_mapping(value, f"{where} '{key}'".strip(), _REF))


def _record(kind: type) -> Callable[[Any, str, str], Any]:
    def check(value: Any, key: str, where: str) -> Any:
        if isinstance(value, kind):
            return value
        data = _mapping(value, key, where)
        names = {f.name for f in dataclasses.fields(kind)}
        rec.check_keys(data, names, f"{where} '{key}'".strip(), _REF)
        merged = {**dataclasses.asdict(kind()), **data}
        for name, current in merged.items():
            if current is not None and name != "fourcc":
                rec.number(current, f"{key}.{name}", where, _REF, low=0)
        timeout = merged.get("timeout_s")
        if timeout is not None and not MIN_TIMEOUT_S <= timeout < math.inf:
            raise rec.bad(f"'{key}.timeout_s' must be a finite number of seconds of at least "
                          f"{MIN_TIMEOUT_S}, got {timeout!r}", where, _REF,
                          hint="OpenCV reads 0 as no timeout: a server that accepts and never "
                               "answers would hang the app forever")
        if merged.get("fourcc") is not None and (
                not isinstance(merged["fourcc"], str) or len(merged["fourcc"]) != 4):
            raise rec.bad(f"'{key}.fourcc' must be four characters such as MJPG", where, _REF)
        return kind(**merged)
    return check


def _one_of(choices: tuple[str, ...]) -> Callable[[Any, str, str], str]:
    return lambda value, key, where: rec.choice(value, key, choices, where, _REF)


def _rotation(value: Any, key: str, where: str) -> Rotation:
    if isinstance(value, Rotation):
        return value
    data = _mapping(value, key, where)
    rec.check_keys(data, ("max_mb", "keep"), f"{where} '{key}'".strip(), _REF)
    merged = {**dataclasses.asdict(Rotation()), **data}
    max_mb = rec.number(merged["max_mb"], f"{key}.max_mb", where, _REF, low=0)
    if max_mb <= 0:
        raise rec.bad(f"'{key}.max_mb' must be above 0, got {max_mb!r}", where, _REF,
                      hint=f"set {key}: null to never rotate")
    return Rotation(float(max_mb), int(rec.number(merged["keep"], f"{key}.keep", where, _REF,
                                                  low=0, integer=True)))


# Sizes as systemd's (SystemMaxUse=500M): K, M, G, T are powers of 1024; ages as its time spans.
_BYTE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_AGE_UNITS = {"": 1, "s": 1, "min": 60, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_QUANTITY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def _quantity(value: Any, key: str, where: str, units: dict[str, int], example: str) -> float:
    """A number (bytes, seconds) or a string with a unit (``500M``, ``7d``), above 0."""
    if isinstance(value, str):
        match = _QUANTITY.fullmatch(value)
        if match is None or match.group(2) not in units:
            raise rec.bad(f"'{key}' must be a number or a number with one of the units "
                          f"{', '.join(u for u in units if u)}, got {value!r}", where, _REF,
                          hint=f"for example {key.rpartition('.')[2]}: {example}")
        number = float(match.group(1)) * units[match.group(2)]
    else:
        number = float(rec.number(value, key, where, _REF, low=0))
    if not 0 < number < math.inf:
        raise rec.bad(f"'{key}' must be above 0 and finite, got {value!r}", where, _REF,
                      hint=f"set {key}: null for no such limit")
    return number


def _retain(value: Any, key: str, where: str) -> Retention:
    """``{max_bytes, max_age, min_free_bytes}``, each optional (null or left out: no limit)."""
    if isinstance(value, Retention):
        return value
    data = _mapping(value, key, where)
    rec.check_keys(data, ("max_bytes", "max_age", "min_free_bytes"), f"{where} '{key}'".strip(),
                   _REF)
    if not any(data.get(limit) is not None for limit in data):
        raise rec.bad(f"'{key}' sets no limit", where, _REF,
                      hint=f"give max_bytes, max_age or min_free_bytes, or set {key}: null")

    def size(limit: str) -> int | None:
        given = data.get(limit)
        return None if given is None else int(_quantity(given, f"{key}.{limit}", where,
                                                        _BYTE_UNITS, "2G"))

    age = data.get("max_age")
    return Retention(max_bytes=size("max_bytes"), min_free_bytes=size("min_free_bytes"),
                     max_age_s=None if age is None else _quantity(age, f"{key}.max_age", where,
                                                                  _AGE_UNITS, "7d"))


def _finite(number: float, key: str, where: str) -> float:
    if not math.isfinite(number):
        raise rec.bad(f"'{key}' must be finite, got {number!r}", where, _REF)
    return number


def _above_zero(value: Any, key: str, where: str) -> float:
    number = float(rec.number(value, key, where, _REF, low=0))
    if number <= 0:
        raise rec.bad(f"'{key}' must be above 0, got {value!r}", where, _REF)
    return number


def _palette(value: Any, key: str, where: str) -> str | tuple[Any, ...]:
    """A palette name or colour list that draws: checked now, not at the first drawn frame."""
    if isinstance(value, str):
        checked: str | tuple[Any, ...] = value
    elif isinstance(value, (list, tuple)) and value:
        checked = tuple(tuple(v) if isinstance(v, list) else v for v in value)
    else:
        raise rec.bad(f"'{key}' must be a palette name or a list of colours, got {value!r}",
                      where, _REF)
    try:
        palette.palette(checked)
    except InputError as exc:
        raise rec.bad(f"'{key}': {exc.message}", where, Ref.BAD_PALETTE,
                      hint=exc.hint) from None
    return checked


CHECKS: dict[str, Callable[[Any, str, str], Any]] = {
    "model": _optional(_text),
    "source": _optional(_source),
    "sources": _sources,
    "batch": _optional(_int(1)),
    "batch_wait_ms": _optional(lambda value, key, where: _finite(
        _positive_float(value, key, where), key, where)),
    "backend": _backends,
    "decode": lambda value, key, where: rec.choice(value, key, DECODES, where, _REF),
    "threads": _optional(_int(1)),
    "device_id": _int(0),
    "class_names": _optional(_names),
    "preprocess": _mapping,
    "stride": _int(1),
    "live": _optional(_boolean),
    "max_frames": _optional(_int(1)),
    "save": _optional(_text),
    "jsonl": _optional(_text),
    "show": _boolean,
    "jsonl_rotate": _optional(_rotation),
    "segment_s": _optional(_above_zero),
    "segment_keep": _optional(_int(1)),
    "retain": _optional(_retain),
    "queue_size": _int(1),
    "in_flight": _optional(_int(1)),
    "stop_timeout_s": _above_zero,
    "stats_every": _positive_float,
    "serial": _boolean,
    "reconnect": _record(Reconnect),
    "camera": _record(CameraOptions),
    "conf": _optional(_fraction),
    "iou": _optional(_fraction),
    "max_det": _optional(_int(1)),
    "classes": _optional(_classes),
    "agnostic_nms": _optional(_boolean),
    "line_width": _optional(_int(1)),
    "strides": _optional(_strides),
    "box_format": _optional(_one_of(BOX_FORMATS)),
    "track": analytics.check_track,
    "lines": analytics.check_lines,
    "zones": analytics.check_zones,
    "events": analytics.check_events,
    "event_media": _optional(analytics.check_event_media),
    "clips": analytics.check_clips,
    "serve": analytics.check_serve,
    "serve_token": _optional(_text),
    "palette": _palette,
    "alpha": _fraction,
    "legend": _boolean,
    "layout": _optional(_one_of(LAYOUTS)),
    "activation": _optional(_one_of(ACTIVATIONS)),
    "background": _optional(_int(0)),
    "threshold": _fraction,
    "mask_format": _one_of(("polygon", "rle")),
    "retina_masks": _boolean,
}


# ---- loading -----------------------------------------------------------------------------------


def from_mapping(kind: type[AppConfig], data: Mapping[str, Any], where: str,
                 base: AppConfig | None = None) -> Any:
    """``base`` (or the defaults) with the keys of ``data`` replaced, each value checked."""
    rec.check_mapping(data, where, _REF)
    known = [f.name for f in dataclasses.fields(kind)]
    rec.check_keys(data, known, where, _REF)
    values = {key: CHECKS[key](value, key, where) for key, value in data.items()}
    return dataclasses.replace(base or kind(), **values)


def load(kind: type[AppConfig], path: str | os.PathLike[str]) -> Any:
    """The config in the YAML file ``path`` (keys not given keep their defaults)."""
    data = rec.read_yaml(path, "config", _REF)
    return from_mapping(kind, data or {}, str(path))
