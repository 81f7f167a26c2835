"""Make the PaddleDetection fixtures: each model built from PaddleDetection 2.6's own config
(``paddle_configs/``, copied from the v2.6.0 tag) narrowed to 3 classes and a small width,
seeded random weights with BatchNorm statistics measured on the test photos, exported by
PaddleDetection's ``Trainer.export`` (what ``tools/export_model.py`` runs, writing
``infer_cfg.yml``) and converted by paddle2onnx::

    ppyoloe_plus/   PP-YOLOE+ (crn_s config) with ``exclude_nms=True``: inputs image and
                    scale_factor, outputs boxes [1, N, 4] (divided by scale_factor) and
                    scores [1, C, N]
    picodet_raw/    PicoDet-S (lcnet 320) with ``export.post_process=False``: image only, four
                    strides of class scores and DFL distributions
    picodet_boxes/  PicoDet-S with ``export.nms=False``: image only, boxes and scores

Two adjustments for paddle 3.x, neither changing a number: ``paddle.jit.to_static`` is called
with ``full_graph=True`` (ppdet 2.6's export needs it), and the interpolation ops' float64
``scale`` attribute that paddle2onnx refuses is rewritten as float32 (same values).

Run in a virtual environment with paddlepaddle 3.3, paddledet 2.6.0 (``--no-deps`` plus what
it imports), paddle2onnx 2.1 and opencv::

    python tests/vision/detect/exporters/make_paddle.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np
import paddle

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "paddle_configs"
OUT = HERE / "paddle"
SEED = 33
LABELS = ["person", "cat", "cup"]
MODELS = {
    "ppyoloe_plus": ("ppyoloe/ppyoloe_plus_crn_s_80e_coco.yml",
                     {"width_mult": 0.0625, "depth_mult": 0.33, "exclude_nms": True}),
    "picodet_raw": ("picodet/picodet_s_320_coco_lcnet.yml",
                    {"LCNet": {"scale": 0.25}, "LCPAN": {"out_channels": 24},
                     "PicoHeadV2": {"conv_feat": {"feat_in": 24, "feat_out": 24},
                                    "feat_in_chan": 24},
                     "export": {"post_process": False}}),
    "picodet_boxes": ("picodet/picodet_s_320_coco_lcnet.yml",
                      {"LCNet": {"scale": 0.25}, "LCPAN": {"out_channels": 24},
                       "PicoHeadV2": {"conv_feat": {"feat_in": 24, "feat_out": 24},
                                      "feat_in_chan": 24},
                       "export": {"post_process": True, "nms": False}}),
}


def full_graph_to_static() -> None:
    """ppdet 2.6 calls ``paddle.jit.to_static(model, input_spec=...)``; paddle 3.x needs
    ``full_graph=True`` for it to trace the whole detector."""
    original = paddle.jit.to_static

    def to_static(function=None, input_spec=None, **options):
        options.setdefault("full_graph", True)
        return original(function, input_spec=input_spec, **options)

    paddle.jit.to_static = to_static


def photos_batch(size: tuple[int, int], mean, std, scale: float) -> np.ndarray:
    images = []
    for path in sorted((HERE.parent.parent / "photos").glob("*.jpg")):
        rgb = cv2.imread(str(path))[..., ::-1]
        resized = cv2.resize(rgb, size[::-1], interpolation=cv2.INTER_CUBIC) * scale
        images.append(((resized - mean) / std).transpose(2, 0, 1))
    return np.stack(images).astype(np.float32)


def calibrate_batch_norm(model, cfg) -> None:
    """BatchNorm statistics measured on the photos, so that random weights give activations
    that depend on the picture instead of dying out; score biases at 0 (not the 1 % prior)."""
    steps = {next(iter(step)): step[next(iter(step))] for step in
             cfg["TestReader"]["sample_transforms"]}
    norm = steps["NormalizeImage"]
    plain = norm.get("norm_type", "mean_std") == "none"
    mean = np.zeros(3) if plain else np.asarray(norm["mean"])
    std = np.ones(3) if plain else np.asarray(norm["std"])
    batch = photos_batch(tuple(steps["Resize"]["target_size"]), mean, std, 1 / 255)
    rng = np.random.default_rng(SEED)
    for name, parameter in model.named_parameters():
        # PPYOLOEHead starts its prediction convs at 0 (every box and score alike): random.
        if name.endswith(".weight") and parameter.ndim == 4 and not parameter.numpy().any():
            fan_in = int(np.prod(parameter.shape[1:]))
            parameter.set_value(rng.normal(0, 1 / np.sqrt(fan_in), parameter.shape)
                                .astype(np.float32))
    model.eval()
    for layer in model.sublayers():
        if isinstance(layer, paddle.nn.BatchNorm2D | paddle.nn.BatchNorm):
            layer._momentum = 0.0  # running = this batch's statistics
            layer.train()
    with paddle.no_grad():
        count = len(batch)
        model({"image": paddle.to_tensor(batch),
               "im_shape": paddle.to_tensor(np.tile(batch.shape[2:], (count, 1)), "float32"),
               "scale_factor": paddle.ones([count, 2], "float32")})
        for name, parameter in model.named_parameters():
            if name.endswith(".bias") and ("pred_cls" in name or "head_cls" in name):
                parameter.set_value(paddle.zeros_like(parameter))
    model.eval()


def float32_interp_scales(program_json: Path) -> int:
    """paddle2onnx 2.1 refuses the float64 ``scale`` attribute paddle 3.3 writes on its
    interpolation ops: the same values as float32. Returns how many it rewrote."""
    text = program_json.read_text()
    data = json.loads(text)
    count = 0

    def walk(node):
        nonlocal count
        if isinstance(node, dict):
            if node.get("N") == "scale" and isinstance(node.get("AT"), dict) and \
                    node["AT"].get("#") == "0.a_array":
                for item in node["AT"].get("D", []):
                    if item.get("#") == "0.a_f64":
                        item["#"] = "0.a_f32"
                        count += 1
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(data)
    program_json.write_text(json.dumps(data))
    return count


def export(name: str, config: str, overrides: dict, work: Path) -> None:
    from paddle2onnx import export as to_onnx  # noqa: PLC0415 - the generator's venv only
    from ppdet.core.workspace import load_config, merge_config  # noqa: PLC0415
    from ppdet.engine import Trainer  # noqa: PLC0415

    labels = work / "label_list.txt"
    labels.write_text("\n".join(LABELS) + "\n")
    cfg = load_config(str(CONFIGS / config))
    merge_config({"num_classes": len(LABELS), "norm_type": "bn", "use_gpu": False,
                  "TestDataset": {"name": "ImageFolder", "anno_path": str(labels),
                                  "dataset_dir": str(work)}, **overrides})
    paddle.seed(SEED)
    np.random.seed(SEED)
    trainer = Trainer(cfg, mode="test")
    calibrate_batch_norm(trainer.model, cfg)
    trainer.export(str(work / "export"))
    saved = next((work / "export").iterdir())
    program = saved / "model.json"
    rewritten = float32_interp_scales(program) if program.exists() else 0
    target = OUT / name
    target.mkdir(parents=True, exist_ok=True)
    to_onnx(str(program if program.exists() else saved / "model.pdmodel"),
            str(saved / "model.pdiparams"), str(target / "model.onnx"), opset_version=11)
    shutil.copy(saved / "infer_cfg.yml", target / "infer_cfg.yml")
    size = (target / "model.onnx").stat().st_size // 1024
    print(f"{name}: {size} KiB, {rewritten} interp scales rewritten as float32")


def main() -> None:
    wanted = sys.argv[1:] or list(MODELS)
    if len(wanted) > 1:  # ppdet's config workspace is global: one model per process
        for name in wanted:
            subprocess.run([sys.executable, __file__, name], check=True)
        return
    paddle.set_device("cpu")
    full_graph_to_static()
    config, overrides = MODELS[wanted[0]]
    with tempfile.TemporaryDirectory() as work:
        export(wanted[0], config, overrides, Path(work))


if __name__ == "__main__":
    main()
