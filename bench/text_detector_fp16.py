"""The FP16 gate of a real text detector: calibrated on noise, then on a folder of text images.

A text detector's map on random inputs says little about text: edgefuse calls an output that
stays near zero there degenerate and the gate INCONCLUSIVE. The trained DBNet (``dbnet_text``)
is not degenerate on noise (its map lights up on ~1% of the pixels, and no word decodes), so both
gates are judged; this script measures what the folder-calibrated gate says about the words.
It writes ``--images`` held-out generated text images as PNG, exports the detector
(``edgefuse.convert``) with its preprocessing record embedded (resize to 160x160, RGB, x/255,
ImageNet mean/std, as PP-OCR normalises), optimizes it, and then

  (a) ``quantize`` on the default seeded random inputs,
  (b) ``quantize`` with ``inputs=`` the image folder (through the embedded record),
  (c) ``verify`` of each FP16 model against the FP32 one on the folder (FP16 storage emulated),

and scores the FP32 and each FP16 model's maps (plain ONNX Runtime) on the images: pixel F1/IoU
of the map > 0.3 against the shrunk word regions, word recall/precision of PaddleOCR's box
decoding against the true words (IoU >= 0.5), and the FP16 words against the FP32 words.

    python -m bench.text_detector_fp16                   # 32 images
    python -m bench.text_detector_fp16 --images 8

Prints a table and writes bench/results/text_detector_fp16.json (the models and the images go to
bench/results/text_detector/). One ONNX Runtime thread.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time

import numpy as np
import onnx

from bench._harness import RESULTS
from edgefuse.convert import convert
from edgefuse.metrics.text import word_scores
from edgefuse.model_info import AppInfo, embed, from_onnx
from edgefuse.models import get_entry
from edgefuse.models.dbnet import PREPROCESS
from edgefuse.optimize import optimize
from edgefuse.quantize import DEFAULT_MIN_COSINE, DEFAULT_SAMPLES, quantize
from edgefuse.reference.compare import NEAR_ZERO
from edgefuse.reference.feeds import calibration_preprocess, feed_set, input_specs
from edgefuse.verify import verify
from edgefuse.vision.detect.text_boxes import text_boxes
from edgefuse.vision.scenes.text import text_scene, write_text_images
from training.text_detector import score_maps

WORK = RESULTS / "text_detector"
IMAGE_SEED = 2000  # neither the training scenes (0) nor the training record's held-out (1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=32, help="held-out images in the folder")
    parser.add_argument("--json", default=str(RESULTS / "text_detector_fp16.json"))
    args = parser.parse_args()
    started = time.perf_counter()
    shutil.rmtree(WORK, ignore_errors=True)
    folder = WORK / "images"
    write_text_images(folder, seed=IMAGE_SEED, count=args.images, size=PREPROCESS.size)
    scenes = [text_scene(IMAGE_SEED, index, size=PREPROCESS.size) for index in range(args.images)]

    entry = get_entry("dbnet_text")
    fp32_path, opt_path = WORK / "dbnet_text.fp32.onnx", WORK / "dbnet_text.opt.onnx"
    exported = convert(entry.build(), inputs=entry.input_shape)
    onnx.save(embed(exported, AppInfo(task="segment", preprocess=PREPROCESS)), fp32_path)
    optimize(fp32_path, output=opt_path)
    carried = from_onnx(onnx.load(opt_path))
    if carried is None or carried.preprocess != PREPROCESS:
        raise SystemExit(f"{opt_path}: optimize lost the embedded preprocessing record")

    optimized = onnx.load(opt_path)
    feeds = feed_set(input_specs(optimized), folder,  # through the embedded record
                     preprocess=calibration_preprocess(optimized, None))
    fp32_maps = _maps(opt_path, feeds)
    rows = {"fp32": {"detection": score_maps(fp32_maps, scenes)}}
    for name, inputs in (("calibrated on random inputs", None), ("calibrated on images", folder)):
        target = WORK / f"dbnet_text.fp16.{'random' if inputs is None else 'images'}.onnx"
        result = quantize(opt_path, output=target, inputs=inputs)
        checked = verify(opt_path, target, inputs=folder)
        maps = _maps(target, feeds)
        (gate,) = result.report.gate
        rows[name] = {
            "quantize": {
                "verdict": _verdict(result.report.judged, result.passed),
                "cosine": gate.cosine,
                "max_abs_error": gate.max_abs_error,
                "samples": result.report.settings["calibration"]["samples"],
                "degenerate": result.report.degenerate,
                "kept_fp32": len(result.report.decisions),
                "seconds": round(result.report.seconds, 1),
            },
            "verify_on_images": {
                "verdict": "INCONCLUSIVE" if checked.inconclusive else
                           "PASSED" if checked.passed else "FAILED",
                "cosine": checked.outputs[0].cosine,
                "min_cosine": checked.min_cosine,
                "degenerate": checked.degenerate,
            },
            "detection": score_maps(maps, scenes),
            "against_fp32": {
                "max_abs_map_difference": float(np.abs(maps - fp32_maps).max()),
                "words": word_scores(_boxes(maps), _boxes(fp32_maps)),
                "same_words": _boxes_equal(maps, fp32_maps),
            },
        }
    results = {
        "model": "dbnet_text",
        "images": {"folder": str(folder), "count": args.images, "seed": IMAGE_SEED},
        "preprocess": PREPROCESS.to_dict(),
        "quantize_min_cosine": DEFAULT_MIN_COSINE,
        "fp32_map_on_random_inputs": _on_random_inputs(opt_path),
        "fp32_map_on_images": {"peak": float(fp32_maps.max()),
                               "median": float(np.median(fp32_maps)),
                               "fraction_over_0.3": float((fp32_maps > 0.3).mean())},
        "rows": rows,
        "seconds": round(time.perf_counter() - started, 1),
    }
    with open(args.json, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, default=float)
    print(render(results))
    print(f"\nwrote {args.json}")


def render(results: dict) -> str:
    lines = [f"{'model':<38}{'gate':>14}{'cosine':>12}{'verify':>14}{'v. cosine':>12}"
             f"{'pixel F1':>10}{'word R':>8}{'word P':>8}{'= FP32 words':>14}"]
    for name, row in results["rows"].items():
        det = row["detection"]
        figures = (f"{det['pixel']['f1']:>10.4f}{det['words']['recall']:>8.3f}"
                   f"{det['words']['precision']:>8.3f}")
        if name == "fp32":
            lines.append(f"{'FP32 (optimized)':<38}{'':>14}{'':>12}{'':>14}{'':>12}{figures}")
            continue
        q, v, same = row["quantize"], row["verify_on_images"], row["against_fp32"]["same_words"]
        lines.append(f"{'FP16 ' + name:<38}{q['verdict']:>14}{q['cosine']:>12.6f}"
                     f"{v['verdict']:>14}{v['cosine']:>12.6f}{figures}{str(same):>14}")
        for output, why in q["degenerate"].items():
            lines.append(f"    quantize gate: '{output}' degenerate ({why})")
    noise, images = results["fp32_map_on_random_inputs"], results["fp32_map_on_images"]
    lines.append(f"FP32 map on the gate's random inputs: peak {noise['peak']:.3g}, median "
                 f"{noise['median']:.2g}, {100 * noise['fraction_over_0.3']:.1f}% of pixels > 0.3, "
                 f"{noise['words_found']} words decoded (degenerate means peak < "
                 f"{noise['near_zero_limit']:g}); on the images: peak {images['peak']:.3g}, "
                 f"{100 * images['fraction_over_0.3']:.1f}% > 0.3")
    lines.append(f"(quantize gate: cosine >= {results['quantize_min_cosine']} with FP16 storage "
                 f"emulated; verify on the {results['images']['count']} images)")
    return "\n".join(lines)


def _maps(path, feeds) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    dtype = np.float16 if session.get_inputs()[0].type == "tensor(float16)" else np.float32
    maps = [session.run(None, {name: f[name].astype(dtype)})[0] for f in feeds]
    return np.concatenate(maps).astype(np.float32)


def _on_random_inputs(path) -> dict:
    """The FP32 map on the quantize gate's default inputs (seeded N(0, 1), 2 samples)."""
    maps = _maps(path, feed_set(input_specs(onnx.load(path)), None, samples=DEFAULT_SAMPLES))
    return {"samples": DEFAULT_SAMPLES, "peak": float(maps.max()),
            "median": float(np.median(maps)), "fraction_over_0.3": float((maps > 0.3).mean()),
            "words_found": sum(len(b) for b in _boxes(maps)), "near_zero_limit": NEAR_ZERO}


def _boxes(maps: np.ndarray) -> list[list[np.ndarray]]:
    return [[box.quad for box in text_boxes(m[0])] for m in maps]


def _boxes_equal(maps: np.ndarray, reference: np.ndarray) -> bool:
    scores = word_scores(_boxes(maps), _boxes(reference), min_iou=0.9)
    return scores["recall"] == 1.0 and scores["precision"] == 1.0


def _verdict(judged, passed: bool) -> str:
    return "INCONCLUSIVE" if not judged else "PASSED" if passed else "FAILED"


if __name__ == "__main__":
    main()
