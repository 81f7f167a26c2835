"""Run a detector or segmenter over the sample clip through the pipeline, keeping every result.

The same pipeline the apps run (``edgefuse.vision.streams.pipeline``), with the apps' sinks when
files are asked for and a callback that keeps each frame's result in order, so the demo can score
the run against the clip's ground truth and quote the frame rate the pipeline reached.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgefuse.vision.model.adapter import VisionModel
from edgefuse.vision.streams.pipeline import Pipeline
from edgefuse.vision.streams.sinks import CallbackSink, JsonlSink, Sink, VideoSink
from edgefuse.vision.streams.sources import open_source
from edgefuse.vision.streams.stats import StatsSnapshot


@dataclasses.dataclass(frozen=True)
class ClipRun:
    """Each frame's result in frame order, the run's statistics and the backend that ran it."""

    results: list[Any]
    stats: StatsSnapshot
    backend: str

    @property
    def model_only_fps(self) -> float:
        """The ceiling: frames per second were inference the only stage (1000 / mean infer)."""
        return 1000.0 / self.stats.totals["infer"].mean_ms


def run_on_clip(kind: type[VisionModel], model: Path, clip: Path, backends: Sequence[str], *,
                save: Path | None = None, jsonl: Path | None = None,
                threads: int | None = None, max_frames: int | None = None,
                progress: Callable[[StatsSnapshot], None] | None = None) -> ClipRun:
    """Run ``kind`` (Detector or Segmenter) opened on ``model`` over ``clip`` (its first
    ``max_frames``, default every frame);
    ``progress`` receives the pipeline's statistics twice a second."""
    results: list[Any] = []
    sinks: list[Sink] = [CallbackSink(lambda item: results.append(item.result))]
    options = {} if threads is None else {"threads": threads}
    with kind.open(model, backends=tuple(backends), session_options=options) as task:
        task.warm_up()
        if jsonl is not None:
            sinks.append(JsonlSink(jsonl))
        if save is not None:
            sinks.append(VideoSink(save))
        pipeline = Pipeline(open_source(str(clip)), task, sinks,
                            max_frames=max_frames,
                            report_every=None if progress is None else 0.5, report=progress)
        summary = pipeline.run()
        backend = task.session.backend
    return ClipRun(results, summary.stats, backend)
