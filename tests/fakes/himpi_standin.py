"""A strict stand-in for pyACL's media API (``acl.himpi``) on the Atlas 200I/500 A2 (Ascend
310B), for the DVPP board path's contract tests only.

It reads the documented rules itself (not edgefuse.acl.dvpp.geometry, so a check dropped there is
still caught here) and raises ``StandInViolation`` (an AssertionError: a bug in edgefuse) when:
- call order: anything before ``sys_init``; VPC work on an uncreated channel; ``vdec_send_stream``
  before ``vdec_start_recv_stream`` (HI_ERR_VDEC_NOT_PERM on the board, aclpythondevg_01_0492);
  ``vdec_get_frame`` with nothing sent; a frame not released before the next; a channel destroyed
  while receiving; ``sys_exit`` with channels or memory alive;
- channels: VDEC/JPEGD ids outside [0, 128) or created twice (aclcppdevg_03_0688);
- pictures: YUV420SP width/height odd, width stride below the width, height stride not the height
  2-aligned (VPC约束说明, DK A2 aclcppdevg_03_0963), a buffer smaller than stride_w * stride_h *
  3 / 2 or larger than its allocation, an empty stream packet, paste offsets odd, a pasted region
  outside the destination.
``calls`` records every call in order.
"""

from __future__ import annotations

import itertools
from typing import Any

CHANNELS = 128


class StandInViolation(AssertionError):
    """edgefuse broke a documented rule of the media API."""


class HimpiStandIn:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.initialised = False
        self.vpc: set[int] = set()
        self.vdec: dict[int, dict[str, Any]] = {}
        self.memory: dict[int, int] = {}
        self._addresses = itertools.count(0x1000, 0x100000)
        self._tasks = itertools.count(1)

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if name != "sys_init" and not self.initialised:
            raise StandInViolation(f"{name} before sys_init")

    # ---- system and memory -------------------------------------------------------------------
    def sys_init(self) -> int:
        self._enter("sys_init")
        self.initialised = True
        return 0

    def sys_exit(self) -> int:
        self._enter("sys_exit")
        if self.vpc or self.vdec or self.memory:
            raise StandInViolation(f"sys_exit with channels {sorted(self.vpc)}, "
                                   f"{sorted(self.vdec)} and {len(self.memory)} buffers alive")
        self.initialised = False
        return 0

    def dvpp_malloc(self, device: int, size: int) -> tuple[int, int]:
        self._enter("dvpp_malloc")
        address = next(self._addresses)
        self.memory[address] = size
        return address, 0

    def dvpp_free(self, address: int) -> int:
        self._enter("dvpp_free")
        if self.memory.pop(address, None) is None:
            raise StandInViolation(f"dvpp_free of {address:#x}: not allocated")
        return 0

    # ---- VPC ---------------------------------------------------------------------------------
    def vpc_create_chn(self, channel: int, attr: dict) -> int:
        self._enter("vpc_create_chn")
        if not 0 <= channel < CHANNELS or channel in self.vpc:
            raise StandInViolation(f"vpc channel {channel} out of range or created twice")
        self.vpc.add(channel)
        return 0

    def vpc_destroy_chn(self, channel: int) -> int:
        self._enter("vpc_destroy_chn")
        self.vpc.discard(channel)
        return 0

    def vpc_crop_resize_paste(self, channel: int, source: dict, regions: list, count: int,
                              milli_sec: int) -> tuple[int, int]:
        self._enter("vpc_crop_resize_paste")
        if channel not in self.vpc:
            raise StandInViolation(f"vpc_crop_resize_paste on uncreated channel {channel}")
        if count != len(regions) or not 1 <= count <= 256:
            raise StandInViolation(f"count {count} for {len(regions)} regions")
        self._picture(source, "source")
        for region in regions:
            dest = region["dest_pic_info"]
            self._picture(dest, "destination")
            resize = region["resize_info"]
            top, left = region["dest_top_offset"], region["dest_left_offset"]
            if top % 2 or left % 2:
                raise StandInViolation(f"paste offsets ({left}, {top}) must be even (YUV420SP)")
            if (left + resize["resize_width"] > dest["picture_width"]
                    or top + resize["resize_height"] > dest["picture_height"]):
                raise StandInViolation("the pasted region leaves the destination picture")
            if resize["resize_width"] % 2 or resize["resize_height"] % 2:
                raise StandInViolation("YUV420SP resize sizes must be even")
        return next(self._tasks), 0

    def vpc_get_process_result(self, channel: int, task_id: int, milli_sec: int) -> int:
        self._enter("vpc_get_process_result")
        return 0

    def _picture(self, info: dict, what: str) -> None:
        width, height = info["picture_width"], info["picture_height"]
        stride_w, stride_h = info["picture_width_stride"], info["picture_height_stride"]
        self._yuv420sp(width, height, stride_w, stride_h, info["picture_buffer_size"],
                       info["picture_address"], what)

    def _yuv420sp(self, width, height, stride_w, stride_h, size, address, what) -> None:
        if width % 2 or height % 2:
            raise StandInViolation(f"{what}: YUV420SP {width}x{height} must be even")
        if stride_w < max(width, 10) or stride_h != height + height % 2:
            raise StandInViolation(f"{what}: stride {stride_w}x{stride_h} for {width}x{height}")
        if size < stride_w * stride_h * 3 // 2:
            raise StandInViolation(f"{what}: buffer {size} < stride_w * stride_h * 3/2")
        if address not in self.memory or size > self.memory[address]:
            raise StandInViolation(f"{what}: buffer {size} bytes at {address:#x} is not "
                                   "that much allocated memory")

    # ---- VDEC --------------------------------------------------------------------------------
    def vdec_create_chn(self, channel: int, attr: dict) -> int:
        self._enter("vdec_create_chn")
        if not 0 <= channel < CHANNELS or channel in self.vdec:
            raise StandInViolation(f"vdec channel {channel} out of range or created twice")
        self.vdec[channel] = {"receiving": False, "sent": 0, "held": False}
        return 0

    def vdec_start_recv_stream(self, channel: int) -> int:
        self._enter("vdec_start_recv_stream")
        self.vdec[channel]["receiving"] = True
        return 0

    def vdec_stop_recv_stream(self, channel: int) -> int:
        self._enter("vdec_stop_recv_stream")
        self.vdec[channel]["receiving"] = False
        return 0

    def vdec_destroy_chn(self, channel: int) -> int:
        self._enter("vdec_destroy_chn")
        if self.vdec[channel]["receiving"]:
            raise StandInViolation("vdec_destroy_chn while receiving (stop first)")
        del self.vdec[channel]
        return 0

    def vdec_send_stream(self, channel: int, stream: dict, info: dict, milli_sec: int) -> int:
        self._enter("vdec_send_stream")
        state = self.vdec.get(channel)
        if state is None or not state["receiving"]:
            raise StandInViolation("vdec_send_stream before vdec_start_recv_stream")
        if stream["len"] <= 0 and not stream["end_of_stream"]:
            raise StandInViolation("an empty packet without end_of_stream")
        self._yuv420sp(info["width"], info["height"], info["width_stride"],
                       info["height_stride"], info["buffer_size"], info["vir_addr"], "VDEC out")
        state["sent"] += 1
        return 0

    def vdec_get_frame(self, channel: int, milli_sec: int) -> tuple[dict, dict, dict, int]:
        self._enter("vdec_get_frame")
        state = self.vdec[channel]
        if state["sent"] == 0:
            raise StandInViolation("vdec_get_frame with nothing sent: would block forever")
        if state["held"]:
            raise StandInViolation("vdec_get_frame before releasing the previous frame")
        state["sent"] -= 1
        state["held"] = True
        return {"frame_flag": 0}, {}, {}, 0

    def vdec_release_frame(self, channel: int, frame_info: dict) -> int:
        self._enter("vdec_release_frame")
        self.vdec[channel]["held"] = False
        return 0
