"""Detect objects with a YOLO model in a camera, video file, stream URL or images.

Boxes are drawn into --save (a video or a folder), logged per frame to --jsonl and shown with
--show where a display exists. --model takes an .onnx file, a BUILD_DIR or a catalogue name;
class names, thresholds and the letterbox come from the model's app info, then --config, then
flags. The same app runs from a checkout as `python -m apps.detection`.

Examples:
  edgefuse detect --model build/ --source 0 --show
  edgefuse detect --model yolo.onnx --source clip.mp4 --save out.mp4 --jsonl out.jsonl
  edgefuse detect --model yolov8n:tiny --source 'frames/*.jpg' --save annotated/ --conf 0.4
"""

from __future__ import annotations

from edgefuse.apps.detection import add_arguments, run

__all__ = ["add_arguments", "run"]
