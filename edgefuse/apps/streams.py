"""The streams of an app run: which sources, their names, options and output paths.

Why resolved into one list before anything opens: every check that can fail (a repeated or
unusable name, an output that would overwrite an input or another stream's output, one
``--save`` file for several streams) must fail before the model loads and before any file
exists, and the rest of the run then treats one stream and many alike.

Where streams come from: ``--source`` (repeated for several) replaces the config's ``source:``
and ``sources:``; ``source:`` is one stream, ``sources:`` a list (a source, or ``{name, source
(or url), stride, live, reconnect, max_frames, camera, lines, zones}``). A stream without a name
is ``stream<i>``, ``i`` its position. Options a stream leaves out are the config's (and its
flags'); a stream's own ``lines:``/``zones:`` replace the config's, which otherwise apply to
every stream (cameras that see the same scene share them).

Outputs with several streams: ``--save``/``--jsonl`` with ``{name}`` in them are per stream
(``out/{name}.jsonl``); a folder (an existing one, a path ending in ``/``, or one without a
suffix) holds ``<name>.mp4`` / ``<name>.jsonl``; one file for every stream is refused.
With one stream, ``{name}`` is replaced too and everything else means what it always meant.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from edgefuse._files import check_output_path, check_outputs_spare_inputs
from edgefuse.apps.config import AppConfig, StreamSpec
from edgefuse.errors import InputError, Ref
from edgefuse.vision.media.video_file import VIDEO_SUFFIXES
from edgefuse.vision.streams.multi import check_stream_names
from edgefuse.vision.streams.sources import IMAGE_SUFFIXES, CameraOptions, Reconnect

NAME = "{name}"


@dataclasses.dataclass(frozen=True)
class StreamPlan:
    """One stream as it will run: every option resolved, its output paths named."""

    name: str
    source: str | int
    stride: int
    live: bool | None
    reconnect: Reconnect
    max_frames: int | None
    camera: CameraOptions
    lines: tuple[dict[str, Any], ...] | None  # None: the config's
    zones: tuple[dict[str, Any], ...] | None
    save: str | None
    jsonl: str | None


def plan_streams(config: AppConfig, *, config_file: str | None = None) -> list[StreamPlan]:
    """The config's streams, checked: names, options, and outputs against inputs and each other
    (``check_outputs_spare_inputs``) and against their folders (``check_output_path``)."""
    if config.sources and config.source is not None:
        raise InputError("the config gives both 'source' and 'sources'",
                         hint="list every stream under 'sources:'", reference=Ref.BAD_CONFIG)
    specs = list(config.sources) or (
        [StreamSpec(config.source)] if config.source is not None else [])
    if not specs:
        raise InputError("no source given", hint="pass --source, or set 'source:' in the config",
                         reference=Ref.BAD_CONFIG)
    names = [spec.name or f"stream{index}" for index, spec in enumerate(specs)]
    check_stream_names(names)
    plans = [_plan(config, name, spec, len(specs)) for name, spec in zip(names, specs,
                                                                        strict=True)]
    _check_outputs(plans, config, config_file)
    return plans


def _plan(config: AppConfig, name: str, spec: StreamSpec, count: int) -> StreamPlan:
    options = spec.options
    if not hasattr(config, "lines") and ({"lines", "zones"} & set(options)):
        raise InputError(f"stream '{name}' sets lines or zones, which this app does not count",
                         hint="lines and zones belong to `edgefuse detect`",
                         reference=Ref.BAD_CONFIG)
    return StreamPlan(
        name=name, source=spec.source,
        stride=options.get("stride", config.stride), live=options.get("live", config.live),
        reconnect=options.get("reconnect", config.reconnect),
        max_frames=options.get("max_frames", config.max_frames),
        camera=options.get("camera", config.camera),
        lines=options.get("lines"), zones=options.get("zones"),
        save=_output(config.save, name, count, ".mp4", "--save"),
        jsonl=_output(config.jsonl, name, count, ".jsonl", "--jsonl"))


def _output(template: str | None, name: str, count: int, suffix: str,
            flag: str) -> str | None:
    if template is None:
        return None
    if NAME in template:
        return template.replace(NAME, name)
    if count == 1:
        return template
    path = Path(template)
    if template.endswith(("/", os.sep)) or path.is_dir() or not path.suffix:
        return str(path / f"{name}{suffix}")
    raise InputError(f"{flag} '{template}' names one file for {count} streams",
                     hint=f"put {NAME} in it ({path.with_name(path.stem + '_' + NAME)}"
                          f"{path.suffix}) or give a folder ({path.with_suffix('')}/ gets one "
                          f"<name>{suffix} per stream)", reference=Ref.BAD_OUTPUT_PATH)


def _check_outputs(plans: list[StreamPlan], config: AppConfig, config_file: str | None) -> None:
    several = len(plans) > 1

    def role(flag: str, plan: StreamPlan) -> str:
        return f"{flag} output of {plan.name}" if several else f"{flag} output"

    outputs: dict[str, str | None] = {}
    for plan in plans:
        outputs[role("--save", plan)] = plan.save
        outputs[role("--jsonl", plan)] = plan.jsonl
    check_outputs_spare_inputs(outputs, {
        "model": config.model, "config": config_file,
        **{("source" if not several else f"source of {plan.name}"): plan.source
           for plan in plans if isinstance(plan.source, str)}})
    for plan in plans:
        if plan.jsonl:
            check_output_path(plan.jsonl)
        if plan.save:
            suffix = Path(plan.save).suffix.lower()
            if suffix in IMAGE_SUFFIXES:
                raise InputError(f"--save '{plan.save}' names one image",
                                 hint="give a folder for images (--save out/) or a video name "
                                      f"({', '.join(VIDEO_SUFFIXES)})",
                                 reference=Ref.BAD_OUTPUT_PATH)
            if suffix:
                check_output_path(plan.save)
