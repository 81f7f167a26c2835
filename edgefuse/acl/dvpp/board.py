"""The board's DVPP through pyACL's media API (``acl.himpi``): VDEC decode and VPC letterbox into
the model's YUV420SP input, every picture checked against ``geometry`` before the call.

Written against the pyACL pages of the Atlas 200I DK A2 guide and CANN's appdevgapi:
``acl.himpi.sys_init`` / ``sys_exit``; VDEC: ``vdec_create_chn(chn, attr)``,
``vdec_start_recv_stream(chn)``, ``vdec_send_stream(chn, stream, vdec_pic_info, milli_sec)``
(aclpythondevg_01_0492: the channel created and receiving, one whole frame per call),
``frame_info, supplement, stream, ret = vdec_get_frame(chn, milli_sec)`` and
``vdec_release_frame`` (aclpythondevg_01_0481/0493), ``vdec_stop_recv_stream``,
``vdec_destroy_chn``; VPC: ``vpc_create_chn``, ``task_id, ret = vpc_crop_resize_paste(chn,
source_pic, regions, count, milli_sec)`` (aclpythondevg_01_0424/0445: asynchronous, paste offsets
even for YUV420SP), ``vpc_get_process_result(chn, task_id, milli_sec)``, ``vpc_destroy_chn``;
memory: ``dvpp_malloc`` / ``dvpp_free``. Dict keys as hi_vdec_pic_info (aclpythondevg_01_0513),
hi_vpc_pic_info and hi_vpc_crop_resize_paste_region document them.

JPEGD is the same V2 VDEC channel created with payload type JPEG ("JPEGD功能及约束说明",
媒体数据处理V2: aclpythondevg_01_0476, CANN 8.0.RC2.2; Huffman-coded sequential JPEG only, no
progressive or arithmetic coding; output width stride 64-aligned, height stride 16-aligned on the
200I/500 A2: ``geometry``'s jpegd_out); what it cannot take is told by ``jpeg.jpegd_refusal``
before the send.

Streaming: ``send`` hands one whole frame with the output picture it may fill; ``receive`` polls
``vdec_get_frame`` (0 ms: non-blocking; HI_ERR_VDEC_BUF_EMPTY 0xA005800E is "nothing yet",
aclpythondevg_01_0493, return codes aclcppdevg_03_1252), since a decoder holding reference frames
(B-frames) gives its pictures later than their packets; ``finish`` sends the end of stream and
collects the rest. A picture whose ``frame_flag`` is not 0 is a decode failure (0493), released
and reported to the caller. Host bytes reach device memory with ``acl.rt.memcpy``
(aclpythondevg_01_0094), HOST_TO_DEVICE under ACL_HOST and DEVICE_TO_DEVICE under ACL_DEVICE
(the 200I DK A2's run mode: acl.rt.get_run_mode, aclpythondevg_01_0063).

Demuxing stays on the CPU (``demux``: PyAV, one whole Annex-B frame per packet). Resources are
made in the constructor and freed in reverse order by ``close``; a call that returns an error
raises ``ToolError`` with the call's name and code (never a status code back).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from edgefuse.acl.dvpp import geometry
from edgefuse.errors import Ref, ToolError

HI_PIXEL_FORMAT_YUV_SEMIPLANAR_420 = 1  # NV12 (hi_pixel_format)
HI_PIXEL_FORMAT_YVU_SEMIPLANAR_420 = 2  # NV21
HI_PT_JPEG, HI_PT_H264, HI_PT_H265 = 26, 96, 265  # hi_payload_type
VDEC_CODECS = {"h264": HI_PT_H264, "hevc": HI_PT_H265, "mjpeg": HI_PT_JPEG}
BLOCK, POLL = -1, 0  # milli_sec: wait; do not wait
HI_ERR_VDEC_BUF_EMPTY = 0xA005800E
ACL_MEMCPY_HOST_TO_DEVICE, ACL_MEMCPY_DEVICE_TO_HOST, ACL_MEMCPY_DEVICE_TO_DEVICE = 1, 2, 3
ACL_DEVICE = 0  # acl.rt.get_run_mode: host and device share one memory


@dataclasses.dataclass(frozen=True)
class DeviceBuffer:
    """Device memory (``dvpp_malloc``) holding one picture."""

    address: int
    size: int
    picture: geometry.Picture


def pic_info(buffer: DeviceBuffer, pixel_format: int) -> dict[str, Any]:
    """hi_vpc_pic_info for a buffer."""
    pic = buffer.picture
    return {"picture_address": buffer.address, "picture_buffer_size": buffer.size,
            "picture_width": pic.width, "picture_height": pic.height,
            "picture_width_stride": pic.stride_w, "picture_height_stride": pic.stride_h,
            "picture_format": pixel_format}


@dataclasses.dataclass(frozen=True)
class Decoded:
    """A picture ``receive`` got: the buffer it is in, its time, and whether it decoded."""

    buffer: DeviceBuffer
    pts: int
    ok: bool


class BoardDvpp:
    """One media session: the system, a VPC channel, and (``open_vdec``) a VDEC/JPEGD channel.

    ``acl`` (pyACL, for ``acl.rt.memcpy``/``memset`` between host and DVPP memory) is needed by
    ``upload``, ``download`` and ``fill``; the caller makes a context current in the calling
    thread first (``acl.resources.CurrentContext``)."""

    def __init__(self, himpi: Any, soc: str, *, vpc_channel: int = 0, acl: Any = None) -> None:
        """``himpi``: the ``acl.himpi`` module (a stand-in in tests)."""
        self._himpi, self.soc, self._acl = himpi, soc, acl
        self._undo: list[tuple[str, tuple[Any, ...]]] = []
        self._vdec: int | None = None
        self._vdec_unit = "vdec_out"
        self._vdec_channels: set[int] = set()
        self._in_flight: dict[int, DeviceBuffer] = {}  # output address -> its buffer
        self._free_streams: list[DeviceBuffer] = []  # packet buffers the decoder gave back
        self._busy_streams: dict[int, DeviceBuffer] = {}  # sent, not yet given back
        self._run_mode: int | None = None
        geometry.check_channel(vpc_channel, soc)
        try:
            self._call("sys_init")
            self._undo.append(("sys_exit", ()))
            self._call("vpc_create_chn", vpc_channel, {})
            self._undo.append(("vpc_destroy_chn", (vpc_channel,)))
        except BaseException:
            self.close()
            raise
        self.vpc_channel = vpc_channel

    def malloc(self, picture: geometry.Picture, size: int | None = None) -> DeviceBuffer:
        """Device memory for ``picture`` (its documented size, or ``size`` bytes)."""
        size = picture.size if size is None else size
        address = self._call_value("dvpp_malloc", 0, size)
        self._undo.append(("dvpp_free", (address,)))
        return DeviceBuffer(address, size, picture)

    def free(self, buffer: DeviceBuffer) -> None:
        """Free one buffer before ``close`` (a picture pool that shrinks, a packet buffer)."""
        self._undo.remove(("dvpp_free", (buffer.address,)))
        self._call("dvpp_free", buffer.address)

    def open_vdec(self, channel: int, codec: str, width: int, height: int) -> None:
        """A VDEC channel (JPEGD for ``mjpeg``) for a ``codec`` stream of width x height,
        receiving."""
        if codec not in VDEC_CODECS:
            raise ToolError(f"VDEC/JPEGD decode {', '.join(VDEC_CODECS)}, not {codec}",
                            reference=Ref.DVPP_GEOMETRY)
        geometry.check_channel(channel, self.soc, self._vdec_channels)  # shared with JPEGD
        attr = {"type": VDEC_CODECS[codec], "mode": 1, "pic_width": width, "pic_height": height}
        self._call("vdec_create_chn", channel, attr)
        self._undo.append(("vdec_destroy_chn", (channel,)))
        self._call("vdec_start_recv_stream", channel)
        self._undo.append(("vdec_stop_recv_stream", (channel,)))
        self._vdec = channel
        self._vdec_unit = "jpegd_out" if codec == "mjpeg" else "vdec_out"
        self._vdec_channels.add(channel)

    def close_vdec(self) -> list[DeviceBuffer]:
        """Stop and destroy the decode channel (a stream that dropped: the next connection
        starts a new one); returns the pictures it still held, the caller's again."""
        if self._vdec is None:
            return []
        channel, self._vdec = self._vdec, None
        for name in ("vdec_stop_recv_stream", "vdec_destroy_chn"):
            self._undo.remove((name, (channel,)))
            self._call(name, channel)
        self._vdec_channels.discard(channel)
        held, self._in_flight = list(self._in_flight.values()), {}
        self._free_streams.extend(self._busy_streams.values())
        self._busy_streams = {}
        return held

    def send(self, data: bytes, out: DeviceBuffer, pts: int = 0) -> None:
        """One whole coded frame (host bytes) to the decoder, with the picture it may fill
        (vdec_send_stream: aclpythondevg_01_0492); its picture comes from ``receive``."""
        if self._vdec is None:
            raise ToolError("send before open_vdec", reference=Ref.DVPP_GEOMETRY)
        if not data:
            raise ToolError("an empty stream packet (only the end of stream may be empty)",
                            reference=Ref.DVPP_GEOMETRY)
        geometry.check_picture(out.picture, self.soc, self._vdec_unit, buffer_size=out.size,
                               where=f"the {self._vdec_unit.split('_')[0].upper()} output")
        stream = self._stream_buffer(len(data))
        self.upload(data, stream)
        self._in_flight[out.address] = out
        self._call("vdec_send_stream", self._vdec, _stream(stream.address, len(data), pts),
                   _out_info(out), BLOCK)

    def receive(self, milli_sec: int = POLL) -> Decoded | None:
        """The next decoded picture (released back to the decoder at once: the buffer is the
        caller's), or None when none is ready within ``milli_sec``."""
        frame_info, _, stream, ret = self._himpi.vdec_get_frame(self._vdec, milli_sec)
        if ret == HI_ERR_VDEC_BUF_EMPTY:
            return None
        self._check("vdec_get_frame", ret)
        given_back = self._busy_streams.pop(stream.get("addr", 0), None)
        if given_back is not None:  # the packet's memory is the caller's again
            self._free_streams.append(given_back)
        try:
            frame = frame_info["v_frame"]
            out = self._in_flight.pop(frame["virt_addr"][0])
        finally:
            self._call("vdec_release_frame", self._vdec, frame_info)
        return Decoded(out, int(frame.get("pts", 0)), frame.get("frame_flag", 0) == 0)

    def finish(self) -> list[Decoded]:
        """End of stream: every picture the decoder still holds."""
        self._call("vdec_send_stream", self._vdec, _stream(0, 0, 0, end=True), {}, BLOCK)
        pictures = []
        while self._in_flight and (got := self.receive(BLOCK)) is not None:
            pictures.append(got)
        return pictures

    def _stream_buffer(self, length: int) -> DeviceBuffer:
        """A packet buffer of at least ``length`` bytes that the decoder does not hold: a
        packet's memory is the decoder's until vdec_get_frame gives it back as ``stream``
        (aclpythondevg_01_0493)."""
        fits = [buffer for buffer in self._free_streams if buffer.size >= length]
        if fits:
            buffer = fits[0]
            self._free_streams.remove(buffer)
        else:
            for small in self._free_streams:  # outgrown: a bigger one replaces them
                self.free(small)
            self._free_streams = []
            buffer = self.malloc_bytes(max(length, 1 << 20))
        self._busy_streams[buffer.address] = buffer
        return buffer

    def malloc_bytes(self, size: int) -> DeviceBuffer:
        """``size`` bytes of DVPP memory (a packet buffer)."""
        return self.malloc(geometry.Picture(size, 1, size, 1), size)

    def upload(self, data: bytes | Any, buffer: DeviceBuffer) -> None:
        """Host bytes (or a uint8 array) into DVPP memory (acl.rt.memcpy)."""
        array = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data
        array = np.ascontiguousarray(array)
        self._memcpy(buffer.address, buffer.size, array.ctypes.data, array.nbytes,
                     ACL_MEMCPY_HOST_TO_DEVICE)

    def download(self, buffer: DeviceBuffer, out: Any) -> Any:
        """DVPP memory into the host array ``out`` (its bytes; acl.rt.memcpy)."""
        self._memcpy(out.ctypes.data, out.nbytes, buffer.address, out.nbytes,
                     ACL_MEMCPY_DEVICE_TO_HOST)
        return out

    def fill(self, buffer: DeviceBuffer, luma: int, chroma: int) -> None:
        """A YUV420SP picture's luma rows set to ``luma`` and its chroma to ``chroma`` (the
        letterbox's grey pad: acl.rt.memset, aclpythondevg_01_0087)."""
        pic = buffer.picture
        luma_bytes = pic.stride_w * pic.stride_h
        self._check("acl.rt.memset", self._acl.rt.memset(buffer.address, luma_bytes, luma,
                                                         luma_bytes))
        self._check("acl.rt.memset", self._acl.rt.memset(
            buffer.address + luma_bytes, buffer.size - luma_bytes, chroma, luma_bytes // 2))

    def _memcpy(self, dst: int, dst_max: int, src: int, count: int, host_kind: int) -> None:
        if self._run_mode is None:
            self._run_mode, ret = self._acl.rt.get_run_mode()
            self._check("acl.rt.get_run_mode", ret)
        kind = ACL_MEMCPY_DEVICE_TO_DEVICE if self._run_mode == ACL_DEVICE else host_kind
        self._check("acl.rt.memcpy", self._acl.rt.memcpy(dst, dst_max, src, count, kind))

    @property
    def closed(self) -> bool:
        return not self._undo

    def letterbox(self, source: DeviceBuffer, out: DeviceBuffer, *, pad_value: int = 114,
                  center: bool = True, rounding: str = "round",
                  nv21: bool = False) -> geometry.Letterbox:
        """VPC crop-resize-paste of ``source`` (NV12) into the model input ``out`` (already
        filled with the pad colour; NV21 where the build reads YVU420SP), as
        edgefuse.preprocess.letterbox places it."""
        src = source.picture
        plan = geometry.letterbox((src.height, src.width), (out.picture.height,
                                  out.picture.width), self.soc, pad_value=pad_value,
                                  center=center, rounding=rounding)
        geometry.check_picture(src, self.soc, "vpc_in", buffer_size=source.size,
                               where="the VPC input")
        geometry.check_picture(out.picture, self.soc, "vpc_out", buffer_size=out.size,
                               where="the model input")
        if out.picture != plan.output:
            raise ToolError(f"the model input buffer is laid out {out.picture}, VPC writes "
                            f"{plan.output}", reference=Ref.DVPP_GEOMETRY)
        (width, height), (left, top) = plan.content, plan.offset
        out_format = (HI_PIXEL_FORMAT_YVU_SEMIPLANAR_420 if nv21
                      else HI_PIXEL_FORMAT_YUV_SEMIPLANAR_420)
        region = {"dest_pic_info": pic_info(out, out_format),
                  "crop_region": {"left_offset": 0, "top_offset": 0, "crop_width": src.width,
                                  "crop_height": src.height},
                  "resize_info": {"resize_width": width, "resize_height": height,
                                  "interpolation": 0},
                  "dest_top_offset": top, "dest_left_offset": left}
        task_id, ret = self._himpi.vpc_crop_resize_paste(
            self.vpc_channel, pic_info(source, HI_PIXEL_FORMAT_YUV_SEMIPLANAR_420), [region], 1,
            BLOCK)
        self._check("vpc_crop_resize_paste", ret)
        self._call("vpc_get_process_result", self.vpc_channel, task_id, BLOCK)
        return plan

    def close(self) -> None:
        """Everything made, freed in reverse order (each undo tried even if one fails)."""
        self._in_flight.clear()
        self._free_streams, self._busy_streams = [], {}
        failures = []
        while self._undo:
            name, args = self._undo.pop()
            try:
                self._call(name, *args)
            except ToolError as exc:
                failures.append(exc)
        self._vdec = None
        if failures:
            raise failures[0]

    def _call(self, name: str, *args: Any) -> None:
        self._check(name, getattr(self._himpi, name)(*args))

    def _call_value(self, name: str, *args: Any) -> Any:
        value, ret = getattr(self._himpi, name)(*args)
        self._check(name, ret)
        return value

    def _check(self, name: str, ret: int) -> None:
        if ret != 0:
            name = name if name.startswith("acl.") else f"acl.himpi.{name}"
            raise ToolError(f"{name} returned {ret:#x}",
                            hint="see CANN's VDEC/VPC return codes", reference=Ref.ACL_CALL_FAILED)


def _stream(address: int, length: int, pts: int, *, end: bool = False) -> dict[str, Any]:
    """hi_vdec_stream: one whole frame (frame mode), or the end of the stream."""
    return {"pts": pts, "need_display": not end, "end_of_frame": not end,
            "end_of_stream": end, "len": length, "addr": address}


def _out_info(out: DeviceBuffer) -> dict[str, Any]:
    """hi_vdec_pic_info of the picture a send may fill (NV12)."""
    pic = out.picture
    return {"width": pic.width, "height": pic.height, "width_stride": pic.stride_w,
            "height_stride": pic.stride_h, "pixel_format": HI_PIXEL_FORMAT_YUV_SEMIPLANAR_420,
            "vir_addr": out.address, "buffer_size": out.size}
