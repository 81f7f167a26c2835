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

import collections
import importlib
import logging
import time
from pathlib import Path
from typing import Any

from edgefuse.acl.dvpp import jpeg
from edgefuse.acl.dvpp.demux import Demuxer
from edgefuse.acl.dvpp.units import BoardUnits, media_api
from edgefuse.errors import BackendUnavailableError, InputError, Ref
from edgefuse.fallback import dvpp_emulation as emulation
from edgefuse.vision.streams.frames import DeferredImage, Frame
from edgefuse.vision.streams.sources import IMAGE_SUFFIXES, STREAM_SCHEMES, Source

log = logging.getLogger(__name__)

DECODES = ("auto", "cpu", "dvpp")
DVPP_BACKENDS = ("acl", "sim")
JPEG_SUFFIXES = (".jpg", ".jpeg")
_said: set[str] = set()  # what ``auto`` told once per process


def media_api_missing() -> str | None:
    """Why pyACL's media API (``acl.himpi``, CANN's DVPP V2 bindings) is not usable here, or
    None when it is. ``acl`` is one extension module, not a package: ``acl.himpi`` is an
    attribute of it, found by importing ``acl``."""
    try:
        acl = importlib.import_module("acl")
    except ImportError as exc:
        return f"pyACL does not import ({exc})"
    try:
        media_api(acl)
    except BackendUnavailableError as exc:
        return exc.message
    return None


def decide(decode: str, backend: str, plan: Any, source: Any) -> str:
    """``cpu`` or ``dvpp`` for this run; refuses a ``dvpp`` that cannot be, and says once why
    ``auto`` chose the CPU on the board."""
    if decode not in DECODES:
        raise InputError(f"decode must be one of {', '.join(DECODES)}, not {decode!r}",
                         reference=Ref.BAD_CONFIG)
    if decode == "cpu" or (decode == "auto" and backend != "acl"):
        return "cpu"
    why = _why_not(backend, plan, source)
    if why is None:
        return "dvpp"
    if decode == "auto":
        if why not in _said:
            _said.add(why)
            log.warning("decode: auto decodes on the CPU: DVPP %s", why)
        return "cpu"
    raise InputError(f"decode: dvpp {why}", hint="use decode: cpu (or auto)",
                     reference=Ref.BAD_CONFIG)


def _why_not(backend: str, plan: Any, source: Any) -> str | None:
    if backend not in DVPP_BACKENDS:
        return (f"needs the board's media units (backend acl, or its emulation on sim); this "
                f"run is on {backend}")
    if backend == "acl" and (missing := media_api_missing()) is not None:
        return (f"needs pyACL's media API on the board: {missing}; install CANN's toolkit or "
                "NNRT with media data processing V2 and source its set_env.sh, or run on sim "
                "for its emulation")
    if plan.yuv is None or plan.canvas is not None:
        return ("hands the model YUV420SP bytes: compile it with `--aipp` input_format: "
                "YUV420SP (no crop)")
    text = str(source)
    if isinstance(source, int) or not (text.split("://", 1)[0] in STREAM_SCHEMES
                                       or Path(text).is_file()):
        return f"decodes video files, JPEG images and streams; '{text}' is none of them"
    if Path(text).is_file() and Path(text).suffix.lower() in IMAGE_SUFFIXES - set(
            JPEG_SUFFIXES):
        return f"decodes JPEG images (JPEGD), not '{Path(text).suffix}'"
    return None


def open_units(backend: str, plan: Any, soc: str, device_id: int = 0) -> Any:
    """The media units of ``backend``: the board's (acl) or their emulation (sim)."""
    record = plan.preprocess
    options = {"pad_value": record.pad_value, "center": record.center,
               "rounding": record.rounding}
    if backend == "acl":
        return BoardUnits(plan.yuv, soc, device_id=device_id, **options)
    return emulation.EmulatedUnits(plan.yuv, soc, **options)


class DvppSource(Source):
    """Frames of a video file or JPEG image decoded and letterboxed on DVPP (or its
    emulation): demuxed on the CPU, decoded by ``units`` (VDEC/JPEGD), letterboxed by VPC."""

    def __init__(self, location: str | Path, plan: Any, soc: str, *, stride: int = 1,
                 units: Any = None) -> None:
        super().__init__(str(location), stride)
        self._units = units if units is not None else open_units("sim", plan, soc)
        try:
            self._demuxer = Demuxer(location)
            emulation.check_colour_range(plan.yuv, location, self._demuxer.full_range)
            self.fps = self._demuxer.fps if self._demuxer.codec != "mjpeg" else None
            self._units.start(self._demuxer.codec, self._demuxer.size, self._demuxer.full_range)
        except BaseException:
            self._units.close()
            raise
        self._jpeg = self._demuxer.codec == "mjpeg"
        self._packets = self._demuxer.packets()
        self._ready: collections.deque = collections.deque()
        self._ended = False
        self._next = 0

    def read(self, timeout: float | None = None) -> Frame | None:
        if self._finished:
            return None
        start = time.perf_counter()
        while True:
            got = self._next_picture()
            if got is None:
                self.close()
                return None
            picture, seconds = got
            index, self._next = self._next, self._next + 1
            if index % self.stride:
                self._units.release(picture)
                self._count("skipped")
                continue
            return self._frame(index, picture, seconds, time.perf_counter() - start)

    def _next_picture(self) -> tuple[Any, Any] | None:
        while not self._ready:
            if self._ended:
                return None
            packet = next(self._packets, None)
            if packet is None:
                self._ended = True
                self._ready.extend(self._units.finish())
            else:
                self._ready.extend(self._decode(packet.data, packet.seconds))
        return self._ready.popleft()

    def _decode(self, data: bytes, seconds: float | None) -> list[tuple[Any, Any]]:
        """One coded frame through the unit; a JPEG JPEGD cannot take decodes on the CPU
        instead (counted: ``jpegd_fallbacks``), one that no decoder reads is counted in
        ``decode_errors`` and skipped."""
        if self._jpeg and (why := jpeg.jpegd_refusal(data)) is not None:
            image = emulation.cpu_jpeg(data)
            if image is None:
                self._count("decode_errors")
                return []
            self._count("jpegd_fallbacks")
            log.debug("%s: decoded on the CPU: %s", self.name, why)
            return [self._units.from_cpu(image, seconds)]
        return self._units.decode(data, seconds)

    def _frame(self, index: int, picture: Any, seconds: Any, decode_s: float) -> Frame:
        model_input, geometry = self._units.letterbox(picture)
        size = self._units.size(picture)
        if self.frame_size is None:
            self.frame_size = size
        image = DeferredImage(size, lambda: self._to_bgr(picture))
        keep = getattr(self._units, "keep_until", None)
        if keep is not None:
            keep(image, picture)
        return Frame(index, image, time.time(), time.perf_counter(), pts=seconds,
                     decode_s=decode_s, device_input=(model_input, geometry))

    def _to_bgr(self, picture: Any) -> Any:
        self._count("bgr_conversions")
        return self._units.bgr(picture)

    def close(self) -> None:
        if not self._finished:
            self._packets.close()
            self._demuxer.close()
            self._units.close()
        super().close()
