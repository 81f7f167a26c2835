"""An event's snapshot: the frame it happened on, as a JPEG, with the object boxed.

Why the raw frame with one box and not the annotated frame: the snapshot answers "which object
was it", so it shows that object alone, boxed and labelled (``#7 person door in``), on the
frame as the camera saw it; the clip (``clips.py``) shows the full overlay around it.

The file is written whole (temporary name, then renamed) before the event that names it is
published, so a subscriber that opens the path finds a complete file.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgefuse._cv import cv2
from edgefuse.vision.streams.staging import Staged, free_name

JPEG_QUALITY = 90
BOX_COLOUR = (0, 200, 255)  # BGR amber: visible on most scenes, not a class colour
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def media_stem(event: dict[str, Any]) -> str:
    """``<UTC time with ms>-<type>-<line or zone>-<track>``: sorts by time, says what happened."""
    at = float(event["time"])
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"
    parts = [stamp, event["type"], event.get("line") or event.get("zone") or "",
             str(event.get("track_id", ""))]
    return "-".join(_UNSAFE.sub("_", part) for part in parts if part)


def event_label(event: dict[str, Any]) -> str:
    """``#7 person door in``: the track, its class, where and which way."""
    parts = [f"#{event['track_id']}" if "track_id" in event else "", event.get("class", ""),
             event.get("line") or event.get("zone") or "", event.get("direction", "")]
    return " ".join(part for part in parts if part)


def boxed(image: np.ndarray, box: Sequence[float] | None, label: str) -> np.ndarray:
    """A copy of ``image`` with ``box`` (x1, y1, x2, y2 pixels) drawn and labelled inside the
    frame, line width and text scale from the frame size."""
    out = image.copy()
    if box is None:
        return out
    height, width = out.shape[:2]
    scale = max(min(width, height) / 720.0, 0.4)
    thick = max(int(round(2 * scale)), 1)
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    x1, x2 = sorted((min(max(x1, 0), width - 1), min(max(x2, 0), width - 1)))
    y1, y2 = sorted((min(max(y1, 0), height - 1), min(max(y2, 0), height - 1)))
    cv2().rectangle(out, (x1, y1), (x2, y2), BOX_COLOUR, thick + 1, cv2().LINE_AA)
    font = cv2().FONT_HERSHEY_SIMPLEX
    (text_w, text_h), base = cv2().getTextSize(label, font, 0.6 * scale, thick)
    left = min(max(x1, 0), max(width - text_w - 4, 0))
    top = y1 - text_h - base - 4 if y1 - text_h - base - 4 >= 0 else min(y2 + 1,
                                                                          height - text_h - base)
    cv2().rectangle(out, (left, top), (left + text_w + 4, top + text_h + base + 4), BOX_COLOUR,
                    -1)
    cv2().putText(out, label, (left + 2, top + text_h + 2), font, 0.6 * scale, (0, 0, 0), thick,
                  cv2().LINE_AA)
    return out


def write_snapshot(folder: Path, event: dict[str, Any], image: np.ndarray,
                   box: Sequence[float] | None) -> Path:
    """The snapshot of ``event`` (``media_stem`` + ``.jpg`` in ``folder``), written whole."""
    ok, data = cv2().imencode(".jpg", boxed(image, box, event_label(event)),
                              [cv2().IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise OSError("OpenCV could not encode the snapshot as JPEG")
    path = free_name(folder / f"{media_stem(event)}.jpg")
    staged = Staged(path, ".tmp")
    try:
        staged.tmp.write_bytes(data.tobytes())
        staged.commit()
    finally:
        staged.discard()
    return path
