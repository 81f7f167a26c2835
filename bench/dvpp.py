"""CPU time per frame with decode + letterbox on the CPU vs with DVPP (issue 30 §5).

What it measures, each configuration in its own fresh process, alternated A, B, C then reversed
for ``--reps`` repetitions, as the median of per-process medians and the paired ratio to ``cpu``
(the method of bench/_harness.py), on the demo clip re-encoded to H.264 at camera sizes:

- ``cpu``: what the board's ARM cores do today for a YUV420SP AIPP build with ``decode: cpu``:
  OpenCV decodes to BGR, the letterbox runs in OpenCV/numpy, the frame becomes NV12
  (``AippSpec.frame_from_bgr``).
- ``dvpp-board-cpu``: what stays on the cores with ``decode: dvpp`` on the board: PyAV demuxes
  packets (VDEC decodes, VPC letterboxes: no CPU time of ours). The BGR picture a sink draws on
  is fetched only when a sink needs it and is not counted.
- ``dvpp-emulated``: the ``sim`` emulation's cost on the host (PyAV decode to NV12, the SoC's
  stride layout, VPC's plane-wise letterbox): what a host run with ``decode: dvpp`` pays.

Only a board gives the board's figures: the VDEC/VPC latency per frame, the frame rate at N
cameras and the cores' load with ``decode: dvpp`` (docs/sim.md says how: ``edgefuse bench
--source``). Run: ``python bench/dvpp.py [--frames 60] [--reps 3]``; writes
bench/results/dvpp.json.
"""

from __future__ import annotations

import argparse
import fractions
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CONFIGS = ("cpu", "dvpp-board-cpu", "dvpp-emulated")
SIZES = ((1920, 1080), (1280, 720))
MODEL = (256, 256)  # the demo detector's input (height, width)
SOC = "Ascend310B4"


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


def worker(config: str, clip: str) -> list[float]:
    """CPU seconds (this process: user + system) per frame of ``config`` over ``clip``."""
    import av  # noqa: PLC0415
    import cv2  # noqa: PLC0415

    from edgefuse.acl.compile.aipp import AippSpec  # noqa: PLC0415
    from edgefuse.fallback import dvpp_emulation as emu  # noqa: PLC0415
    from edgefuse.preprocess import letterbox  # noqa: PLC0415

    spec = AippSpec(input_format="YUV420SP", source_size=MODEL[::-1], csc="bt601_narrow")
    times = []
    if config == "cpu":
        capture = cv2.VideoCapture(clip)
        while True:
            start = time.process_time()
            ok, image = capture.read()
            if not ok:
                break
            spec.frame_from_bgr(letterbox(image, MODEL)[0])
            times.append(time.process_time() - start)
    elif config == "dvpp-board-cpu":
        with av.open(clip) as container:
            packets = container.demux(video=0)
            while True:
                start = time.process_time()
                packet = next(packets, None)
                if packet is None:
                    break
                if packet.size:
                    bytes(packet)  # the frame handed to VDEC (copied into its stream buffer)
                    times.append(time.process_time() - start)
    else:
        vpc = emu.EmulatedVpc(spec, SOC)
        pictures = emu.decoded_pictures(clip, SOC)
        while True:
            start = time.process_time()
            got = next(pictures, None)
            if got is None:
                break
            vpc.letterbox(got[0])
            times.append(time.process_time() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "CLIP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    report: dict = {"frames": args.frames, "reps": args.reps, "model": list(MODEL), "sizes": {}}
    print(f"{'clip':>10} {'config':>16} {'CPU ms/frame':>13} {'vs cpu':>8}")
    for size in SIZES:
        clip = make_clip(RESULTS / f"dvpp_{size[0]}x{size[1]}.mp4", size, args.frames)
        medians: dict[str, list[float]] = {c: [] for c in CONFIGS}
        ratios: dict[str, list[float]] = {c: [] for c in CONFIGS}
        for rep in range(args.reps):
            order = CONFIGS if rep % 2 == 0 else CONFIGS[::-1]
            this: dict[str, float] = {}
            for config in order:
                out = subprocess.run([sys.executable, __file__, "--worker", config, str(clip)],
                                     check=True, capture_output=True, text=True, cwd=ROOT)
                this[config] = statistics.median(json.loads(out.stdout)) * 1e3
            for config in CONFIGS:
                medians[config].append(this[config])
                ratios[config].append(this[config] / this["cpu"])
        label = f"{size[0]}x{size[1]}"
        report["sizes"][label] = {}
        for config in CONFIGS:
            ms, ratio = statistics.median(medians[config]), statistics.median(ratios[config])
            report["sizes"][label][config] = {"cpu_ms_per_frame": ms, "ratio_to_cpu": ratio,
                                              "per_rep_ms": medians[config]}
            print(f"{label:>10} {config:>16} {ms:13.3f} {ratio:8.3f}")
    report["machine_note"] = ("this host's CPU, not the board's: only a board gives the board's "
                              "figures (docs/sim.md)")
    (RESULTS / "dvpp.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"-> {RESULTS / 'dvpp.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
