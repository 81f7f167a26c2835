"""A strict stand-in for pyACL's media API (``acl.himpi``) on the Atlas 200I/500 A2 (Ascend
310B), for the DVPP board path's contract tests only.

It reads the documented rules itself (not edgefuse.acl.dvpp.geometry, so a check dropped there is
still caught here) and raises ``StandInViolation`` (an AssertionError: a bug in edgefuse) when:
- call order: anything before ``sys_init``; VPC work on an uncreated channel; ``vdec_send_stream``
  before ``vdec_start_recv_stream`` (HI_ERR_VDEC_NOT_PERM on the board, aclpythondevg_01_0492);
  ``vdec_get_frame`` with nothing sent; a frame not released before the next; a channel destroyed
  while receiving; ``sys_exit`` with channels or memory alive;
- channels: VDEC/JPEGD ids outside [0, 128) or created twice (aclcppdevg_03_0688);
- pictures: YUV420SP width/height odd, width stride below the width, height stride below the
  height or odd (VPC约束说明, DK A2 aclcppdevg_03_0963 / aclpythondevg_01_0283), a buffer
  smaller than stride_w * stride_h * 3 / 2 or larger than its allocation, an empty stream
  packet, paste offsets odd, a pasted region outside the destination.
- streams: an H.264/H.265 packet that is not Annex-B (no start code: an MP4's length-prefixed
  frame sent as it is), a packet buffer sent again before ``vdec_get_frame`` gave it back
  (aclpythondevg_01_0493); a JPEG JPEGD cannot decode ("JPEGD功能及约束说明" aclpythondevg_01_0476:
  Huffman sequential only, no progressive or arithmetic coding; YUV420SP output from 4:2:0, 4:2:2
  and 4:4:4 here), or its output stride not the width 64-aligned and height 16-aligned.
``calls`` records every call in order.

With ``acl`` (the pyACL stand-in) the media memory is real: ``dvpp_malloc`` allocates bytes that
``acl.rt.memcpy``/``memset`` accept as device memory, VDEC/JPEGD decode the packets with PyAV's
decoder into the given pictures (their strides honoured) and VPC resizes and pastes, so a
board run can be compared with the ``sim`` emulation frame for frame. The pixels are the
emulation's (what VDEC's or VPC's own arithmetic gives differs by rounding); the rules are read
here.
"""

from __future__ import annotations

import ctypes
import itertools
from collections import deque
from typing import Any

import numpy as np

CHANNELS = 128
BUF_EMPTY = 0xA005800E  # HI_ERR_VDEC_BUF_EMPTY
CODECS = {26: "mjpeg", 96: "h264", 265: "hevc"}
NV12, NV21 = 1, 2
JPEG_SEQUENTIAL_HUFFMAN = (0xC0, 0xC1)  # SOF0 baseline, SOF1 extended sequential


class StandInViolation(AssertionError):
    """edgefuse broke a documented rule of the media API."""


class HimpiStandIn:
    def __init__(self, acl: Any = None) -> None:
        self.calls: list[str] = []
        self.initialised = False
        self.vpc: set[int] = set()
        self.vdec: dict[int, dict[str, Any]] = {}
        self.memory: dict[int, int] = {}
        self.jpegd_refused = 0
        self._acl = acl
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
        if self._acl is None:
            address = next(self._addresses)
        else:  # real bytes, device memory to the pyACL stand-in
            buffer = ctypes.create_string_buffer(b"\xa5" * size, size)
            address = ctypes.addressof(buffer)
            self._acl._memory[address] = buffer
        self.memory[address] = size
        return address, 0

    def dvpp_free(self, address: int) -> int:
        self._enter("dvpp_free")
        if self.memory.pop(address, None) is None:
            raise StandInViolation(f"dvpp_free of {address:#x}: not allocated")
        if self._acl is not None:
            self._acl._memory.pop(address)
        return 0

    def _bytes(self, address: int, size: int) -> np.ndarray:
        """A writable view of ``size`` bytes of media memory at ``address``."""
        for start, length in self.memory.items():
            if start <= address and address + size <= start + length:
                buffer = self._acl._memory[start]
                return np.frombuffer(buffer, np.uint8)[address - start:address - start + size]
        raise StandInViolation(f"{size} bytes at {address:#x} are not media memory")

    def _planes(self, address: int, width: int, height: int, stride_w: int,
                stride_h: int) -> tuple[np.ndarray, np.ndarray]:
        data = self._bytes(address, stride_w * stride_h * 3 // 2)
        luma = data[:stride_w * stride_h].reshape(stride_h, stride_w)[:height, :width]
        chroma = data[stride_w * stride_h:].reshape(stride_h // 2, stride_w)
        return luma, chroma[:height // 2, :width].reshape(height // 2, width // 2, 2)

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
            if self._acl is not None:
                self._paste(source, region)
        return next(self._tasks), 0

    def _paste(self, source: dict, region: dict) -> None:
        from edgefuse.fallback.dvpp_emulation import paste_resized  # noqa: PLC0415 (pixels)

        def planes(info: dict) -> tuple[np.ndarray, np.ndarray]:
            return self._planes(info["picture_address"], info["picture_width"],
                                info["picture_height"], info["picture_width_stride"],
                                info["picture_height_stride"])

        dest = region["dest_pic_info"]
        luma, chroma = planes(source)
        crop = region["crop_region"]
        left, top = crop["left_offset"], crop["top_offset"]
        luma = luma[top:top + crop["crop_height"], left:left + crop["crop_width"]]
        chroma = chroma[top // 2:(top + crop["crop_height"]) // 2,
                        left // 2:(left + crop["crop_width"]) // 2]
        if source["picture_format"] != dest["picture_format"]:  # NV12 <-> NV21
            chroma = chroma[..., ::-1]
        resize = region["resize_info"]
        paste_resized((luma, chroma), planes(dest),
                      (resize["resize_width"], resize["resize_height"]),
                      (region["dest_left_offset"], region["dest_top_offset"]))

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
        # "宽stride无对齐要求,与宽相同即可" (DK A2 VPC约束说明, aclpythondevg_01_0283): a stride
        # at least the size (a JPEGD picture's 64/16-aligned strides included), the height's even
        if stride_w < max(width, 10) or stride_h < max(height, 6) or stride_h % 2:
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
        codec = CODECS.get(attr.get("type"))
        if codec is None:
            raise StandInViolation(f"vdec_create_chn with payload type {attr.get('type')}")
        decoder = None
        if self._acl is not None:
            import av  # noqa: PLC0415 (the stand-in's decoder)

            decoder = av.CodecContext.create(codec, "r")
        self.vdec[channel] = {"receiving": False, "held": False, "codec": codec,
                              "decoder": decoder, "outs": deque(), "ready": deque(),
                              "streams": deque(), "ended": False}
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
        if stream["end_of_stream"]:
            state["ended"] = True
            if state["decoder"] is not None:
                self._decoded(state, state["decoder"].decode(None))
            return 0
        if stream["len"] <= 0:
            raise StandInViolation("an empty packet without end_of_stream")
        if stream["addr"] in {s["addr"] for s in state["streams"]}:
            raise StandInViolation("a packet buffer sent again before vdec_get_frame gave it "
                                   "back")
        if state["codec"] == "mjpeg":  # JPEGD: strides the width 64- and height 16-aligned
            width, height = info["width"], info["height"]
            if (width % 2 or height % 2 or info["width_stride"] != -(-width // 64) * 64
                    or info["height_stride"] != -(-height // 16) * 16
                    or info["buffer_size"] < info["width_stride"] * info["height_stride"] * 3 // 2
                    or info["buffer_size"] > self.memory.get(info["vir_addr"], 0)):
                raise StandInViolation(f"JPEGD out: {width}x{height} stride "
                                       f"{info['width_stride']}x{info['height_stride']} buffer "
                                       f"{info['buffer_size']}")
        else:
            self._yuv420sp(info["width"], info["height"], info["width_stride"],
                           info["height_stride"], info["buffer_size"], info["vir_addr"],
                           "VDEC out")
        state["streams"].append(dict(stream))
        state["outs"].append(info)
        if state["decoder"] is None:  # no pixels: one picture per frame sent
            state["ready"].append((info, stream["pts"]))
            return 0
        import av  # noqa: PLC0415 (the stand-in's decoder)

        data = bytes(self._bytes(stream["addr"], stream["len"]))
        if state["codec"] == "mjpeg":
            why = jpeg_refusal(data)
            if why:
                self.jpegd_refused += 1
                raise StandInViolation(f"JPEGD was sent a JPEG it cannot decode: {why}")
        elif not (data.startswith(b"\x00\x00\x01") or data.startswith(b"\x00\x00\x00\x01")):
            raise StandInViolation("an H.264/H.265 packet without a start code (VDEC reads "
                                   "Annex-B; an MP4's frames need h264_mp4toannexb)")
        packet = av.Packet(data)
        packet.pts = stream["pts"]
        self._decoded(state, state["decoder"].decode(packet))
        return 0

    def _decoded(self, state: dict, frames: list) -> None:
        from edgefuse.fallback.dvpp_emulation import lay_out  # noqa: PLC0415 (pixels)

        for frame in frames:
            info = state["outs"][len(state["ready"])]
            width_stride, height_stride = info["width_stride"], info["height_stride"]
            picture = lay_out(frame.to_ndarray(format="nv12"), frame.width, frame.height,
                              "Ascend310B4", "vdec_out")
            luma, chroma = self._planes(info["vir_addr"], frame.width, frame.height,
                                        width_stride, height_stride)
            luma[:], chroma[:] = picture.planes()
            state["ready"].append((info, frame.pts))

    def vdec_get_frame(self, channel: int, milli_sec: int) -> tuple[dict, dict, dict, int]:
        self._enter("vdec_get_frame")
        state = self.vdec[channel]
        if state["held"]:
            raise StandInViolation("vdec_get_frame before releasing the previous frame")
        if not state["ready"]:
            if milli_sec == -1 and not (state["outs"] and state["ended"]):
                raise StandInViolation("vdec_get_frame (blocking) with nothing to give: would "
                                       "block forever")
            return {}, {}, {}, BUF_EMPTY
        info, pts = state["ready"].popleft()
        state["outs"].popleft()
        stream = state["streams"].popleft() if state["streams"] else {}
        state["held"] = True
        frame = {"virt_addr": [info["vir_addr"]], "width": info["width"],
                 "height": info["height"], "pts": pts or 0, "frame_flag": 0}
        return {"v_frame": frame}, {}, stream, 0

    def vdec_release_frame(self, channel: int, frame_info: dict) -> int:
        self._enter("vdec_release_frame")
        self.vdec[channel]["held"] = False
        return 0


def jpeg_refusal(data: bytes) -> str | None:
    """Why JPEGD cannot decode ``data`` into YUV420SP, read from its frame header (None: it
    can)."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return "no JPEG marker where one belongs"
        marker, length = data[at + 1], int.from_bytes(data[at + 2:at + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if marker not in JPEG_SEQUENTIAL_HUFFMAN:
                return f"SOF{marker - 0xC0} (progressive, lossless or arithmetic coded)"
            components = data[at + 9]
            factors = [data[at + 11 + 3 * i] for i in range(components)]
            if components != 3 or factors[1:] != [0x11, 0x11] or factors[0] not in (
                    0x11, 0x21, 0x22):
                return f"{components} components sampled {[hex(f) for f in factors]}"
            return None
        at += 2 + length
    return "no frame header"
