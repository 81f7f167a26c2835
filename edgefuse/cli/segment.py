"""Segment a camera, video file, stream URL or images with a segmentation model.

Class maps are blended over the frames into --save (a video or a folder), pixel counts per class
logged to --jsonl, shown with --show where a display exists. --model takes an .onnx file, a
BUILD_DIR or a catalogue name. The same app runs from a checkout as
`python -m apps.segmentation`.

Examples:
  edgefuse segment --model build/ --source 0 --show
  edgefuse segment --model deeplab.onnx --source clip.mp4 --save out.mp4 --palette voc
  edgefuse segment --model person.onnx --source rtsp://cam/stream --jsonl people.jsonl
"""

from __future__ import annotations

from edgefuse.apps.segmentation import add_arguments, run

__all__ = ["add_arguments", "run"]
