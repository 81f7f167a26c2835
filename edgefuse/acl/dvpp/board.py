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

Demuxing stays on the CPU (PyAV gives one whole frame per packet, as VDEC wants it). Resources
are made in the constructor and freed in reverse order by ``close``; a call that returns an
error raises ``ToolError`` with the call's name and code (never a status code back).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from edgefuse.acl.dvpp import geometry
from edgefuse.errors import Ref, ToolError

HI_PIXEL_FORMAT_YUV_SEMIPLANAR_420 = 1  # NV12 (hi_pixel_format)
HI_PIXEL_FORMAT_YVU_SEMIPLANAR_420 = 2  # NV21
HI_PT_H264, HI_PT_H265 = 96, 265  # hi_payload_type
VDEC_CODECS = {"h264": HI_PT_H264, "hevc": HI_PT_H265}
BLOCK = -1  # milli_sec: wait


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


class BoardDvpp:
    """One media session: the system, a VPC channel, and (``open_vdec``) a VDEC channel."""

    def __init__(self, himpi: Any, soc: str, *, vpc_channel: int = 0) -> None:
        """``himpi``: the ``acl.himpi`` module (a stand-in in tests)."""
        self._himpi, self.soc = himpi, soc
        self._undo: list[tuple[str, tuple[Any, ...]]] = []
        self._vdec: int | None = None
        self._vdec_channels: set[int] = set()
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

    def malloc(self, picture: geometry.Picture) -> DeviceBuffer:
        """Device memory for ``picture`` (its documented size)."""
        address = self._call_value("dvpp_malloc", 0, picture.size)
        self._undo.append(("dvpp_free", (address,)))
        return DeviceBuffer(address, picture.size, picture)

    def open_vdec(self, channel: int, codec: str, width: int, height: int) -> None:
        """A VDEC channel for a ``codec`` stream of width x height, receiving."""
        if codec not in VDEC_CODECS:
            raise ToolError(f"VDEC decodes {', '.join(VDEC_CODECS)}, not {codec}",
                            reference=Ref.DVPP_GEOMETRY)
        geometry.check_channel(channel, self.soc, self._vdec_channels)  # shared with JPEGD
        attr = {"type": VDEC_CODECS[codec], "mode": 1, "pic_width": width, "pic_height": height}
        self._call("vdec_create_chn", channel, attr)
        self._undo.append(("vdec_destroy_chn", (channel,)))
        self._call("vdec_start_recv_stream", channel)
        self._undo.append(("vdec_stop_recv_stream", (channel,)))
        self._vdec = channel
        self._vdec_channels.add(channel)

    def decode(self, stream_address: int, length: int, out: DeviceBuffer,
               pts: int = 0) -> dict[str, Any]:
        """One whole frame of the stream (already in device memory) decoded into ``out``;
        returns vdec_get_frame's frame_info (released after)."""
        if self._vdec is None:
            raise ToolError("decode before open_vdec", reference=Ref.DVPP_GEOMETRY)
        if length <= 0:
            raise ToolError("an empty stream packet (only the end of stream may be empty)",
                            reference=Ref.DVPP_GEOMETRY)
        geometry.check_picture(out.picture, self.soc, "vdec_out", buffer_size=out.size,
                               where="the VDEC output")
        pic = out.picture
        stream = {"pts": pts, "need_display": True, "end_of_frame": True,
                  "end_of_stream": False, "len": length, "addr": stream_address}
        info = {"width": pic.width, "height": pic.height, "width_stride": pic.stride_w,
                "height_stride": pic.stride_h,
                "pixel_format": HI_PIXEL_FORMAT_YUV_SEMIPLANAR_420,
                "vir_addr": out.address, "buffer_size": out.size}
        self._call("vdec_send_stream", self._vdec, stream, info, BLOCK)
        frame_info, _, got_stream, ret = self._himpi.vdec_get_frame(self._vdec, BLOCK)
        self._check("vdec_get_frame", ret)
        self._call("vdec_release_frame", self._vdec, frame_info)
        return frame_info

    def letterbox(self, source: DeviceBuffer, out: DeviceBuffer, *, pad_value: int = 114,
                  center: bool = True, rounding: str = "round") -> geometry.Letterbox:
        """VPC crop-resize-paste of ``source`` into the model input ``out`` (already filled
        with the pad colour), as edgefuse.preprocess.letterbox places it."""
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
        region = {"dest_pic_info": pic_info(out, HI_PIXEL_FORMAT_YUV_SEMIPLANAR_420),
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
            raise ToolError(f"acl.himpi.{name} returned {ret:#x}",
                            hint="see CANN's VDEC/VPC return codes", reference=Ref.ACL_CALL_FAILED)
