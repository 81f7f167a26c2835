"""The DVPP source: frames decoded and letterboxed by the media units, handed to the model as
the YUV420SP bytes its AIPP build reads (``decode: dvpp`` in the apps' config).

Why a source and not a preprocessing step: with DVPP the frame never exists as BGR on the CPU
before the model; the decode (VDEC/JPEGD) and the letterbox (VPC) happen where the frame is
read, and the model's input comes with the frame (``Frame.device_input``); the pipeline's
preprocess stage only names the feed. The BGR image a sink draws on is converted from the
decoded picture only when something reads ``frame.image`` (a drawing, saving or showing sink, an
event snapshot): a run whose sinks only record (JSON Lines, MQTT, /metrics) converts nothing.
Each conversion is counted in the stream's stats (``bgr_conversions``).

``decide`` turns the config's ``decode: dvpp|cpu|auto`` into the decoder: ``auto`` is DVPP on
the ``acl`` backend where pyACL's media API (``acl.himpi``) imports, else the CPU; ``dvpp`` on
``sim`` is the host emulation (``edgefuse.fallback.dvpp_emulation``); ``dvpp`` on an ONNX
Runtime backend, or for a model whose build does not read YUV420SP, or for a source that is no
video file or stream, is refused with what to do.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

from edgefuse.errors import InputError, Ref
from edgefuse.fallback import dvpp_emulation as emulation
from edgefuse.vision.streams.frames import DeferredImage, Frame
from edgefuse.vision.streams.sources import STREAM_SCHEMES, Source

DECODES = ("auto", "cpu", "dvpp")
DVPP_BACKENDS = ("acl", "sim")


def media_api_present() -> bool:
    """Whether pyACL with its media API (``acl.himpi``, CANN's DVPP V2 bindings) is here."""
    return (importlib.util.find_spec("acl") is not None
            and importlib.util.find_spec("acl.himpi") is not None)


def decide(decode: str, backend: str, plan: Any, source: Any) -> str:
    """``cpu`` or ``dvpp`` for this run; refuses a ``dvpp`` that cannot be."""
    if decode not in DECODES:
        raise InputError(f"decode must be one of {', '.join(DECODES)}, not {decode!r}",
                         reference=Ref.BAD_CONFIG)
    if decode == "cpu" or (decode == "auto" and not (backend == "acl" and media_api_present())):
        return "cpu"
    why = _why_not(backend, plan, source)
    if why is None:
        return "dvpp"
    if decode == "auto":
        return "cpu"
    raise InputError(f"decode: dvpp {why}", hint="use decode: cpu (or auto)",
                     reference=Ref.BAD_CONFIG)


def _why_not(backend: str, plan: Any, source: Any) -> str | None:
    if backend not in DVPP_BACKENDS:
        return (f"needs the board's media units (backend acl, or its emulation on sim); this "
                f"run is on {backend}")
    if plan.yuv is None or plan.canvas is not None:
        return ("hands the model YUV420SP bytes: compile it with `--aipp` input_format: "
                "YUV420SP (no crop)")
    text = str(source)
    if isinstance(source, int) or not (text.split("://", 1)[0] in STREAM_SCHEMES
                                       or Path(text).is_file()):
        return f"decodes video files and streams; '{text}' is neither"
    return None


class DvppSource(Source):
    """Frames of a video file or stream decoded and letterboxed on DVPP (or its emulation)."""

    def __init__(self, location: str | Path, plan: Any, soc: str, *, stride: int = 1) -> None:
        super().__init__(str(location), stride)
        record = plan.preprocess
        emulation.check_colour_range(plan.yuv, location)
        self._vpc = emulation.EmulatedVpc(plan.yuv, soc, pad_value=record.pad_value,
                                          center=record.center, rounding=record.rounding)
        self._pictures = emulation.decoded_pictures(location, soc)
        self._next = 0

    def read(self, timeout: float | None = None) -> Frame | None:
        if self._finished:
            return None
        start = time.perf_counter()
        for _ in range(self.stride - 1 if self._next else 0):
            if next(self._pictures, None) is None:
                self.close()
                return None
            self._next += 1
            self._count("skipped")
        got = next(self._pictures, None)
        if got is None:
            self.close()
            return None
        picture, pts = got
        model_input, geometry = self._vpc.letterbox(picture)
        index, self._next = self._next, self._next + 1
        size = (picture.picture.width, picture.picture.height)
        if self.frame_size is None:
            self.frame_size = size
        image = DeferredImage(size, lambda: self._to_bgr(picture))
        return Frame(index, image, time.time(), time.perf_counter(), pts=pts,
                     decode_s=time.perf_counter() - start,
                     device_input=(model_input, geometry))

    def _to_bgr(self, picture: emulation.DevicePicture) -> Any:
        self._count("bgr_conversions")
        return picture.to_bgr()

    def close(self) -> None:
        super().close()
        self._pictures.close()
