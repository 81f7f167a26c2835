"""The whole frame path on real frames: decode, preprocess, infer, postprocess, per stage.

Why beside the model bench (``edgefuse.benchmark``): on a board the model is rarely what sets the
frame rate. The NPU runs a detector in a few milliseconds while the ARM cores decode, letterbox
and copy every frame; a bench on random tensors cannot see that, nor what ``decode: dvpp`` moves
off the cores. This one reads a real video file or stream with the decoder the apps would use
(``decode: dvpp|cpu|auto``, decided as the apps decide it: ``dvpp_source.decide``), feeds the
model as the apps do (the task's preprocessing into the session's own input buffers), and times
each stage of each frame, serially, with two clocks: wall time per stage (``time.perf_counter``)
and the process's CPU time per frame (``time.process_time``: user + system of every thread, so
the work a decoder or ONNX Runtime does on its own threads counts, and the cores' load shows:
CPU ms per frame over wall ms per frame is the number of cores kept busy).

The stages run one after another here, so ``fps`` is the serial rate (one over the sum of the
stages); the apps overlap the stages in threads and approach the slowest stage's rate. The first
``warmup`` frames are not timed (first-run allocations, the decoder's start).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse.errors import InputError, Ref
from edgefuse.model_source import resolve_source
from edgefuse.runtime import DEFAULT_BACKENDS, open_session
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.model.adapter import VisionModel, app_info_of
from edgefuse.vision.segment.segmenter import Segmenter
from edgefuse.vision.streams.dvpp_source import DvppSource, decide, open_units
from edgefuse.vision.streams.sources import ImageSource, Source, open_source

STAGES = ("decode", "preprocess", "infer", "postprocess")
DEFAULT_FRAMES = 100
DEFAULT_SOURCE_WARMUP = 5  # frames not timed; at most half of a folder of images (short_warmup)
TASKS: tuple[type[VisionModel], ...] = (Detector, Segmenter)


@dataclasses.dataclass(frozen=True)
class StageTime:
    """One stage's wall time per frame, in milliseconds."""

    p50_ms: float
    p90_ms: float
    mean_ms: float

    @classmethod
    def of(cls, seconds: Iterable[float]) -> StageTime:
        ms = np.asarray(list(seconds), dtype=np.float64) * 1e3
        p50, p90 = np.percentile(ms, [50, 90])
        return cls(float(p50), float(p90), float(ms.mean()))


@dataclasses.dataclass(frozen=True)
class FrameBenchReport:
    """What ``bench_source`` measured."""

    model: str
    source: str
    backend: str
    task: str
    decode: str
    frames: int
    frame_size: tuple[int, int] | None  # (width, height) of the source's frames
    stages: dict[str, StageTime]
    wall_ms_per_frame: float
    cpu_ms_per_frame: float
    in_place: bool  # the frames were written into the session's own input buffers
    # a camera or stream: it sends frames at its own rate, so the decode stage holds the wait for
    # the next one (the rate FFmpeg reports for a stream is a guess: 25 for any MJPEG over HTTP,
    # so none is shown); the CPU time is still the work
    paced: bool = False

    @property
    def fps(self) -> float:
        return 1000.0 / self.wall_ms_per_frame if self.wall_ms_per_frame else float("inf")

    @property
    def cores_busy(self) -> float:
        """Process CPU time over wall time: how many cores the frame path kept busy."""
        return self.cpu_ms_per_frame / self.wall_ms_per_frame if self.wall_ms_per_frame else 0.0

    def render(self) -> str:
        size = f" {self.frame_size[0]}x{self.frame_size[1]}" if self.frame_size else ""
        lines = [
            f"frame path: {self.model} on {self.backend} ({self.task}), source {self.source}"
            f"{size}, decode {self.decode}, {self.frames} frames timed"
            + (", input written in place" if self.in_place else ""),
            f"  {'stage':<12} {'p50 ms':>9} {'p90 ms':>9} {'mean ms':>9}",
        ]
        for name, stage in self.stages.items():
            lines.append(f"  {name:<12} {stage.p50_ms:9.3f} {stage.p90_ms:9.3f} "
                         f"{stage.mean_ms:9.3f}")
        lines.append(f"  {'frame':<12} {'':>9} {'':>9} {self.wall_ms_per_frame:9.3f}   "
                     f"{self.fps:.1f} fps (stages in series)")
        lines.append(f"  CPU time {self.cpu_ms_per_frame:.3f} ms/frame (process, all threads): "
                     f"{self.cores_busy:.2f} cores busy")
        if self.paced:
            lines.append("  note: a camera or stream sends frames at its own rate: decode "
                         "includes the wait for the next frame and fps is at most the source's; "
                         "the CPU time is the work (a file times the decode alone)")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "source": self.source, "backend": self.backend,
                "task": self.task, "decode": self.decode, "frames": self.frames,
                "frame_size": list(self.frame_size) if self.frame_size else None,
                "stages": {name: dataclasses.asdict(stage) for name, stage in self.stages.items()},
                "wall_ms_per_frame": self.wall_ms_per_frame, "fps": self.fps,
                "cpu_ms_per_frame": self.cpu_ms_per_frame, "cores_busy": self.cores_busy,
                "in_place": self.in_place, "paced": self.paced}


def bench_source(
    model: Any,
    source: str | Path,
    backends: str | Iterable[str] = DEFAULT_BACKENDS,
    *,
    strict: bool = False,
    decode: str = "auto",
    frames: int | None = None,
    seconds: float | None = None,
    warmup: int | None = None,
    session_options: Mapping[str, Any] | None = None,
) -> FrameBenchReport:
    """Time ``frames`` frames (default 100, or the whole file if shorter) or ``seconds`` of
    ``source`` through ``model``'s whole frame path (see the module docstring). ``warmup``:
    frames not timed (default ``DEFAULT_SOURCE_WARMUP``, at most half of a folder of images: a
    handful of photos is timed, not spent on the warm-up)."""
    if frames is not None and frames < 1:
        raise InputError(f"frames must be at least 1, got {frames}", reference=Ref.BAD_USAGE)
    if seconds is not None and seconds <= 0:
        raise InputError(f"seconds must be > 0, got {seconds}", reference=Ref.BAD_USAGE)
    if warmup is not None and warmup < 0:
        raise InputError(f"warmup must be >= 0, got {warmup}", reference=Ref.BAD_USAGE)
    resolved = resolve_source(model)
    task = _open_task(resolved, backends, strict, session_options or {})
    try:
        chosen = decide(decode, task.session.backend, task.plan, source)
        units = None
        if chosen == "dvpp":  # the apps' units: the board's on acl, the emulation on sim
            pool = task.feed_pool
            units = open_units(task.session.backend, task.plan, task.session.soc,
                               session=task.session, shapes=pool.shapes if pool else None)
            frames_in: Source = DvppSource(source, task.plan, task.session.soc, units=units)
        else:
            frames_in = open_source(source, live=False)
        if warmup is None:
            warmup = _default_warmup(frames_in)
        try:
            timed = _run(task, frames_in, warmup,
                         frames if frames is not None or seconds is not None else DEFAULT_FRAMES,
                         seconds)
        finally:
            frames_in.close()
        in_place = (units.in_place > 0 if units is not None else
                    task.feed_pool is not None and task.feed_pool.made > 0)
    finally:
        task.close()
    stages, wall, cpu, size = timed
    return FrameBenchReport(
        model=resolved.label, source=str(source), backend=task.session.backend,
        task=task.task, decode=chosen, frames=len(stages["decode"]), frame_size=size,
        stages={name: StageTime.of(values) for name, values in stages.items()},
        wall_ms_per_frame=wall, cpu_ms_per_frame=cpu, in_place=in_place,
        paced=_paced(source))


def _default_warmup(source: Source) -> int:
    """``DEFAULT_SOURCE_WARMUP`` frames, at most half of a folder of images (its length is known
    before the first read; a video's header count is not to be trusted)."""
    if isinstance(source, ImageSource):
        return min(DEFAULT_SOURCE_WARMUP, source.count // 2)
    return DEFAULT_SOURCE_WARMUP


def _paced(source: str | Path) -> bool:
    """A camera index or a stream URL: frames come when the device sends them."""
    text = str(source)
    return text.isdigit() or "://" in text


def _open_task(source: Any, backends: Any, strict: bool,
               options: Mapping[str, Any]) -> VisionModel:
    """The detector, or the segmenter where the outputs read as one; when neither reads them,
    the refusal says both were tried, with the detector's reason (which names the right app)."""
    info = app_info_of(source)
    session = open_session(source, backends, strict=strict, **dict(options))
    refusal: InputError | None = None
    try:
        for kind in TASKS:
            try:
                return kind(session, info=info, manifest=source.manifest, label=source.label)
            except InputError as exc:
                if exc.reference != Ref.WRONG_MODEL_KIND:
                    raise
                refusal = refusal or exc
        assert refusal is not None  # TASKS is not empty
        raise InputError(
            f"the frame path runs detectors and segmenters; {refusal.message}",
            hint=f"{refusal.hint}; to time any model on tensors, leave out --source"
                 if refusal.hint else "to time any model on tensors, leave out --source",
            reference=Ref.WRONG_MODEL_KIND) from None
    except BaseException:
        session.close()
        raise


def _run(task: VisionModel, source: Source, warmup: int, frames: int | None,
         seconds: float | None) -> tuple[dict[str, list[float]], float, float,
                                          tuple[int, int] | None]:
    stages: dict[str, list[float]] = {name: [] for name in STAGES}
    seen = 0
    wall = cpu = 0.0
    started = time.perf_counter()
    while frames is None or len(stages["decode"]) < frames:
        if seconds is not None and seen > warmup and time.perf_counter() - started >= seconds:
            break
        cpu_start, start = time.process_time(), time.perf_counter()
        frame = source.read()
        if frame is None:
            break
        decoded = time.perf_counter()
        if frame.device_input is not None:  # decode: dvpp made the model's input
            feeds, geometry = task.preprocess_device(*frame.device_input)
        else:
            feeds, geometry = task.preprocess(frame.image)
        prepared = time.perf_counter()
        outputs = task.infer(feeds)
        del feeds  # the input buffers go back to the pool
        inferred = time.perf_counter()
        task.postprocess(outputs, geometry)
        done, cpu_done = time.perf_counter(), time.process_time()
        seen += 1
        if seen <= warmup:
            started = time.perf_counter()
            continue
        for name, seconds_taken in zip(STAGES, (decoded - start, prepared - decoded,
                                                inferred - prepared, done - inferred),
                                       strict=True):
            stages[name].append(seconds_taken)
        wall += done - start
        cpu += cpu_done - cpu_start
    timed = len(stages["decode"])
    if not timed:
        what = (f"only {seen} frame(s), all spent on the {warmup} warm-up frame(s)" if seen else
                "no frame")
        raise InputError(f"the source '{source.name}' gave {what}",
                         hint="give a video or stream with frames (or fewer --warmup frames)"
                              if seen else "check the file or stream with a player; it may be "
                                           "empty or not decodable here",
                         reference=Ref.BAD_SOURCE)
    return stages, wall / timed * 1e3, cpu / timed * 1e3, source.frame_size
