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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from edgefuse.acl.dvpp import jpeg as jpeg_rules
from edgefuse.acl.dvpp.demux import Demuxer
from edgefuse.acl.dvpp.units import BoardUnits, media_api
from edgefuse.errors import BackendUnavailableError, InputError, Ref
from edgefuse.fallback import dvpp_emulation as emulation
from edgefuse.session import Session
from edgefuse.vision.model.feed_pool import FeedPool
from edgefuse.vision.streams.frames import DeferredImage, Frame
from edgefuse.vision.streams.mjpeg_http import MjpegDevice, NotMjpeg, whole_jpeg
from edgefuse.vision.streams.sources import (
    IMAGE_SUFFIXES,
    STREAM_SCHEMES,
    LiveSource,
    Reconnect,
    Source,
)

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
    raise InputError(f"decode: dvpp {why}",
                     hint="decode on the CPU: --decode cpu (or auto) on the command line, "
                          "decode: cpu in an app config; on the host, --backend sim runs DVPP's "
                          "emulation with a YUV420SP AIPP build (edgefuse compile --aipp)",
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


def open_units(backend: str, plan: Any, soc: str, device_id: int = 0, *,
               session: Session | None = None,
               shapes: Mapping[str, tuple[int, ...]] | None = None) -> Any:
    """The media units of ``backend``: the board's (acl) or their emulation (sim).

    With the model's ``session`` the letterbox is written into the session's own input buffers
    (a ``FeedPool`` of sets: one per frame in flight, never one that a frame still refers to)
    and the frame carries that set, so the run copies nothing: on the board the sets are made
    of DVPP memory (``input_buffers(memory=units)``) in the session's context, and VPC's output
    picture is the model input; on sim the emulation writes into the session's buffers."""
    record = plan.preprocess
    options = {"pad_value": record.pad_value, "center": record.center,
               "rounding": record.rounding}
    if backend == "acl":
        context = getattr(session, "context", None)
        units = BoardUnits(plan.yuv, soc, device_id=getattr(session, "device_id", device_id),
                           context=context, **options)
        if session is not None and getattr(session, "in_place", False):
            pool = FeedPool(session, shapes, make=lambda: session.input_buffers(
                shapes, memory=units))
            units.feed_into(pool.take, plan.name)
        return units
    units = emulation.EmulatedUnits(plan.yuv, soc, **options)
    if session is not None:
        units.feed_into(FeedPool(session, shapes).take, plan.name)
    return units


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
        return decode_coded(self._units, data, seconds, jpeg=self._jpeg, count=self._count,
                            name=self.name)

    def _frame(self, index: int, picture: Any, seconds: Any, decode_s: float) -> Frame:
        frame = device_frame(self._units, index, picture, seconds, decode_s, self._count)
        if self.frame_size is None:
            self.frame_size = frame.size
        return frame

    def close(self) -> None:
        if not self._finished:
            self._packets.close()
            self._demuxer.close()
            self._units.close()
        super().close()


def decode_coded(units: Any, data: bytes, seconds: float | None, *, jpeg: bool,
                 count: Callable[..., None], name: str) -> list[tuple[Any, Any]]:
    """One coded frame through the unit; a JPEG JPEGD cannot take is decoded on the CPU instead
    (counted: ``jpegd_fallbacks``), one that no decoder reads is counted in ``decode_errors``
    and skipped."""
    if jpeg and (why := jpeg_rules.jpegd_refusal(data)) is not None:
        image = emulation.cpu_jpeg(data)
        if image is None:
            count("decode_errors")
            return []
        count("jpegd_fallbacks")
        log.debug("%s: decoded on the CPU: %s", name, why)
        return [units.from_cpu(image, seconds)]
    return units.decode(data, seconds)


def device_frame(units: Any, index: int, picture: Any, seconds: Any, decode_s: float,
                 count: Callable[..., None]) -> Frame:
    """The frame of a decoded picture: the model input letterboxed now, the BGR image deferred
    (made, and counted in ``bgr_conversions``, only when a sink reads it); the picture goes
    back to the units when the frame is gone."""
    model_input, geometry = units.letterbox(picture)

    def to_bgr() -> Any:
        count("bgr_conversions")
        return units.bgr(picture)

    image = DeferredImage(units.size(picture), to_bgr)
    keep = getattr(units, "keep_until", None)
    if keep is not None:
        keep(image, picture)
    return Frame(index, image, time.time(), time.perf_counter(), pts=seconds,
                 decode_s=decode_s, device_input=(model_input, geometry))


class DvppDevice:
    """One connection to a live stream, decoded on the media units: ``read`` gives the next
    decoded picture (a live source's device). An HTTP MJPEG camera is read part by part
    (``mjpeg_http``: broken parts and garbage counted in ``decode_errors``, the connection
    kept), any other stream demuxed by PyAV; a transport error ends the device (the live
    source reconnects with backoff)."""

    def __init__(self, url: str, units: Any, timeout_s: float,
                 count: Callable[..., None]) -> None:
        self.url, self._units, self._count = url, units, count
        self._unit_failures = 0  # coded frames the unit could not decode
        self._ready: collections.deque = collections.deque()
        self._mjpeg: MjpegDevice | None = None
        self._demuxer: Demuxer | None = None
        self._packets: Any = None
        self._first: bytes | None = None
        if url.split("://", 1)[0].lower() in ("http", "https"):
            try:
                self._mjpeg = MjpegDevice(url, timeout_s, decode=whole_jpeg)
            except NotMjpeg:
                pass
        if self._mjpeg is not None:
            _, self._first = self._mjpeg.read()  # the first part: the stream's size
            header = jpeg_rules.read_header(self._first or b"")
            size = (header.width, header.height) if header else (0, 0)
            codec, full_range = "mjpeg", True
        else:
            self._demuxer = Demuxer(url, timeout_s=timeout_s)
            self._packets = self._demuxer.packets()
            codec, size = self._demuxer.codec, self._demuxer.size
            full_range = self._demuxer.full_range
        self.codec, self.size, self.full_range = codec, size, full_range
        units.start(codec, size, full_range)

    def read(self) -> tuple[bool, Any]:
        while not self._ready:
            coded = self._next_coded()
            if coded is None:
                return False, None
            data, seconds = coded
            errors = self._units.failed
            self._ready.extend(decode_coded(self._units, data, seconds,
                                            jpeg=self.codec == "mjpeg", count=self._count,
                                            name=self.url))
            self._unit_failures += self._units.failed - errors
        return True, self._ready.popleft()

    @property
    def decode_errors(self) -> int:
        """Parts that were no whole JPEG, garbage between parts (``mjpeg_http``) and frames the
        unit could not decode, on this connection (``LiveSource`` counts them)."""
        return (self._mjpeg.decode_errors if self._mjpeg else 0) + self._unit_failures

    def _next_coded(self) -> tuple[bytes, float | None] | None:
        if self._mjpeg is not None:
            first, self._first = self._first, None
            if first is not None:
                return first, None
            ok, data = self._mjpeg.read()
            return (data, None) if ok else None
        try:
            packet = next(self._packets, None)
        except (OSError, EOFError) as exc:  # PyAV's errors are OSErrors: the transport broke
            log.warning("%s: the stream broke: %s", self.url, exc)
            return None
        return None if packet is None else (packet.data, None)

    def release(self) -> None:
        for picture, _ in self._ready:
            self._units.release(picture)
        self._ready.clear()
        self._units.stop()
        if self._mjpeg is not None:
            self._mjpeg.release()
        if self._demuxer is not None:
            self._packets.close()
            self._demuxer.close()


class DvppLiveSource(LiveSource):
    """A live stream (RTSP, HTTP MJPEG, ...) decoded on DVPP with the CPU live sources'
    machinery (``LiveSource``): a reader thread keeping the newest frame (stale ones counted
    ``dropped``), reconnects with backoff on the monotonic clock (``drops``, ``reconnects``,
    the ``down``/``up``/``lost`` states), ``decode_errors`` from the device."""

    def __init__(self, url: str, plan: Any, units: Any, *, stride: int = 1,
                 reconnect: Reconnect | None = None) -> None:
        self._units = units
        reconnect = reconnect or Reconnect()

        def opener() -> DvppDevice:
            return DvppDevice(url, units, reconnect.timeout_s, self._count)

        try:
            first = opener()
        except BaseException:
            units.close()
            raise
        try:
            emulation.check_colour_range(plan.yuv, url, first.full_range)
        except BaseException:
            first.release()
            units.close()
            raise
        devices = [first]
        super().__init__(url, lambda: devices.pop() if devices else opener(), stride=stride,
                         reconnect=reconnect, frame_size=first.size)

    def _make_frame(self, index: int, image: Any, decode_s: float) -> Frame:
        picture, _ = image
        return device_frame(self._units, index, picture, None, decode_s, self._count)

    def _drop(self, image: Any) -> None:
        self._units.release(image[0])

    def close(self) -> None:
        super().close()
        self._units.close()


def open_dvpp_source(location: Any, plan: Any, units: Any, soc: str, *, stride: int = 1,
                     live: bool | None = None, reconnect: Reconnect | None = None) -> Source:
    """The DVPP source for ``location``, with the CPU sources' reading policy: a stream URL is
    live (a reader thread, the newest frame, reconnects) unless ``live`` is False; a file
    gives every frame."""
    text = str(location)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if live or (live is None and scheme in STREAM_SCHEMES):
        return DvppLiveSource(text, plan, units, stride=stride, reconnect=reconnect)
    return DvppSource(text, plan, soc, stride=stride, units=units)
