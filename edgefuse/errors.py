"""Errors edgefuse raises, rendered like pip's diagnostics, and the catalogue of their references.

Why a tree of typed errors: the CLI must tell a user's mistake (exit 2, no traceback) from a bug in
edgefuse (exit 3, traceback, "please report"). Every user-facing error carries a stable kebab-case
``reference`` (searchable, testable), the ``message`` (what went wrong), ``context`` (where: the
file, the node, the log lines) and a ``hint`` (how to fix it).

Why one catalogue (``Ref``): a reference is a promise to users and their scripts. Written as
string literals across the package, two modules could give one reference two meanings, or a typo
could mint a new one; here every reference is declared once, with what it means, the errors only
accept declared ones, and ``docs/errors.md`` is generated from this list (a test keeps them equal).

This module imports nothing from edgefuse so that every other module can import it.
"""

from __future__ import annotations

import enum


@enum.unique
class Ref(str, enum.Enum):
    """Every error reference edgefuse emits, with what it means."""

    meaning: str

    def __new__(cls, value: str, meaning: str) -> Ref:
        member = str.__new__(cls, value)
        member._value_ = value
        member.meaning = meaning
        return member

    def __str__(self) -> str:
        return self.value

    # --- generic classes (the default reference of each error class) ---------------------------
    EDGEFUSE_ERROR = "edgefuse-error", "a problem the user can fix, not otherwise classified"
    INVALID_INPUT = "invalid-input", "an input (file, argument, spec) is wrong"
    MODEL_LOAD_FAILED = "model-load-failed", "a model file could not be read, parsed or checked"
    MISSING_DEPENDENCY = "missing-dependency", "an optional Python package is not installed"
    TOOL_FAILED = "tool-failed", "an external tool (ATC, a device runtime) failed"
    BACKEND_UNAVAILABLE = "backend-unavailable", "no requested runtime backend can run here"
    BAD_USAGE = "bad-usage", "the command line is malformed (argparse's complaint)"

    # --- files, paths and models ----------------------------------------------------------------
    FILE_NOT_FOUND = "file-not-found", "a file named on the command line does not exist"
    CANNOT_READ = "cannot-read", "a file exists but cannot be read (permissions, a folder, I/O)"
    CANNOT_WRITE = "cannot-write", "an output cannot be written where it was asked for"
    BAD_ARGUMENT = "bad-argument", "an argument is of the wrong type or outside its range"
    MODEL_NOT_FOUND = "model-not-found", "the model path does not exist"
    BAD_OUTPUT_PATH = "bad-output-path", "an output path cannot be written as asked"
    DISK_FULL = (
        "disk-full", "an output could not be written whole: no space left (ENOSPC) or over quota")
    WRITE_FAILED = (
        "write-failed", "an output could not be written whole (the message names the errno: "
        "EIO, EROFS, ...)")
    OUTPUT_IS_INPUT = (
        "output-is-input", "an output path is an input, holds one or lies inside one")
    BAD_MODEL_FILE = "bad-model-file", "a model file has a suffix edgefuse cannot read"
    BAD_MODEL_SOURCE = "bad-model-source", "what was passed as a model is not one"
    NOT_ONNX = "not-onnx", "a file given as ONNX does not parse as an ONNX model"
    TRUNCATED_MODEL = "truncated-model", "an ONNX file ends early (a partial copy)"
    INVALID_MODEL = "invalid-model", "an ONNX model fails onnx.checker"
    MISSING_EXTERNAL_DATA = "missing-external-data", "external weights the model names are missing"
    GRAPH_WITHOUT_INPUTS = "graph-without-inputs", "the graph has no runtime inputs"
    SHAPE_INFERENCE_FAILED = "shape-inference-failed", "ONNX shape inference refused the model"
    UNKNOWN_OP_DOMAIN = "unknown-op-domain", "a node's domain is one edgefuse cannot run or check"
    UNSUPPORTED_OPSET = "unsupported-opset", "the model's opset is outside what edgefuse handles"
    OPSET_CONVERSION_FAILED = "opset-conversion-failed", "converting the opset failed"
    OPSET_CONVERSION_MISMATCH = (
        "opset-conversion-mismatch", "the opset conversion changed the model's outputs")
    NOT_FP32_MODEL = "not-fp32-model", "quantize needs an FP32 model"
    NON_FINITE_WEIGHTS = "non-finite-weights", "the model's weights hold NaN or Inf"
    ALREADY_FP16 = "already-fp16", "the model already holds FP16 tensors"

    # --- PyTorch sources --------------------------------------------------------------------------
    BAD_FACTORY = "bad-factory", "a 'package.module:function' model factory cannot be used"
    FACTORY_FAILED = "factory-failed", "the model factory raised an exception"
    NOT_TORCHSCRIPT = "not-torchscript", "a file given as TorchScript is not one"
    MODEL_CALL_FAILED = "model-call-failed", "the PyTorch model failed on the example inputs"
    TORCH_EXPORT_FAILED = "torch-export-failed", "torch.onnx.export failed"
    BAD_EXPORTER = "bad-exporter", "an unknown or unusable exporter was asked for"
    UNKNOWN_MODEL = "unknown-model", "the catalogue has no model of that name"
    UNKNOWN_VARIANT = "unknown-variant", "a catalogue model has no variant of that name"
    MISSING_TRAINED_WEIGHTS = (
        "missing-trained-weights", "a trained catalogue model's shipped weights or record are gone")
    TRAINED_WEIGHTS_MISMATCH = (
        "trained-weights-mismatch", "shipped weights do not fit the model code (other versions)")
    NO_APP_INFO = "no-app-info", "a catalogue model carries no application info (untrained)"

    # --- input shapes and feeds -------------------------------------------------------------------
    BAD_INPUT_SHAPE = "bad-input-shape", "an --input NAME:SHAPE specification is wrong"
    MISSING_INPUT_SHAPE = "missing-input-shape", "a PyTorch source needs an input shape"
    UNKNOWN_INPUT_NAME = "unknown-input-name", "an input shape names an input the model lacks"
    DYNAMIC_INPUT_SHAPE = (
        "dynamic-input-shape", "random inputs cannot be made for a dynamic non-batch dimension")
    BAD_FEEDS = "bad-feeds", "the arrays fed to a model do not match its inputs"
    BAD_INPUTS_FILE = "bad-inputs-file", "an inputs file or folder cannot be read"
    BAD_INPUT_ARGUMENT = "bad-input-argument", "an --input NAME=FILE argument is wrong"
    BAD_BATCH = "bad-batch", "the batch asked for does not fit the model"
    UNSUPPORTED_INPUT_DTYPE = "unsupported-input-dtype", "no random input exists for that dtype"
    UNSUPPORTED_IO_TYPE = "unsupported-io-type", "a model input or output is not a numpy tensor"

    # --- optimize, quantize, verify ---------------------------------------------------------------
    UNKNOWN_RULE = "unknown-rule", "an optimize rule id does not exist"
    PROFILE_UNAVAILABLE = (
        "profile-unavailable", "the backend cannot profile here, or the session was not asked to")
    BAD_PROFILE_FILE = (
        "bad-profile-file", "a profiler's output (ONNX Runtime JSON, msprof CSV) is unreadable")
    UNKNOWN_TARGET = "unknown-target", "an optimize --target is not a known soc"
    UNSUPPORTED_PRECISION = (
        "unsupported-precision", "quantize() makes FP16 models; INT8 is ATC's calibration "
        "(quantize --int8)")
    NO_PRECISION = "no-precision", "quantize was not told the target precision"
    BAD_KEEP_FP32 = "bad-keep-fp32", "the --keep-fp32 list is malformed"
    UNKNOWN_KEEP_FP32_ENTRY = (
        "unknown-keep-fp32-entry", "a --keep-fp32 entry is neither a node nor an op type")
    BAD_SEARCH_BUDGET = "bad-search-budget", "the keep-FP32 search has no budget"
    INT8_NEEDS_REAL_INPUTS = (
        "int8-needs-real-inputs", "INT8 calibration was given no real inputs (only noise)")
    BAD_CALIBRATION_INPUTS = (
        "bad-calibration-inputs", "the INT8 calibration inputs do not fit what ATC reads")
    BAD_CALIBRATION_FOLDER = (
        "bad-calibration-folder", "an INT8 calibration folder is incomplete or unreadable")
    UNKNOWN_KEEP_FP16_LAYER = (
        "unknown-keep-fp16-layer", "a --keep-fp16 name is not a quantizable layer of the model")
    INT8_PRECISION_CONFLICT = (
        "int8-precision-conflict", "INT8 calibration asked with a precision mode CANN forbids")
    OUTPUTS_MISMATCH = "outputs-mismatch", "two models to compare do not have the same outputs"
    UNKNOWN_TASK = "unknown-task", "--task is not classify, detect or segment"
    BAD_TASK_OUTPUT = "bad-task-output", "the output has no shape the task metric can read"

    # --- compile, ATC, soc ------------------------------------------------------------------------
    UNKNOWN_SOC = "unknown-soc", "the soc is not a known Ascend soc version"
    NO_PEAK_FIGURES = (
        "no-peak-figures", "no published peak figures exist for the soc, so it has no floor")
    AMBIGUOUS_SOC = "ambiguous-soc", "npu-smi reports several different socs"
    NPU_SMI_FAILED = "npu-smi-failed", "npu-smi did not answer as expected"
    UNSUPPORTED_OPS = "unsupported-ops", "the op-support check found nodes ATC will refuse"
    BAD_ATC_OPTIONS = "bad-atc-options", "an ATC option value is invalid"
    ATC_NOT_FOUND = "atc-not-found", "atc is not on PATH"
    ATC_FAILED = "atc-failed", "ATC exited with an error"
    ATC_TIMEOUT = "atc-timeout", "ATC ran past its time limit and was stopped"
    ATC_CRASHED = "atc-crashed", "ATC was killed by a signal"
    ATC_NO_OUTPUT = "atc-no-output", "ATC exited 0 but wrote no .om"
    CANN_NOT_FOUND = "cann-not-found", "the CANN toolkit's environment is not set"
    PREPARE_PARITY_FAILED = (
        "prepare-parity-failed", "preparing the model for ATC changed its outputs")
    GEAR_SHAPE_FAILS = "gear-shape-fails", "the model fails at one of the asked gear shapes"
    BAD_AIPP_SPEC = "bad-aipp-spec", "the AIPP preprocessing spec is wrong"
    BAD_PRECISION_REPORT = "bad-precision-report", "a --keep-fp32-from report cannot be read"
    UNKNOWN_KEEP_FP32_NODE = (
        "unknown-keep-fp32-node", "a node to keep FP32 is not in the prepared model")
    BAD_BUILD_DIR = "bad-build-dir", "a BUILD_DIR or its manifest.json is malformed"
    BUILD_FILE_MODIFIED = "build-file-modified", "a BUILD_DIR file does not match its digest"

    # --- custom operators -------------------------------------------------------------------------
    UNKNOWN_CUSTOM_OP = "unknown-custom-op", "an edgefuse-domain op this edgefuse does not know"
    CUSTOM_OP_WITHOUT_DECOMPOSITION = (
        "custom-op-without-decomposition", "a custom op carries no function a host can run")
    BOARD_OPS_NEED_NPU = (
        "board-ops-need-npu", "a compiled model's board ops run on acl or sim, not cpu/cuda")
    BAD_OP_ATTRIBUTE = "bad-op-attribute", "a custom op node has a wrong attribute"
    BAD_OP_INPUT = "bad-op-input", "a custom op node has a wrong input"
    BAD_YOLO_HEAD = "bad-yolo-head", "the model's output cannot take the YOLO head op"
    BAD_YOLO_HEAD_OPTION = (
        "bad-yolo-head-option", "a --yolo-head value or a spec's yolo_head key is invalid"
    )
    OP_BUILD_FAILED = "op-build-failed", "building the custom-op package failed"
    OP_NOT_ON_SOC = "op-not-on-soc", "a custom op's kernel uses instructions the soc lacks"
    BAD_VENDOR_NAME = "bad-vendor-name", "an op package vendor name CANN cannot carry"
    UNSUPPORTED_CANN = (
        "unsupported-cann", "the CANN toolkit is outside the range the op packages target")
    CUSTOM_OPS_NOT_INSTALLED = (
        "custom-ops-not-installed", "the model needs edgefuse's op package, which ATC cannot find")

    # --- runtime ----------------------------------------------------------------------------------
    UNKNOWN_BACKEND = "unknown-backend", "a backend name is not one edgefuse knows"
    UNKNOWN_SESSION_OPTION = "unknown-session-option", "open_session got an unknown option"
    BAD_SESSION_OPTION = "bad-session-option", "a session option has a bad value"
    SESSION_CLOSED = "session-closed", "a closed session was asked to run"
    NO_MATCHING_GEAR = "no-matching-gear", "the feeds fit none of the OM's gears"
    BOARD_MEMORY_EXCEEDED = (
        "board-memory-exceeded", "the model needs more memory than the simulated board has")
    BAD_RECORDING = "bad-recording", "a recording of a run (run --record) cannot be read or used"
    UNSUPPORTED_DYNAMIC_OM = "unsupported-dynamic-om", "an OM input has no fixed size"
    UNSUPPORTED_ACL_DTYPE = "unsupported-acl-dtype", "an OM tensor has a dtype numpy cannot hold"
    ACL_CALL_FAILED = "acl-call-failed", "a pyACL call returned an error code"
    DVPP_GEOMETRY = (
        "dvpp-geometry", "a picture, stride, buffer or channel breaks the documented DVPP rules")
    BAD_BENCH_OPTIONS = "bad-bench-options", "bench's iterations/seconds/rounds are invalid"

    # --- vision pipeline and apps ---------------------------------------------------------------
    BAD_SOURCE = "bad-source", "a frame source (camera, file, URL, folder) cannot be opened"
    SOURCE_LOST = "source-lost", "a live source stopped and could not be reconnected"
    BAD_PREPROCESS = "bad-preprocess", "a preprocessing record is malformed"
    BAD_APP_INFO = "bad-app-info", "a model's application info (classes, layouts) is malformed"
    BAD_LAYOUT = "bad-layout", "a model output does not have the layout its decoder reads"
    WRONG_MODEL_KIND = "wrong-model-kind", "the model does not do what the app needs"
    BAD_PALETTE = "bad-palette", "a segmentation palette is malformed"
    BAD_CONFIG = "bad-config", "an app's YAML configuration is wrong"

    # --- build and bundles ------------------------------------------------------------------------
    BAD_BUILD_SPEC = "bad-build-spec", "the build spec (SPEC.yaml) is invalid; every problem listed"
    BUILD_GATE_FAILED = "build-gate-failed", "a model missed one of its spec's verify gates"
    MODEL_BUILD_FAILED = "model-build-failed", "one or more models of the spec failed to build"
    APP_FAILED_BEFORE_SIGNING = (
        "app-failed-before-signing",
        "the bundle's app, run by build on generated frames before signing, failed")
    BAD_SHARD = "bad-shard", "--shard is not K/N with 1 <= K <= N"
    BAD_SOURCE_DATE_EPOCH = (
        "bad-source-date-epoch", "SOURCE_DATE_EPOCH is not whole seconds in 1980..2100")
    BAD_BUNDLE = "bad-bundle", "a bundle or its MANIFEST.json is malformed"
    BUNDLE_FILE_MODIFIED = "bundle-file-modified", "a bundle file does not match MANIFEST.json"
    UNSAFE_ARCHIVE = "unsafe-archive", "an archive member could write outside the bundle"
    TRUNCATED_ARCHIVE = "truncated-archive", "an archive ends early or is not gzip/tar"
    GOLDEN_MISMATCH = "golden-mismatch", "a bundled model no longer reproduces its golden outputs"
    BAD_SIGNATURE = "bad-signature", "a bundle is unsigned, or its signature matches no trusted key"
    BAD_SIGNING_KEY = "bad-signing-key", "a signing or public key file cannot be read as Ed25519"
    SIGNATURE_NOT_CHECKED = (
        "signature-not-checked", "a signed bundle was verified without a key to check it against")
    NO_TARGET_WHEELS = (
        "no-target-wheels", "the wheels of the board's Python environment cannot be resolved")

    # --- the aarch64 rehearsal (edgefuse bundle rehearse) ---------------------------------------
    REHEARSAL_NEEDS_ROOT = (
        "rehearsal-needs-root", "the aarch64 rehearsal needs root (chroot, mounts, binfmt_misc)")
    NO_BINFMT_MISC = "no-binfmt-misc", "binfmt_misc cannot be mounted or registered here"
    QEMU_TOO_OLD = "qemu-too-old", "no qemu-aarch64 of version 10 or later to run the root with"
    BINFMT_CONFLICT = (
        "binfmt-conflict", "another binfmt_misc entry runs aarch64 programs with another qemu")
    ROOTFS_FAILED = "rootfs-failed", "the arm64 root file system cannot be made or used"
    WRONG_BOARD_PYTHON = (
        "wrong-board-python", "the board's (root's) python3 is not the bundle's target Python")
    BAD_UNIT_FILE = "bad-unit-file", "the service's unit holds what the rehearsal cannot run"
    REHEARSAL_FAILED = "rehearsal-failed", "the bundle failed a step of the aarch64 rehearsal"


class EdgefuseError(Exception):
    """A problem the user can fix: bad input, a missing dependency, a failing external tool."""

    reference: str = Ref.EDGEFUSE_ERROR.value
    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        context: str | None = None,
        hint: str | None = None,
        reference: Ref | str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        self.hint = hint
        if reference is not None:
            try:
                self.reference = Ref(reference).value
            except ValueError:
                message = f"error reference {reference!r} is not in edgefuse.errors.Ref"
                raise ValueError(message) from None

    def render(self) -> str:
        """The multi-line text the CLI prints on stderr."""
        lines = [f"error[{self.reference}]: {self.message}"]
        if self.context:
            context_lines = self.context.rstrip().splitlines()
            lines.append(f"  ╰─> {context_lines[0]}")
            lines.extend(f"      {line}" for line in context_lines[1:])
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


class InputError(EdgefuseError):
    """The user's input (a file, an argument, a spec) is wrong."""

    reference = Ref.INVALID_INPUT.value


class ModelLoadError(InputError):
    """A model file could not be read, parsed or checked."""

    reference = Ref.MODEL_LOAD_FAILED.value


class MissingDependencyError(EdgefuseError):
    """An optional dependency is not installed."""

    reference = Ref.MISSING_DEPENDENCY.value

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the Python package '{module}', which is not installed",
            hint=f"pip install 'edgefuse[{extra}]'",
        )
        self.module = module
        self.extra = extra


class ToolError(EdgefuseError):
    """An external tool (ATC, a device runtime) failed."""

    reference = Ref.TOOL_FAILED.value


class BackendUnavailableError(EdgefuseError):
    """No requested runtime backend can run here."""

    reference = Ref.BACKEND_UNAVAILABLE.value


def render_catalogue() -> str:
    """The Markdown table of every reference, as ``docs/errors.md`` holds it."""
    lines = [
        "# Error references",
        "",
        "Every error edgefuse reports starts with `error[REFERENCE]`. User errors exit with code",
        "2, a failed gate with 1, an internal error (a bug: please report it) with 3. This list is",
        "`edgefuse.errors.render_catalogue()`, generated from `edgefuse.errors.Ref`.",
        "",
        "| reference | meaning |",
        "|---|---|",
    ]
    lines += [f"| `{ref.value}` | {ref.meaning} |" for ref in Ref]
    return "\n".join(lines) + "\n"
