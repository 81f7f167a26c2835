"""The board's media units behind a DVPP source: VDEC/JPEGD and VPC on ``BoardDvpp``, with the
same calls as the ``sim`` emulation (``edgefuse.fallback.dvpp_emulation.EmulatedUnits``).

Why a pool of decoded pictures: VDEC writes each picture into a buffer given with a send and
hands it back later (reference frames delay it); the picture must then live until the frame's
BGR image is made or the frame is gone (the image is made only when a sink reads it). A picture
goes back to the pool when its frame's deferred image is collected (``weakref.finalize``) or the
source skips it; the pool grows on demand, so a slow sink costs memory, never a stall.

pyACL: ``acl.init`` once per process (``acl.resources.RUNTIME``), ``acl.rt.set_device`` /
``create_context`` (aclpythondevg_01_0011/0015) for this source's own context, made current in
whichever thread reads (the reader thread of a live stream, the pipeline's capture thread), and
``acl.himpi.sys_init`` after them ("媒体数据处理V2" 开发流程: the media system needs the device
set).

VPC writes the model input where the model reads it (``feed_into``): the session's input sets are
allocated from DVPP's memory (``AclSession.input_buffers(memory=units)``: these units are the
allocator, ``malloc``/``free``), and each frame's letterbox is pasted straight into a free set, so
a frame reaches ``execute`` without an ``acl.rt.memcpy`` or a CPU copy. What that needs:
- One device, one context. DVPP memory belongs to the process and the device the media system
  runs on (hi_mpi_dvpp_malloc: "仅支持在单个进程内使用", ``dev_id`` reserved, the device of
  aclrtSetDevice: aclpythondevg_01_0416, DK A2 aclcppdevg_03_0725), and the threads of a process
  may share one context created on a device ("该进程内的多个线程可共用在此Device上显式创建的
  Context", aclrtCreateContext, DK A2 aclcppdevg_03_0038). So given the session's context
  (``context=``) the units create none of their own: the media calls, the model input's memory
  and ``execute`` all run in the session's context on its device, as Ascend/samples' Python
  samples do with the one context their ``AclResource`` creates for DVPP and the model alike
  (python/common/atlas_utils/acl_resource.py). The session must outlive its units.
- Lifetime. A set in flight is never written: sets come from the caller's ``take`` (the
  vision layer's FeedPool: a set is lent until no frame refers to it). The media system ends
  only after the session gave back every set's memory (``free``): hi_mpi_sys_exit comes after
  the last hi_mpi_dvpp_free, even when the source closes before the session (the apps' order).
- The pad is painted once per set and source size (``acl.rt.memset``): VPC pastes only the
  content, so the bars it leaves stay grey from frame to frame.
Without a set (every set in use, no ``feed_into``, or a session whose memory is not the
device's: a PCIe card), VPC writes the units' own model buffer and the input is read back into
a host array (one ``acl.rt.memcpy``), said once.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from edgefuse.acl.compile.aipp import AippSpec
from edgefuse.acl.dvpp import geometry
from edgefuse.acl.dvpp.board import BoardDvpp, DeviceBuffer
from edgefuse.acl.dvpp.jpeg import read_header
from edgefuse.acl.resources import RUNTIME, CurrentContext, Resources
from edgefuse.acl.return_codes import check
from edgefuse.errors import BackendUnavailableError, ToolError
from edgefuse.fallback.dvpp_emulation import bgr_from_planes, nv12_from_bgr
from edgefuse.preprocess import Geometry

log = logging.getLogger(__name__)

PTS_UNITS = 1_000_000  # a packet's time through VDEC, in microseconds
DECODE_CHANNEL = 0


def media_api(acl: Any) -> Any:
    """pyACL's media API (``acl.himpi``, CANN's 媒体数据处理V2 bindings), or why not."""
    himpi = getattr(acl, "himpi", None)
    if himpi is None:
        raise BackendUnavailableError(
            "this pyACL has no media API (acl.himpi)",
            hint="decode: dvpp needs CANN's media data processing V2 (CANN >= 6.3 on the Atlas "
                 "200I/500 A2: install the toolkit or NNRT and source set_env.sh); or use "
                 "decode: cpu")
    return himpi


class BoardPicture:
    """A decoded picture in DVPP memory and its time."""

    def __init__(self, buffer: DeviceBuffer, seconds: float | None) -> None:
        self.buffer, self.seconds = buffer, seconds


class BoardUnits:
    """VDEC/JPEGD + VPC on the board for one stream, into an AIPP YUV420SP build's input."""

    def __init__(self, spec: AippSpec, soc: str, *, device_id: int = 0, pad_value: int = 114,
                 center: bool = True, rounding: str = "round",
                 context: CurrentContext | None = None) -> None:
        """``context``: the session's, shared (see the module docstring); else the units create
        their own on ``device_id``."""
        self.soc, self.spec = soc, spec
        self._letterbox_options = {"pad_value": pad_value, "center": center,
                                   "rounding": rounding}
        gray = spec.frame_from_bgr(np.full((2, 2, 3), pad_value, np.uint8))
        self._pad = (int(gray[0, 0]), int(gray[-1, 0]), int(gray[-1, 1]))
        if self._pad[1] != self._pad[2]:
            raise ToolError("the letterbox's pad is not grey in the build's YUV (U != V): "
                            "acl.rt.memset fills one byte value")
        self._resources = Resources()
        self._acl = acl = RUNTIME.acquire()
        self._resources.push("release pyACL", RUNTIME.release)
        try:
            himpi = media_api(acl)
            if context is not None:
                self._context = context
                context.make_current(acl)
            else:
                self._context = self._own_context(device_id)
            self._dvpp = BoardDvpp(himpi, soc, acl=acl)
            self._resources.push("close the media units", self._dvpp.close)
            width, height = spec.source_size
            self._model = self._dvpp.malloc(geometry.picture(width, height, soc, "vpc_out"))
            self._model_shape = (height * 3 // 2, width)
        except BaseException:
            self._resources.release_after_error()
            raise
        self._pool: list[DeviceBuffer] = []
        self._held: set[int] = set()  # pictures whose frames may still want their image
        self._closing = False
        self._picture: geometry.Picture | None = None
        self._codec: str | None = None
        self._full_range = False
        self.failed = 0  # pictures VDEC/JPEGD flagged as not decoded (frame_flag != 0)
        self._take_set: Callable[[], Any] | None = None  # a free set of the session's inputs
        self._input_name = ""
        self._lent: dict[int, DeviceBuffer] = {}  # DVPP memory the session's sets are made of
        self._painted: dict[int, geometry.Picture] = {}  # model buffer -> source it is padded for
        self._said_copied = False
        self.in_place = 0  # frames VPC wrote into a set of the session's input buffers

    def _own_context(self, device_id: int) -> CurrentContext:
        acl = self._acl
        check(acl.rt.set_device(device_id), "acl.rt.set_device")
        self._resources.push_call("acl.rt.reset_device", acl.rt.reset_device, device_id)
        handle, ret = acl.rt.create_context(device_id)
        check(ret, "acl.rt.create_context")
        context = CurrentContext(handle)
        self._resources.push("forget the context", context.forget)
        self._resources.push_call("acl.rt.destroy_context", acl.rt.destroy_context, handle)
        return context

    def feed_into(self, take: Callable[[], Any], input_name: str) -> None:
        """Letterbox into sets of the session's input buffers: ``take()`` gives a free set (its
        ``device_addresses[input_name]`` DVPP memory these units allocated, see ``malloc``) or
        None while every set is in use."""
        self._take_set, self._input_name = take, input_name

    def malloc(self, size: int) -> int:
        """DVPP memory for one input of a session's set (``input_buffers(memory=units)``):
        ``acl.himpi.dvpp_malloc``, 128-byte aligned, the size rounded up as the page asks when
        "媒体数据处理的输出作为模型推理的输入" (aclpythondevg_01_0416)."""
        self._context.make_current(self._acl)
        buffer = self._dvpp.malloc_bytes(size)
        self._lent[buffer.address] = buffer
        return buffer.address

    def free(self, address: int) -> None:
        """The session gave a set's memory back (it closes); the last one after ``close`` ends
        the media session."""
        buffer = self._lent.pop(address)
        self._painted.pop(address, None)
        if not self._dvpp.closed:
            self._context.make_current(self._acl)
            self._dvpp.free(buffer)
        if self._closing and not self._held and not self._lent:
            self._tear_down()

    @property
    def model_buffer(self) -> DeviceBuffer:
        """The DVPP buffer VPC letterboxes into (the model's YUV420SP input)."""
        return self._model

    def start(self, codec: str, size: tuple[int, int], full_range: bool) -> None:
        self._context.make_current(self._acl)
        self._codec, self._full_range = codec, full_range
        self._dvpp.open_vdec(DECODE_CHANNEL, codec, *size)
        self._resize_pool(size)

    def stop(self) -> None:
        """The stream ended or dropped: its decode channel goes (``start`` opens the next)."""
        self._context.make_current(self._acl)
        self._pool.extend(buffer for buffer in self._dvpp.close_vdec()
                          if buffer.picture == self._picture)

    def decode(self, data: bytes, seconds: float | None) -> list[tuple[BoardPicture, Any]]:
        self._context.make_current(self._acl)
        if self._codec == "mjpeg":  # a still's size can change from one to the next
            header = _jpeg_size(data)
            if header is not None:
                self._resize_pool(header)
        pts = 0 if seconds is None else round(seconds * PTS_UNITS)
        self._dvpp.send(data, self._take(), pts)
        return self._collect(self._dvpp.receive)

    def finish(self) -> list[tuple[BoardPicture, Any]]:
        self._context.make_current(self._acl)
        pictures = []
        for got in self._dvpp.finish():
            pictures.extend(self._picture_of(got))
        return pictures

    def from_cpu(self, image: np.ndarray, seconds: float | None
                 ) -> tuple[BoardPicture, float | None]:
        """A frame the CPU decoded, uploaded as VPC's input picture."""
        self._context.make_current(self._acl)
        nv12, width, height = nv12_from_bgr(image)
        picture = geometry.picture(width, height, self.soc, "vpc_in")
        buffer = self._dvpp.malloc(picture)
        padded = np.zeros((picture.stride_h * 3 // 2, picture.stride_w), np.uint8)
        padded[:height, :width] = nv12[:height]
        padded[picture.stride_h:picture.stride_h + height // 2, :width] = nv12[height:]
        self._dvpp.upload(padded, buffer)
        return BoardPicture(buffer, seconds), seconds

    def letterbox(self, picture: BoardPicture) -> tuple[Any, Geometry]:
        """VPC's letterbox of ``picture``: into a free set of the session's input buffers (the
        set is returned: the model reads it where VPC wrote it), else into the units' own buffer
        read back into a host array."""
        self._context.make_current(self._acl)
        buffers = self._take_set() if self._take_set is not None else None
        if buffers is not None:
            array = buffers[self._input_name]
            out = DeviceBuffer(buffers.device_addresses[self._input_name], array.nbytes,
                               self._model.picture)
            self.in_place += 1
            return buffers, self._paste(picture, out).geometry
        if not self._said_copied:
            self._said_copied = True
            log.info("DVPP: VPC's output is copied into the model input (%s)",
                     "every input set in use" if self._take_set else "no input sets of the "
                     "session in DVPP memory")
        plan = self._paste(picture, self._model)
        model_input = np.empty(self._model_shape, np.uint8)
        return self._dvpp.download(self._model, model_input), plan.geometry

    def _paste(self, picture: BoardPicture, out: DeviceBuffer) -> geometry.Letterbox:
        """VPC's crop-resize-paste into ``out``, its pad painted first where this source size
        has not been painted into it yet."""
        source = picture.buffer.picture
        if self._painted.get(out.address) != source:
            luma, chroma, _ = self._pad
            self._dvpp.fill(out, luma, chroma)
            self._painted[out.address] = source
        return self._dvpp.letterbox(picture.buffer, out, **self._letterbox_options,
                                    nv21=self.spec.input_format == "YVU420SP")

    def size(self, picture: BoardPicture) -> tuple[int, int]:
        return picture.buffer.picture.width, picture.buffer.picture.height

    def bgr(self, picture: BoardPicture) -> np.ndarray:
        """The picture as BGR on the host (downloaded, then converted in its range)."""
        self._context.make_current(self._acl)
        pic = picture.buffer.picture
        data = self._dvpp.download(picture.buffer, np.empty(pic.size, np.uint8))
        luma = data[:pic.stride_w * pic.stride_h].reshape(pic.stride_h, pic.stride_w)
        chroma = data[pic.stride_w * pic.stride_h:].reshape(pic.stride_h // 2, pic.stride_w)
        chroma = chroma[:pic.height // 2, :pic.width].reshape(pic.height // 2, pic.width // 2, 2)
        return bgr_from_planes(luma[:pic.height, :pic.width], chroma, self._full_range)

    def keep_until(self, owner: object, picture: BoardPicture) -> None:
        """Give ``picture``'s buffer back when ``owner`` (the frame's deferred image) is gone."""
        self._held.add(picture.buffer.address)
        weakref.finalize(owner, self.release, picture)

    def release(self, picture: BoardPicture) -> None:
        """A picture no longer needed: its buffer back to the pool (or freed if it no longer
        fits the stream); the last one held after ``close`` ends the media session."""
        buffer = picture.buffer
        self._held.discard(buffer.address)
        if self._dvpp.closed:
            return
        if buffer.picture == self._picture and not self._closing:
            self._pool.append(buffer)
        else:
            self._context.make_current(self._acl)
            self._dvpp.free(buffer)
        if self._closing and not self._held and not self._lent:
            self._tear_down()

    def close(self) -> None:
        """Ends the media session; while frames still hold pictures (a sink may yet draw the
        last frames of a file) or the session still holds sets in DVPP memory, it ends when the
        last of them is given back."""
        self._closing = True
        if not self._held and not self._lent:
            self._tear_down()

    def _tear_down(self) -> None:
        if self._dvpp.closed:
            return
        self._context.make_current(self._acl)
        self._pool = []
        self._resources.release_all()

    def _collect(self, receive: Any) -> list[tuple[BoardPicture, Any]]:
        pictures = []
        while (got := receive()) is not None:
            pictures.extend(self._picture_of(got))
        return pictures

    def _picture_of(self, got: Any) -> list[tuple[BoardPicture, Any]]:
        if not got.ok:  # a frame VDEC could not decode: its buffer back, nothing to show
            self.failed += 1
            self.release(BoardPicture(got.buffer, None))
            return []
        seconds = got.pts / PTS_UNITS
        return [(BoardPicture(got.buffer, seconds), seconds)]

    def _resize_pool(self, size: tuple[int, int]) -> None:
        unit = "jpegd_out" if self._codec == "mjpeg" else "vdec_out"
        picture = geometry.picture(size[0], size[1], self.soc, unit)
        if picture != self._picture:
            for buffer in self._pool:
                self._dvpp.free(buffer)
            self._pool, self._picture = [], picture

    def _take(self) -> DeviceBuffer:
        if self._pool:
            return self._pool.pop()
        return self._dvpp.malloc(self._picture or geometry.Picture(0, 0, 0, 0))


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    header = read_header(data)
    return None if header is None else (header.width, header.height)
