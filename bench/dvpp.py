"""CPU time and copies per frame: decode + letterbox on the CPU vs DVPP, input copied vs written
in place, on a shared-memory SoC vs a host with a card (issue 30 §3, §5).

Two tables, on the demo clip re-encoded to H.264 at camera sizes, into a YUV420SP AIPP build's
input (256x256: [384, 256] bytes) through the real ``AclSession`` over the pyACL stand-in
(tests/fakes/acl_standin.py; its ``execute`` reads the input and returns one number):

1. **Copies per frame** (one process, every combination, deterministic). A *copy* is a pass that
   moves a whole frame's bytes unchanged into another buffer; decoding, resizing and colour
   conversion are the work itself, not copies.
   - ``acl memcpy``: measured, the stand-in's ``memcpy_counts`` by kind over the frames;
   - ``model input read in place``: measured, whether each ``execute`` read the very memory the
     feed was written into (the stand-in's ``executed_inputs`` against the feed's address);
   - ``CPU copies``: the preprocessing's, by construction (``PREPROCESS_COPIES`` says which call
     makes each), plus the session's staging write, measured (on the SoC a feed that was not
     written in place is copied into the shared buffer by the CPU; on a card that copy is the
     HOST_TO_DEVICE memcpy instead).
   ``dvpp-board`` is measured too, through the apps' own DVPP source over the media stand-in
   (tests/fakes/himpi_standin.py: VDEC and VPC emulated into real DVPP memory): on the SoC VPC
   pastes into a set of the session's input buffers made of DVPP memory
   (``input_buffers(memory=units)``) and ``execute`` reads it there. The coded packets (PyAV's
   demuxed bytes, VDEC's input, not frames) are copied into VDEC's stream buffer, one memcpy
   each: counted apart (``packet copies``), not in ``acl memcpy``. On a card the VPC output is
   read back (D2H) and staged again (H2D) as a host feed.
2. **CPU time per frame** (process CPU time, user + system, so work on any thread counts), each
   configuration in its own fresh process, alternated then reversed for ``--reps`` repetitions,
   as the median of per-process medians and the paired ratio to ``cpu-copied`` (the method of
   bench/_harness.py), on a SoC-mode session:
   - ``cpu-copied``: OpenCV decodes, ``prepare_frame`` makes the NV12 frame in arrays of its own,
     the session copies it into its buffer (before issue 30 §3's input buffers);
   - ``cpu-in-place``: the same frame written into the session's ``input_buffers``;
   - ``dvpp-emulated``: the ``sim`` emulation (PyAV decode to the SoC's strided NV12, VPC's
     plane-wise letterbox), what a host run with ``decode: dvpp`` pays, not the board;
   - ``dvpp-board-cpu``: what stays on the cores with ``decode: dvpp`` on the board: PyAV demuxes
     packets (VDEC decodes, VPC letterboxes into the model input: no CPU time of ours).

Only a board gives the board's figures: VDEC/VPC latency, the frame rate at N cameras, the ARM
cores' load (docs/sim.md says how: ``edgefuse bench MODEL --source CLIP --decode dvpp``). Run:
``python bench/dvpp.py [--frames 60] [--reps 3]``; writes bench/results/dvpp.json.
"""

from __future__ import annotations

import argparse
import fractions
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TIMED = ("cpu-copied", "cpu-in-place", "dvpp-emulated", "dvpp-board-cpu")
SIZES = ((1920, 1080), (1280, 720))
MODEL = (256, 256)  # the demo detector's input (height, width)
SOC = "Ascend310B4"
ACL_DEVICE, ACL_HOST = 0, 1
TARGETS = {"soc": ACL_DEVICE, "card": ACL_HOST}
H2D, D2H, D2D = 1, 2, 3
# The preprocessing's full-frame copies per frame, by construction, for a 16:9 frame into the
# square input (so the letterbox pads):
PREPROCESS_COPIES = {
    # fit -> letterbox: cv2.copyMakeBorder copies the resized content into a padded frame.
    ("cpu", "copied"): 1,
    # fit_into: cv2.resize writes straight into its place in the buffer, only the pad is filled.
    ("cpu", "in-place"): 0,
    # EmulatedVpc.letterbox returns its own array; the feed is that array (the session stages it).
    ("dvpp-emulated", "copied"): 0,
    # ...and written into the input buffers by the emulation itself (letterbox(out=)).
    ("dvpp-emulated", "in-place"): 0,
    # VDEC and VPC write DVPP memory; the CPU writes no frame.
    ("dvpp-board", "in-place"): 0,
}


def make_clip(path: Path, size: tuple[int, int], frames: int) -> Path:
    """The demo clip scaled to ``size`` and encoded to H.264, as a camera sends it."""
    import av  # noqa: PLC0415 (bench: optional)
    import cv2  # noqa: PLC0415

    from edgefuse.vision.scenes.shapes import SAMPLE_CLIP  # noqa: PLC0415

    with av.open(str(SAMPLE_CLIP)) as src, av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=15)
        video.width, video.height = size
        video.pix_fmt, video.options = "yuv420p", {"crf": "18", "threads": "1"}
        for index, frame in enumerate(src.decode(video=0)):
            if index == frames:
                break
            image = cv2.resize(frame.to_ndarray(format="bgr24"), size)
            plain = av.VideoFrame.from_ndarray(image, format="bgr24").reformat(format="yuv420p")
            plain.pts, plain.time_base = index, fractions.Fraction(1, 15)
            out.mux(video.encode(plain))
        out.mux(video.encode(None))
    return path


class Feeder:
    """The model input side of every configuration: the YUV420SP plan, an ``AclSession`` over
    the stand-in in ``run_mode``, and the frame sources."""

    def __init__(self, run_mode: int, folder: Path) -> None:
        sys.path.insert(0, str(ROOT / "tests" / "fakes"))
        import numpy as np  # noqa: PLC0415
        from acl_standin import AclStandIn, FakeOm, FakeTensor  # noqa: PLC0415

        from edgefuse.acl.compile.aipp import AippSpec  # noqa: PLC0415
        from edgefuse.acl.session import AclSession  # noqa: PLC0415
        from edgefuse.preprocess import Preprocess  # noqa: PLC0415
        from edgefuse.vision.model.adapter import InputPlan  # noqa: PLC0415

        height, width = MODEL
        self.spec = AippSpec(input_format="YUV420SP", source_size=(width, height),
                             csc="bt601_narrow")
        record = Preprocess(size=MODEL, color="BGR", scale=1.0, layout="NHWC", dtype="uint8")
        self.plan = InputPlan("images", record, aipp=True, yuv=self.spec)
        self.acl = AclStandIn(run_mode=run_mode)
        sys.modules["acl"] = self.acl
        om = FakeOm(inputs=[FakeTensor("images", (1, height * 3 // 2, width), np.dtype(np.uint8))],
                    outputs=[FakeTensor("y", (1, 1), np.dtype(np.float32))],
                    compute=lambda f: [f["images"][:, :1, :1].astype(np.float32).reshape(1, 1)])
        self.session = AclSession(self.acl.register_model(folder / "model.om", om))
        self.buffers = self.session.input_buffers()
        self.packets = 0  # coded packets sent to VDEC (board_feeds)

    def frames(self, decode: str, clip: str):
        """The decoded frames: BGR images (OpenCV) or the emulated VDEC's pictures (PyAV)."""
        return self._cpu_frames(clip) if decode == "cpu" else self._emulated_frames(clip)

    def feed(self, decode: str, item, in_place: bool):
        """A decoded frame made the model input (letterbox + NV12, or emulated VPC), in the
        session's input buffers or in arrays of its own."""
        if decode == "cpu":
            return self._cpu_feed(item, in_place)
        return self._emulated_feed(item, in_place)

    def _cpu_frames(self, clip: str):
        import cv2  # noqa: PLC0415

        capture = cv2.VideoCapture(clip)
        try:
            while True:
                ok, image = capture.read()
                if not ok:
                    return
                yield image
        finally:
            capture.release()

    def _cpu_feed(self, image, in_place: bool):
        from edgefuse.vision.model.adapter import prepare_frame  # noqa: PLC0415

        return prepare_frame(self.plan, image, self.buffers if in_place else None)[0]

    def _emulated_frames(self, clip: str):
        from edgefuse.fallback import dvpp_emulation as emu  # noqa: PLC0415

        self.vpc = emu.EmulatedVpc(self.spec, SOC)
        for picture, _ in emu.decoded_pictures(clip, SOC):
            yield picture

    def _emulated_feed(self, picture, in_place: bool):
        import numpy as np  # noqa: PLC0415

        if not in_place:
            return {"images": self.vpc.letterbox(picture)[0][np.newaxis]}
        self.vpc.letterbox(picture, out=self.buffers["images"][0])
        return self.buffers

    def board_feeds(self, clip: str):
        """The apps' DVPP source on the board's units over the media stand-in: each frame's
        feeds as the pipeline makes them (``decode: dvpp`` on acl)."""
        from himpi_standin import HimpiStandIn  # noqa: PLC0415

        from edgefuse.vision.model.adapter import feeds_from_device_input  # noqa: PLC0415
        from edgefuse.vision.streams.dvpp_source import (  # noqa: PLC0415
            DvppSource,
            open_units,
        )

        himpi = self.acl.himpi = HimpiStandIn(acl=self.acl)
        send = himpi.vdec_send_stream

        def counted_send(channel, stream, *rest):
            self.packets += stream["len"] > 0  # each one acl.rt.memcpy into the stream buffer
            return send(channel, stream, *rest)

        himpi.vdec_send_stream = counted_send
        units = open_units("acl", self.plan, SOC, session=self.session)
        source = DvppSource(clip, self.plan, SOC, units=units)
        try:
            while (frame := source.read()) is not None:
                yield feeds_from_device_input(self.plan, *frame.device_input)
        finally:
            source.close()

    def close(self) -> None:
        from edgefuse.acl.resources import RUNTIME  # noqa: PLC0415

        self.session.close()
        RUNTIME.shutdown()


def count_copies(clip: str, frames: int) -> list[dict]:
    """Copies per frame for every decode x target x feed combination (see the docstring)."""
    rows = []
    for target, run_mode in TARGETS.items():
        for decode in ("cpu", "dvpp-emulated"):
            for feed in ("copied", "in-place"):
                with tempfile.TemporaryDirectory() as folder:
                    feeder = Feeder(run_mode, Path(folder))
                    try:
                        rows.append(_count(feeder, clip, frames, target, decode, feed))
                    finally:
                        feeder.close()
        with tempfile.TemporaryDirectory() as folder:
            feeder = Feeder(run_mode, Path(folder))
            try:
                row = _count(feeder, clip, frames, target, "dvpp-board", "in-place")
            finally:
                feeder.close()
        row["note"] = ("VPC writes the model input (input_buffers(memory=units)); besides, "
                       "each coded packet is copied into VDEC's stream buffer (packet_copies)"
                       if target == "soc" else "VPC's output read back (D2H) and staged as a "
                       "host feed (H2D), the output (D2H); and the packets (packet_copies)")
        rows.append(row)
    return rows


def _count(feeder: Feeder, clip: str, frames: int, target: str, decode: str, feed: str) -> dict:
    in_place_feed = feed == "in-place"
    acl = feeder.acl
    before = dict(acl.memcpy_counts)
    done = read_in_place = staged = 0
    feeds_of = (feeder.board_feeds(clip) if decode == "dvpp-board" else
                (feeder.feed(decode, item, in_place_feed) for item in feeder.frames(decode, clip)))
    try:
        for feeds in itertools.islice(feeds_of, frames):  # no frame made past the last
            feeder.session.run(feeds)
            address = feeds["images"].ctypes.data
            if acl.executed_inputs[-1] == (address,):
                read_in_place += 1
            elif acl.run_mode == ACL_DEVICE:
                staged += 1  # the session wrote the feed into its shared buffer: a CPU copy
            done += 1
    finally:
        feeds_of.close()
    copies = {name: acl.memcpy_counts.get(kind, 0) - before.get(kind, 0)
              for name, kind in (("H2D", H2D), ("D2H", D2H), ("D2D", D2D))}
    # VDEC's input, not a frame: the coded packets (a decoder holding reference frames takes
    # a packet or two more than it has given frames), each copied once into its stream buffer.
    copies["D2D" if acl.run_mode == ACL_DEVICE else "H2D"] -= feeder.packets
    return {"decode": decode, "target": target, "feed": feed, "frames": done, "measured": True,
            "memcpy": {name: count / done for name, count in copies.items()},
            "packet_copies": feeder.packets / done, "in_place": read_in_place == done,
            "cpu_copies": PREPROCESS_COPIES[(decode, feed)] + staged / done}


def time_worker(config: str, clip: str) -> list[list[float]]:
    """CPU seconds (this process: user + system) per frame of ``config`` over ``clip``: [decode,
    feed] per frame (feed: letterbox + conversion into the model input + the session's run)."""
    times = []
    if config == "dvpp-board-cpu":
        import av  # noqa: PLC0415

        with av.open(clip) as container:
            packets = container.demux(video=0)
            while True:
                start = time.process_time()
                packet = next(packets, None)
                if packet is None:
                    break
                if packet.size:
                    bytes(packet)  # the frame handed to VDEC (copied into its stream buffer)
                    times.append([time.process_time() - start, 0.0])
        return times
    with tempfile.TemporaryDirectory() as folder:
        feeder = Feeder(ACL_DEVICE, Path(folder))
        try:
            decode = "cpu" if config.startswith("cpu") else "dvpp-emulated"
            source = feeder.frames(decode, clip)
            in_place = config == "cpu-in-place"
            while True:
                start = time.process_time()
                item = next(source, None)
                if item is None:
                    break
                decoded = time.process_time()
                feeder.session.run(feeder.feed(decode, item, in_place))
                times.append([decoded - start, time.process_time() - decoded])
        finally:
            feeder.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--worker", nargs=3, metavar=("KIND", "CONFIG", "CLIP"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, config, clip = args.worker
        result = (time_worker(config, clip) if kind == "time" else
                  count_copies(clip, int(config)))
        print(json.dumps(result))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    report: dict = {"frames": args.frames, "reps": args.reps, "model": list(MODEL),
                    "copies": {}, "cpu_time": {}}
    clips = {f"{w}x{h}": make_clip(RESULTS / f"dvpp_{w}x{h}.mp4", (w, h), args.frames)
             for w, h in SIZES}
    print("copies per frame (a 1920x1080 H.264 clip into a 256x256 YUV420SP AIPP input)")
    print(f"{'decode':>14} {'target':>6} {'feed':>9} {'CPU copies':>11} {'acl memcpy':>18} "
          f"{'read in place':>14} {'packet copies':>14}")
    rows = json.loads(_worker("copies", str(args.frames), clips["1920x1080"]))
    report["copies"]["1920x1080"] = rows
    for row in rows:
        memcpy = row["memcpy"]
        shown = " ".join(f"{k}={v:g}" for k, v in memcpy.items() if v) or "0"
        copies = "n/a" if row["cpu_copies"] is None else f"{row['cpu_copies']:g}"
        place = "yes" if row["in_place"] else "no"
        print(f"{row['decode']:>14} {row['target']:>6} {row['feed']:>9} {copies:>11} "
              f"{shown:>18} {place:>14} {row['packet_copies']:>14.2f}")
    print("  dvpp-board: VDEC/VPC through the media stand-in; besides, each coded packet is one "
          "memcpy into VDEC's stream buffer\n")
    print("CPU time per frame (process CPU time, ms; paired ratios to cpu-copied)")
    print(f"{'clip':>10} {'config':>16} {'decode':>8} {'feed':>8} {'total':>8} {'total x':>8} "
          f"{'feed x':>8}")
    for label, clip in clips.items():
        medians = {c: {"decode": [], "feed": [], "total": []} for c in TIMED}
        ratios = {c: {"total": [], "feed": []} for c in TIMED}
        for rep in range(args.reps):
            order = TIMED if rep % 2 == 0 else TIMED[::-1]
            this = {}
            for config in order:
                frames = json.loads(_worker("time", config, clip))
                this[config] = {
                    "decode": statistics.median(d for d, _ in frames) * 1e3,
                    "feed": statistics.median(f for _, f in frames) * 1e3,
                    "total": statistics.median(d + f for d, f in frames) * 1e3}
            for config in TIMED:
                for stage, value in this[config].items():
                    medians[config][stage].append(value)
                for stage in ("total", "feed"):
                    ratios[config][stage].append(this[config][stage] / this["cpu-copied"][stage])
        report["cpu_time"][label] = {}
        for config in TIMED:
            ms = {stage: statistics.median(values) for stage, values in medians[config].items()}
            ratio = {stage: statistics.median(values) for stage, values in ratios[config].items()}
            report["cpu_time"][label][config] = {
                "cpu_ms_per_frame": ms, "ratio_to_cpu_copied": ratio,
                "per_rep_ms": medians[config]}
            print(f"{label:>10} {config:>16} {ms['decode']:8.3f} {ms['feed']:8.3f} "
                  f"{ms['total']:8.3f} {ratio['total']:8.3f} {ratio['feed']:8.3f}")
    report["machine_note"] = ("this host's CPU, not the board's: only a board gives the board's "
                              "figures (docs/sim.md)")
    target = RESULTS / "dvpp.json"
    partial = target.with_suffix(".json.tmp")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(target)
    print(f"-> {target}")
    return 0


def _worker(kind: str, config: str, clip: Path) -> str:
    done = subprocess.run([sys.executable, __file__, "--worker", kind, config, str(clip)],
                          check=True, capture_output=True, text=True, cwd=ROOT)
    return done.stdout.strip().splitlines()[-1]


if __name__ == "__main__":
    raise SystemExit(main())
