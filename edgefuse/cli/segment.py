"""Segment a camera, video file, stream URL or images with a segmentation model.

Class maps (semantic models) or instance masks (YOLOv8-seg) are blended over the frames with a
legend into --save (a video or a folder), pixel counts per class or instances with their masks
logged to --jsonl, shown with --show where a display exists. --model takes an .onnx file, a
BUILD_DIR or a catalogue name; --layout says how to read its outputs when neither its app info
nor its output shapes do. The same app runs from a checkout as `python -m apps.segmentation`.

Examples:
  edgefuse segment --model build/ --source 0 --show
  edgefuse segment --model deeplab.onnx --source clip.mp4 --save out.mp4 --palette voc
  edgefuse segment --model person.onnx --source rtsp://cam/stream --jsonl people.jsonl
  edgefuse segment --model yolov8n-seg.onnx --source clip.mp4 --jsonl out.jsonl --mask-format rle
  edgefuse segment --model u2netp.onnx --source clip.mp4 --save out.mp4   # Sigmoid map: p > 0.5
"""

from __future__ import annotations

from edgefuse.apps.segmentation import add_arguments, run

__all__ = ["add_arguments", "run"]
