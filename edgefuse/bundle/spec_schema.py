"""The JSON Schema of the build spec (``SPEC.yaml``), apiVersion ``edgefuse/v1``.

Why a JSON Schema and not hand-written checks: one declarative document says which keys exist,
their types, ranges and enums; ``jsonschema`` reports every violation at once, and editors can
use the same schema (``edgefuse build --schema``) to complete and underline a spec as it is
typed. Every property carries ``examples``: ``spec.py`` turns them into the "write this instead"
part of each error. Checks a schema cannot express (a file exists, a catalogue name is known, an
app's model is one of the spec's models) live in ``spec_checks.py``.

Layout (see examples/ for commented specs)::

    apiVersion: edgefuse/v1
    bundle:   {name, version}
    target:   {board, soc, cann, cann_home, os, glibc, arch}
    reproducibility: {source_date_epoch}
    cache:    {dir}
    models:   [{name, source, sha256, input | inputs, opset, optimize, precision, verify, aipp,
                custom_ops, task, classes, preprocess, postprocess}]
    custom_ops: {package, vendor}
    app:      {kind, model, source, sinks, backend, config}
    service:  {name, user, group, restart, restart_sec, environment, supplementary_groups}
    install:  {prefix}
    python:   {version, platform, wheels, extras}
"""

from __future__ import annotations

from typing import Any

from edgefuse.bundle.boards import ARCHES, BOARDS
from edgefuse.model_info import ACTIVATIONS, LAYOUTS

# edgefuse's extras that a bundle may carry (pyproject.toml): what the apps import on the board
BUNDLE_EXTRAS = ("vision", "events", "serve")

API_VERSION = "edgefuse/v1"
NAME_PATTERN = "^[a-z0-9][a-z0-9._-]{0,62}$"
_NAME_TEXT = "lower-case letters, digits, '.', '_' or '-', starting with a letter or digit"
# A PEP 440 public version in its normalized form, which install.sh orders (2.0.0rc1 < 2.0.0 <
# 2.0.0.post1) where two releases have the same build number; no epoch, no local part, no leading
# zeros, so that two spellings are never one version
_NUMBER = "(0|[1-9][0-9]*)"
VERSION_PATTERN = (f"^{_NUMBER}(\\.{_NUMBER})*((a|b|rc){_NUMBER})?(\\.post{_NUMBER})?"
                   f"(\\.dev{_NUMBER})?$")
_VERSION_TEXT = ("a PEP 440 version in normalized form: N[.N]...[aN|bN|rcN][.postN][.devN], "
                 "e.g. 2.0.0rc1, 2.0.0, 2.0.0.post1")

_SHAPE = {
    "type": "array",
    "items": {"type": "integer", "minimum": 1, "examples": [640]},
    "minItems": 1,
    "maxItems": 8,
    "description": "a static shape, e.g. [1, 3, 640, 640]",
    "examples": [[1, 3, 640, 640]],
}
_COSINE = {"type": "number", "minimum": -1, "maximum": 1, "examples": [0.999]}
_NAMES = {"type": "array", "items": {"type": "string", "minLength": 1}, "examples": [["a", "b"]]}


def _object(properties: dict[str, Any], required: tuple[str, ...] = (), **extra: Any) -> dict:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False, **extra}


_OPTIMIZE = _object({
    "target": {"type": "string", "minLength": 1, "examples": ["cpu", "Ascend310B4"],
               "description": "the optimize pipeline: cpu (portable) or an Ascend soc (custom "
                              "ops; the bundle then carries their package); 'soc' means "
                              "target.soc"},
    "only": {**_NAMES, "examples": [["fold-bn-into-conv"]]},
    "skip": {**_NAMES, "examples": [["fold-bn-into-conv"]]},
    # the keys of `edgefuse optimize --yolo-head` (edgefuse.optimize.append_yolo_head)
    "yolo_head": _object({
        "conf": {"type": "number", "minimum": 0, "maximum": 1, "examples": [0.25]},
        "iou": {"type": "number", "minimum": 0, "maximum": 1, "examples": [0.45]},
        "max_det": {"type": "integer", "minimum": 1, "examples": [300]},
        "max_per_class": {"type": "integer", "minimum": 0, "examples": [0]},
        "multi_label": {"type": "boolean", "examples": [False]},
        "layout": {"enum": ["auto", "yolov5", "yolov8"], "examples": ["auto"]},
        "output": {"type": "string", "minLength": 1, "examples": ["output0"]},
    }, examples=[{"conf": 0.25, "iou": 0.45, "max_det": 300}],
       description="append the device-side YOLO decode + NMS (edgefuse::YoloHead): the model "
                   "returns boxes, scores, classes, num_detections (postprocess layout "
                   "yolo_head); {} takes conf 0.25, iou 0.45, max_det 300"),
})

# INT8: ATC quantizes with a calibration run (--compression_optimize_conf); the layers it leaves
# in float run under force_fp16 (edgefuse.acl.compile.int8)
INT8_MODE = "int8"
_PRECISION = _object({
    "mode": {"enum": ["force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype",
                      "allow_mix_precision", "force_fp32", INT8_MODE],
             "examples": ["force_fp16"],
             "description": "ATC --precision_mode, or int8: ATC quantizes Conv/Gemm/MatMul to "
                            "INT8 with calibration frames, the rest runs force_fp16"},
    "keep_fp32": {"type": ["string", "array"], "items": {"type": "string", "minLength": 1},
                  "examples": ["auto"],
                  "description": "auto (policy, overflow and search), none, or node names and "
                                 "op types"},
    "keep_io_types": {"type": "boolean", "examples": [False]},
    "calibration": {"type": "string", "minLength": 1, "examples": ["calib/frames/"],
                    "description": "mode int8: real frames of the scene, a folder of images (or "
                                   ".npz files) or a video, relative to the spec (default: "
                                   "verify.calibration)"},
    "keep_fp16": {"type": ["string", "array"], "items": {"type": "string", "minLength": 1},
                  "minLength": 1, "examples": ["auto", ["/model.0/conv/Conv"]],
                  "description": "mode int8: auto (the layers whose INT8 moves the task metric "
                                 "most, measured on the host emulation until it is within "
                                 "verify.int8_max_drop of FP16; the default when the model's "
                                 "task is known), none, or ONNX node names of Conv/Gemm/MatMul "
                                 "layers ATC leaves unquantized (FP16 on the board), which may "
                                 "include auto (a list, or one string with commas)"},
    "keep_fp16_budget_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400,
                           "examples": [120],
                           "description": "mode int8, keep_fp16 auto: the time the search may "
                                          "take, in seconds (default 120); a search cut by it "
                                          "says so in the MANIFEST"},
})

_VERIFY = _object({
    "optimize_min_cosine": {**_COSINE, "examples": [0.99999],
                            "description": "gate: optimized FP32 against the converted model"},
    "fp16_min_cosine": {**_COSINE, "examples": [0.999],
                        "description": "gate: FP16 (storage emulated) against FP32"},
    "int8_min_cosine": {**_COSINE, "examples": [0.99],
                        "description": "gate, mode int8: the host emulation of the board's "
                                       "INT8 against FP32 on the calibration frames"},
    "int8_max_drop": {"type": "number", "minimum": 0, "maximum": 100, "examples": [1.0],
                      "description": "gate, mode int8 with keep_fp16 auto: how many points the "
                                     "task metric (AP50 / mIoU / top-1) under the host's INT8 "
                                     "emulation may fall below FP16's (default 1)"},
    "max_rel_l2": {"type": ["number", "null"], "minimum": 0, "examples": [0.05]},
    "samples": {"type": "integer", "minimum": 1, "maximum": 64, "examples": [2]},
    "seed": {"type": "integer", "minimum": 0, "examples": [0]},
    "calibration": {"type": "string", "minLength": 1, "examples": ["calib/images/"],
                    "description": "a folder of images or .npz files, or a video, relative to "
                                   "the spec"},
})

_AIPP = _object({
    # AippSpec's source pixel formats (edgefuse.acl.compile.aipp), which it maps to ATC's *_U8
    "input_format": {"enum": ["RGB888", "BGR888", "YUV420SP", "YVU420SP"],
                     "examples": ["RGB888"]},
    "source_size": {"type": "array", "items": {"type": "integer", "minimum": 1},
                    "minItems": 2, "maxItems": 2, "examples": [[640, 640]]},
    "crop": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0},
             "minItems": 4, "maxItems": 4, "examples": [[0, 0, 640, 640]]},
    "model_color": {"enum": ["RGB", "BGR"], "examples": ["RGB"]},
    "mean": {"type": ["number", "array"], "examples": [[0, 0, 0]]},
    "std": {"type": ["number", "array", "null"], "examples": [[255, 255, 255]]},
    "scale": {"type": ["number", "array", "null"], "examples": [[0.00392157]]},
    "csc": {"type": "string", "examples": ["jpeg"]},
    "input": {"type": ["string", "null"], "examples": ["images"]},
}, ("input_format", "source_size"))

_PREPROCESS = _object({
    "size": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2,
             "maxItems": 2, "examples": [[640, 640]]},
    "resize": {"enum": ["letterbox", "stretch"], "examples": ["letterbox"]},
    "pad_value": {"type": "integer", "minimum": 0, "maximum": 255, "examples": [114]},
    "center": {"type": "boolean", "examples": [True]},
    "color": {"enum": ["RGB", "BGR"], "examples": ["RGB"]},
    "scale": {"type": "number", "exclusiveMinimum": 0, "examples": [0.00392156862745098]},
    "mean": {"type": ["number", "array"], "examples": [[0.485, 0.456, 0.406]]},
    "std": {"type": ["number", "array"], "examples": [[0.229, 0.224, 0.225]]},
    "layout": {"enum": ["NCHW", "NHWC"], "examples": ["NCHW"]},
    "dtype": {"enum": ["float32", "float16", "uint8"], "examples": ["float32"]},
    "interpolation": {"enum": ["nearest", "linear", "cubic", "area", "lanczos"],
                      "examples": ["linear"]},
    "rounding": {"enum": ["round", "floor"], "examples": ["round"]},
})

_POSTPROCESS = _object({
    "layout": {"enum": list(LAYOUTS), "examples": ["yolov8"]},
    "conf": {"type": "number", "minimum": 0, "maximum": 1, "examples": [0.25]},
    "iou": {"type": "number", "minimum": 0, "maximum": 1, "examples": [0.45]},
    "max_det": {"type": "integer", "minimum": 1, "examples": [300]},
    "background": {"type": "integer", "minimum": 0, "examples": [0]},
    "strides": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1,
                "examples": [[8, 16, 32]]},
    "activation": {"enum": list(ACTIVATIONS), "examples": ["sigmoid"]},
})

_MODEL = _object({
    "name": {"type": "string", "pattern": NAME_PATTERN, "examples": ["detector"],
             "description": f"the model's folder in the bundle: {_NAME_TEXT}"},
    "source": {"type": "string", "minLength": 1, "examples": ["yolov8n:tiny"],
               "description": "a catalogue name (name[:tiny]), an .onnx or TorchScript file "
                              "relative to the spec, or package.module:factory"},
    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$",
               "examples": ["<64 hex digits: sha256sum FILE>"],
               "description": "pins a file source: the build refuses other bytes"},
    "input": {**_SHAPE, "description": "the shape of the single input"},
    "inputs": {"type": "object", "additionalProperties": _SHAPE, "minProperties": 1,
               "examples": [{"images": [1, 3, 640, 640]}]},
    "opset": {"type": "integer", "minimum": 7, "maximum": 23, "examples": [17]},
    "optimize": _OPTIMIZE,
    "precision": _PRECISION,
    "verify": _VERIFY,
    "aipp": _AIPP,
    "custom_ops": {"type": "boolean", "examples": [True],
                   "description": "false decomposes edgefuse custom ops (no op package needed)"},
    "task": {"enum": ["detect", "segment", "classify"], "examples": ["detect"]},
    "classes": {"type": ["array", "string"], "items": {"type": "string"},
                "examples": [["circle", "square", "triangle"]],
                "description": "class names, or a text file with one name per line"},
    "preprocess": _PREPROCESS,
    "postprocess": _POSTPROCESS,
}, ("name", "source"))

_APP = _object({
    "kind": {"enum": ["detection", "segmentation"], "examples": ["detection"]},
    "model": {"type": "string", "pattern": NAME_PATTERN, "examples": ["detector"],
              "description": "the name of the spec's model the service runs"},
    "source": {"type": ["string", "integer"], "examples": [0, "rtsp://camera/stream"],
               "description": "camera index, video file, stream URL, image folder"},
    "sinks": _object({
        "jsonl": {"type": ["string", "null"], "examples": ["/var/lib/edgefuse/out.jsonl"]},
        "save": {"type": ["string", "null"], "examples": ["/var/lib/edgefuse/frames/"]},
    }),
    "backend": {"type": "array", "items": {"enum": ["acl", "tensorrt", "cuda", "cpu"]},
                "minItems": 1, "examples": [["acl", "cpu"]]},
    "config": {"type": "object", "examples": [{"conf": 0.3}],
               "description": "further keys of apps/<kind>/config.yaml"},
}, ("kind", "model"))

_SERVICE = _object({
    "name": {"type": "string", "pattern": "^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$",
             "examples": ["edgefuse-camera"], "description": "the systemd unit's name"},
    "user": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_-]{0,31}$",
             "not": {"const": "root"}, "examples": ["HwHiAiUser"],
             "description": "never root: the app needs only the NPU and camera groups"},
    "group": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_-]{0,31}$",
              "examples": ["HwHiAiUser"]},
    "uid": {"type": "integer", "minimum": 1, "maximum": 2147483647, "examples": [1000],
            "description": "the user's number (default 1000): the emitted image and pod run as "
                           "it (runAsUser); it must own the NPU's device nodes as on the board"},
    "gid": {"type": "integer", "minimum": 1, "maximum": 2147483647, "examples": [1000],
            "description": "the group's number (default 1000), for the image and the pod"},
    "supplementary_groups": {"type": "array",
                             "items": {"type": "string", "pattern": "^[a-z_][a-z0-9_-]{0,31}$"},
                             "examples": [["video"]]},
    "restart": {"enum": ["always", "on-failure", "on-abnormal", "on-abort", "no"],
                "examples": ["always"]},
    "restart_sec": {"type": "number", "minimum": 0, "maximum": 3600, "examples": [5]},
    "health": _object({
        "port": {"type": "integer", "minimum": 1, "maximum": 65535, "examples": [8080]},
        "path": {"type": "string", "pattern": "^/[A-Za-z0-9._/-]*$", "examples": ["/healthz"]},
    }, ("port",), description="the app's HTTP health endpoint: Kubernetes probes it"),
    "metrics_port": {"type": "integer", "minimum": 1, "maximum": 65535, "examples": [9100],
                     "description": "the port the app serves metrics on"},
    "environment": {"type": "object",
                    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                    "additionalProperties": {"type": ["string", "number", "boolean"]},
                    "examples": [{"EDGEFUSE_LOG": "info"}]},
})

_PYTHON = _object({
    "version": {"type": "string", "pattern": "^3\\.[0-9]{1,2}$", "examples": ["3.10"],
                "description": "the board's python3 (X.Y), which the wheels are resolved for; "
                               "default: the board's (target.board), required for a board the "
                               "spec describes"},
    "platform": {"type": ["string", "array"], "pattern": "^[a-z0-9_]+$",
                 "items": {"type": "string", "pattern": "^[a-z0-9_]+$"}, "minItems": 1,
                 "examples": ["manylinux_2_28_aarch64"],
                 "description": "pip --platform tag(s) instead of the board's (default: every "
                                "manylinux tag the board's glibc and CPU allow)"},
    "wheels": {"type": "string", "minLength": 1, "examples": ["wheelhouse/", "download"],
               "description": "a folder of wheels for the board, relative to the spec, or "
                              "'download' (pip download from the build host's index); the "
                              "bundle carries them, pinned by sha256, and the board installs "
                              "from them only"},
    "extras": {"type": "array", "items": {"enum": list(BUNDLE_EXTRAS)}, "examples": [["serve"]],
               "description": "edgefuse extras to carry besides those the app needs (the app's "
                              "kind and config choose vision, events, serve themselves)"},
}, ("wheels",), examples=[{"wheels": "download"}],
   description="the board's Python packages: resolved at build time for the target, carried in "
               "the bundle and pinned by sha256 (the board never installs from an index)")

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://edgefuse.dev/schemas/build-spec-v1.json",
    "title": "edgefuse build spec",
    **_object({
        "apiVersion": {"const": API_VERSION, "examples": [API_VERSION]},
        "bundle": _object({
            "name": {"type": "string", "pattern": NAME_PATTERN, "examples": ["shapes-camera"],
                     "description": _NAME_TEXT},
            "version": {"type": "string", "pattern": VERSION_PATTERN, "maxLength": 63,
                        "examples": ["1.0.0"], "description": _VERSION_TEXT},
        }, ("name",)),
        "target": _object({
            "board": {"type": "string", "pattern": NAME_PATTERN,
                      "examples": ["atlas-200i-dk-a2", "debian-12-arm64"],
                      "description": "the board and its image: a name from edgefuse's table "
                                     f"({', '.join(BOARDS)}), or a name of your own with "
                                     "glibc, arch and python.version"},
            "os": {"type": "string", "minLength": 1, "examples": ["Ubuntu 20.04"],
                   "description": "a described board's OS, for the record"},
            "glibc": {"type": "string", "pattern": "^2\\.[0-9]{1,2}$", "examples": ["2.31"],
                      "description": "a described board's glibc (ldd --version)"},
            "arch": {"enum": list(ARCHES), "examples": ["aarch64"],
                     "description": "a described board's CPU (uname -m)"},
            "soc": {"type": "string", "minLength": 1, "examples": ["Ascend310B4"]},
            "cann": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+([.][0-9A-Za-z]+)*$",
                     "examples": ["7.0.0"], "description": "the CANN version the board runs"},
            "cann_home": {"type": "string", "pattern": "^(/[A-Za-z0-9_.+-]+)+/?$", "examples": [
                "/usr/local/Ascend/ascend-toolkit/latest"],
                          "description": "an absolute path on the board: it goes into the "
                                         "service's PATH-like variables, so no ':', space or "
                                         "newline"},
        }, ("soc",)),
        "reproducibility": _object({
            "source_date_epoch": {"type": "integer", "minimum": 315532800,
                                  "maximum": 4102444800, "examples": [1767225600],
                                  "description": "fixed mtime of every archive entry "
                                                 "(SOURCE_DATE_EPOCH overrides it)"},
        }),
        "cache": _object({
            "dir": {"type": "string", "minLength": 1, "examples": [".edgefuse-cache"]},
        }),
        "models": {"type": "array", "items": _MODEL, "minItems": 1,
                   "examples": [[{"name": "detector", "source": "yolov8n:tiny"}]]},
        "custom_ops": _object({
            "package": {"enum": ["auto", "always", "never"], "examples": ["auto"]},
            "vendor": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$",
                       "examples": ["edgefuse"]},
        }),
        "app": _APP,
        "service": _SERVICE,
        "install": _object({
            # folders that never start with '.': no '.', '..' (out of a rootfs), '//' or '/'
            "prefix": {"type": "string", "pattern": "^(/[A-Za-z0-9_-][A-Za-z0-9._-]*)+$",
                       "examples": ["/opt/edgefuse/shapes-camera"]},
        }),
        "python": _PYTHON,
    }, ("apiVersion", "bundle", "target", "models", "python")),
}


def _whole_strings(node: Any) -> None:
    """End every ``^...$`` pattern with ``$(?!\\n)``: ``jsonschema`` matches with Python's
    ``re.search``, whose ``$`` also matches before a trailing newline (a unit named
    ``"edgefuse-x\\n"`` would pass and split the unit file); ECMA-262 editors read it the same."""
    if isinstance(node, dict):
        pattern = node.get("pattern")
        if isinstance(pattern, str) and pattern.endswith("$"):
            node["pattern"] = pattern + "(?!\\n)"
        for value in node.values():
            _whole_strings(value)
    elif isinstance(node, list):
        for value in node:
            _whole_strings(value)


_whole_strings(SCHEMA)
