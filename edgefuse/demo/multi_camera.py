"""The demo's multi-camera step: generated cameras through one shared detector session, each
tracked and counting at its own line, scored against the identities the generator knows.

Why generated clips: each camera is a clip of the shapes scene generator (the scenes the detector
was trained on), so every object's identity and box is known on every frame; the true line
crossings and the tracking scores (``edgefuse.metrics.track``) come from those labels, not from
anything the run computed. Each camera has its own clip and its own counting line, so a batch
demultiplexed to the wrong stream, or counts shared between streams, shows as a count that
differs from the truth.

How it runs: the streams run together (``MultiPipeline``), each with its own ``Tracked`` task
(its own tracker and line), all of them on the detector's compiled build through one session and
one ``Batcher``. The detector's build has batch gears (``model_stages.BATCH_GEARS``), so the
batcher runs one frame of each camera as one batch; a batch waits for the other camera's frame
at most ``BATCH_WAIT_S`` (a deadline: a camera that stalls holds the other up no longer; the
cameras are clips read frame by frame, so each always has its next frame and the wait costs
nothing but a loaded machine's hiccups, and a camera whose clip ended is no longer waited for),
and a batch that is not a gear runs on the next larger gear, cut back by the session.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from edgefuse.demo.progress import Steps
from edgefuse.metrics.track import TrackFrame, TrackScores, line_crossings, score_tracks
from edgefuse.vision.analytics.line import LineCounter
from edgefuse.vision.analytics.task import Tracked
from edgefuse.vision.detect.detector import Detector
from edgefuse.vision.scenes.shapes import Scene, SceneGenerator
from edgefuse.vision.streams.batching import Batcher, plan_batches
from edgefuse.vision.streams.multi import MultiPipeline, Stream
from edgefuse.vision.streams.sinks import CallbackSink, JsonlSink, VideoSink
from edgefuse.vision.streams.sources import IterableSource

SCENE_SEED = 0
SIZE = (240, 320)  # height, width: the sample clip's
FRAMES = 60
FPS = 15.0
LINE = "line"
BATCH_WAIT_S = 10.0


@dataclasses.dataclass(frozen=True)
class Camera:
    """A generated camera: clip ``clip_index`` of the scene generator, a line ``start`` -> ``end``
    (pixels; ``in`` is from its left-hand to its right-hand side)."""

    name: str
    clip_index: int
    start: tuple[float, float]
    end: tuple[float, float]


CAMERAS = (
    Camera("cam0", 1, (0.0, 120.0), (320.0, 120.0)),  # across the middle, in = downwards
    Camera("cam1", 10, (160.0, 240.0), (160.0, 0.0)),  # up the middle, in = to the right
)


@dataclasses.dataclass(frozen=True)
class CameraOutcome:
    """One camera's counts (``in``/``out``), the truth's, its tracking scores and its files."""

    camera: Camera
    counted: dict[str, int]
    true: dict[str, int]
    scores: TrackScores
    fps: float
    files: tuple[Path, Path]


@dataclasses.dataclass(frozen=True)
class MultiCameraRun:
    cameras: list[CameraOutcome]
    backend: str
    batching: str  # the batch plan's reason
    batches: dict[int, int]  # batch size -> batches run


def camera_clip(camera: Camera) -> list[Scene]:
    """The camera's frames with their labels, rendered from the generator's seed."""
    return list(SceneGenerator(SCENE_SEED, SIZE).clip(camera.clip_index, FRAMES, FPS))


def run_cameras(build_dir: Path, workdir: Path, backend: str, steps: Steps, *,
                threads: int | None = None) -> MultiCameraRun:
    """Every camera of ``CAMERAS`` through the detector build ``build_dir`` on ``backend``,
    annotated videos and JSON Lines into ``workdir`` (``cam0.mp4``, ``cam0.jsonl``, ...)."""
    title = (f"multi-camera: {len(CAMERAS)} generated cameras x {FRAMES} frames, one detector "
             "session, tracked, counting at a line per camera")
    with steps.step(title) as step:
        clips = {camera.name: camera_clip(camera) for camera in CAMERAS}
        options = {} if threads is None else {"threads": threads}
        results: dict[str, list] = {camera.name: [] for camera in CAMERAS}
        with Detector.open(build_dir, backends=(backend,), session_options=options) as detector:
            detector.warm_up()
            plan = plan_batches(detector.session, len(CAMERAS))
            batcher = Batcher(detector.infer, plan, wait_s=BATCH_WAIT_S, streams=len(CAMERAS))
            tasks = {camera.name: Tracked(detector, stream=camera.name, lines=[
                LineCounter(LINE, camera.start, camera.end)]) for camera in CAMERAS}
            streams = [Stream(camera.name, IterableSource(
                (scene.image for scene in clips[camera.name]), name=camera.name, fps=FPS),
                tasks[camera.name], [
                    CallbackSink(lambda item, kept=results[camera.name]: kept.append(item.result)),
                    VideoSink(workdir / f"{camera.name}.mp4", fps=FPS),
                    JsonlSink(workdir / f"{camera.name}.jsonl")]) for camera in CAMERAS]
            try:
                summary = MultiPipeline(streams, batcher=batcher, report_every=None).run()
            finally:
                batcher.close()
            backend_ran = detector.session.backend
        outcomes = [_outcome(camera, clips[camera.name], results[camera.name], tasks[camera.name],
                             summary.streams[camera.name].stats.mean_fps, workdir)
                    for camera in CAMERAS]
        for outcome in outcomes:
            step.say(f"{outcome.camera.name}: in {outcome.counted['in']} out "
                     f"{outcome.counted['out']} (true {outcome.true['in']} / "
                     f"{outcome.true['out']}), IDF1 {outcome.scores.idf1:.3f} -> "
                     f"{outcome.files[0]}")
    return MultiCameraRun(outcomes, backend_ran, plan.why, dict(sorted(batcher.sizes.items())))


def _outcome(camera: Camera, clip: list[Scene], results: list, task: Tracked, fps: float,
             workdir: Path) -> CameraOutcome:
    truth = [TrackFrame(scene.ids, scene.boxes) for scene in clip]
    predicted = [TrackFrame(result.tracks.ids, result.tracks.boxes) for result in results]
    totals = task.lines[0].totals()
    return CameraOutcome(
        camera, {direction: sum(totals[direction].values()) for direction in ("in", "out")},
        line_crossings(truth, camera.start, camera.end), score_tracks(truth, predicted), fps,
        (workdir / f"{camera.name}.mp4", workdir / f"{camera.name}.jsonl"))
