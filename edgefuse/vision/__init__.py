"""edgefuse.vision: what camera and video apps share, for edgefuse's apps and users' programs.

Sources (``open_source``), pre-processing with the letterbox geometry as data (``Preprocess``,
``Geometry``), NMS (``edgefuse.vision.nms.nms``), tasks that wrap a session (``Detector``,
``Segmenter``), the threaded ``Pipeline`` with its ``PipelineStats``, and sinks. OpenCV is
imported on first use (``pip install 'edgefuse[vision]'``).

    from edgefuse.vision import Detector, JsonlSink, Pipeline, open_source
    detector = Detector.open("build/", backends=("acl", "cpu"), conf=0.4)
    summary = Pipeline(open_source("clip.mp4"), detector, [JsonlSink("out.jsonl")]).run()
    print(summary.stats.summary())
"""

from __future__ import annotations

from edgefuse.vision.detector import Detector
from edgefuse.vision.model_info import AppInfo
from edgefuse.vision.pipeline import Pipeline, RunSummary
from edgefuse.vision.preprocess import Geometry, Preprocess, letterbox, stretch
from edgefuse.vision.segmenter import Segmenter
from edgefuse.vision.sinks import (
    CallbackSink,
    ImageFolderSink,
    JsonlSink,
    SinkClosed,
    VideoSink,
    WindowSink,
)
from edgefuse.vision.sources import Reconnect, open_source
from edgefuse.vision.stats import PipelineStats, StatsSnapshot

__all__ = [
    "AppInfo", "CallbackSink", "Detector", "Geometry", "ImageFolderSink", "JsonlSink", "Pipeline",
    "PipelineStats", "Preprocess", "Reconnect", "RunSummary", "Segmenter", "SinkClosed",
    "StatsSnapshot", "VideoSink", "WindowSink", "letterbox", "open_source", "stretch",
]
