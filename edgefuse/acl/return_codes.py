"""pyACL return codes, data types and enum values: what each code means and what to do about it.

Why a table: every pyACL call returns a bare int, and the public wrappers either ``assert`` it
(lost under ``python -O``) or print it. ``check(ret, api)`` turns a non-zero code into an
``AclError`` carrying the code, its ACL name, the API that returned it and a hint.

Sources: the aclError list of the CANN AscendCL reference (hiascend "aclError" page, CANN 8.x,
and its pyACL twin "aclpythondevg ... aclError"; codes also mirrored in acl_base.h,
ge_error_codes.h and rt_error_codes.h). A code not listed still raises, named by its class
(1xxxxx usage, 2xxxxx resources, 3xxxxx service, 5xxxxx internal), per the same page.

Data types: the aclDataType enum of acl_base.h (ACL_FLOAT=0, ACL_FLOAT16=1, ... ACL_BF16=27).
mmdeploy's wrapper maps only {0, 3, 9}, so an OM with float16 or uint8 I/O raised KeyError
there; every type numpy can hold is mapped here.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from edgefuse.errors import ModelLoadError, Ref, ToolError

ACL_SUCCESS = 0
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_REPEAT_FINALIZE = 100037

# aclrtRunMode: where the application runs. On the Atlas 200I DK A2 the app runs on the board's
# own CPU (ACL_DEVICE, "RC" mode) and device memory is the same DRAM as the process's.
ACL_DEVICE = 0
ACL_HOST = 1

# aclrtMemcpyKind
ACL_MEMCPY_HOST_TO_HOST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEMCPY_DEVICE_TO_DEVICE = 3

# aclrtMemMallocPolicy
ACL_MEM_MALLOC_HUGE_FIRST = 0

# The extra model input ATC adds for gear (dynamic batch / image size / dims) models.
DYNAMIC_INPUT_NAME = "ascend_mbatch_shape_data"

ACL_DTYPES: dict[int, np.dtype] = {
    0: np.dtype(np.float32),
    1: np.dtype(np.float16),
    2: np.dtype(np.int8),
    3: np.dtype(np.int32),
    4: np.dtype(np.uint8),
    6: np.dtype(np.int16),
    7: np.dtype(np.uint16),
    8: np.dtype(np.uint32),
    9: np.dtype(np.int64),
    10: np.dtype(np.uint64),
    11: np.dtype(np.float64),
    12: np.dtype(np.bool_),
    16: np.dtype(np.complex64),
    17: np.dtype(np.complex128),
}
# Types an OM can declare that have no numpy equivalent.
ACL_DTYPES_WITHOUT_NUMPY = {-1: "ACL_DT_UNDEFINED", 13: "ACL_STRING", 27: "ACL_BF16",
                            29: "ACL_INT4", 30: "ACL_UINT1", 33: "ACL_COMPLEX32"}


@dataclasses.dataclass(frozen=True)
class AclCode:
    code: int
    name: str
    hint: str


_REBUILD = ("the OM does not match this CANN; rebuild it with `edgefuse compile` on the CANN "
            "version the board runs (`edgefuse doctor` shows it)")
_SUPPORT = ("an internal CANN failure: check the device with `npu-smi info` and the plog under "
            "~/ascend/log; a reboot of the board clears a wedged device")

_TABLE = (
    AclCode(100000, "ACL_ERROR_INVALID_PARAM", "an argument was rejected; this is an edgefuse bug "
            "unless the OM itself is unusual, please report it"),
    AclCode(100001, "ACL_ERROR_UNINITIALIZE", "pyACL was finalized or never initialised in this "
            "process (another library may have called acl.finalize())"),
    AclCode(100002, "ACL_ERROR_REPEAT_INITIALIZE", "already initialised; harmless"),
    AclCode(100003, "ACL_ERROR_INVALID_FILE", "check the file exists and is readable"),
    AclCode(100006, "ACL_ERROR_PARSE_FILE", "the file is not valid; copy it again"),
    AclCode(100011, "ACL_ERROR_INVALID_MODEL_ID", "the model was unloaded or never loaded"),
    AclCode(100012, "ACL_ERROR_DESERIALIZE_MODEL", _REBUILD),
    AclCode(100013, "ACL_ERROR_PARSE_MODEL", _REBUILD),
    AclCode(100014, "ACL_ERROR_READ_MODEL_FAILURE", "check the OM exists and is readable"),
    AclCode(100015, "ACL_ERROR_MODEL_SIZE_INVALID", "the OM is truncated or corrupt; copy the "
            "build directory again"),
    AclCode(100016, "ACL_ERROR_MODEL_MISSING_ATTR", _REBUILD),
    AclCode(100017, "ACL_ERROR_MODEL_INPUT_NOT_MATCH", "the inputs do not match the OM's; check "
            "shapes and dtypes against session.inputs"),
    AclCode(100018, "ACL_ERROR_MODEL_OUTPUT_NOT_MATCH", "the output buffers do not match the "
            "OM's; this is an edgefuse bug, please report it"),
    AclCode(100019, "ACL_ERROR_MODEL_NOT_DYNAMIC", "a gear was set on a static OM; this is an "
            "edgefuse bug, please report it"),
    AclCode(100026, "ACL_ERROR_UNSUPPORTED_DATA_TYPE", "the OM uses a dtype this CANN cannot run"),
    AclCode(100037, "ACL_ERROR_REPEAT_FINALIZE", "already finalized; harmless"),
    AclCode(148049, "ACL_ERROR_INVALID_OPP_PATH", "ASCEND_OPP_PATH is unset or wrong: source "
            "the CANN set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh)"),
    AclCode(200000, "ACL_ERROR_BAD_ALLOC", "device memory is exhausted; close other sessions "
            "or use a smaller model or batch"),
    AclCode(200001, "ACL_ERROR_API_NOT_SUPPORT", "this board or CANN does not support the call"),
    AclCode(200002, "ACL_ERROR_INVALID_DEVICE", "no such device; `npu-smi info` lists the ids"),
    AclCode(200004, "ACL_ERROR_RESOURCE_NOT_MATCH", "a stream or context from another device or "
            "thread was used; this is an edgefuse bug, please report it"),
    AclCode(200005, "ACL_ERROR_INVALID_RESOURCE_HANDLE", "a handle was used after it was "
            "destroyed; this is an edgefuse bug, please report it"),
    AclCode(300000, "ACL_ERROR_STORAGE_OVER_LIMIT", "storage is full on the board"),
    AclCode(500000, "ACL_ERROR_INTERNAL_ERROR", _SUPPORT),
    AclCode(500001, "ACL_ERROR_FAILURE", _SUPPORT),
    AclCode(500002, "ACL_ERROR_GE_FAILURE", _SUPPORT),
    AclCode(500003, "ACL_ERROR_RT_FAILURE", _SUPPORT),
    AclCode(500004, "ACL_ERROR_DRV_FAILURE", "the NPU driver failed; check `npu-smi info` and "
            "that the driver and CANN versions match"),
    AclCode(107000, "ACL_ERROR_RT_PARAM_INVALID", "an argument was rejected by the runtime"),
    AclCode(107001, "ACL_ERROR_RT_INVALID_DEVICEID", "no such device id; `npu-smi info` lists "
            "them (the 200I DK A2 has one NPU, id 0)"),
    AclCode(107002, "ACL_ERROR_RT_CONTEXT_NULL", "no current context in this thread; this is an "
            "edgefuse bug, please report it"),
    AclCode(107003, "ACL_ERROR_RT_STREAM_CONTEXT", "the stream belongs to another context"),
    AclCode(107004, "ACL_ERROR_RT_MODEL_CONTEXT", "the model belongs to another context"),
    AclCode(207000, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT", "not supported on this board or CANN"),
    AclCode(207001, "ACL_ERROR_RT_MEMORY_ALLOCATION", "device memory is exhausted"),
    AclCode(207004, "ACL_ERROR_RT_NO_DEVICE", "no NPU is visible: check `npu-smi info`, the "
            "driver, and that the process may open /dev/davinci*"),
    AclCode(207006, "ACL_ERROR_RT_NO_PERMISSION", "the user may not use the NPU: add it to the "
            "HwHiAiUser group or run as the board's default user"),
    AclCode(207008, "ACL_ERROR_RT_NO_STREAM_RESOURCE", "too many streams; close other sessions"),
    AclCode(507008, "ACL_ERROR_RT_SOC_VERSION", "the OM was compiled for another soc; compile "
            "it with --soc set to what `npu-smi info` shows"),
    AclCode(507011, "ACL_ERROR_RT_MODEL_EXECUTE", "model execution failed on the device; the "
            "plog under ~/ascend/log names the failing operator"),
    AclCode(507014, "ACL_ERROR_RT_AICORE_TIMEOUT", "an AI Core kernel timed out; " + _SUPPORT),
    AclCode(507015, "ACL_ERROR_RT_AICORE_EXCEPTION", "an AI Core kernel faulted, often an "
            "out-of-range index or an unsupported shape; the plog names the operator"),
    AclCode(507018, "ACL_ERROR_RT_AICPU_EXCEPTION", "an AI CPU operator failed; the plog names "
            "it"),
    AclCode(145013, "ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID", "the batch is not one of the "
            "OM's gears; session.gears lists them"),
    AclCode(145021, "ACL_ERROR_GE_SHAPE_INVALID", "the input shape is not one the OM accepts"),
    AclCode(145022, "ACL_ERROR_GE_DATATYPE_INVALID", "the input dtype is not the OM's"),
    AclCode(545001, "ACL_ERROR_GE_LOAD_MODEL", _REBUILD),
)
KNOWN_CODES: dict[int, AclCode] = {entry.code: entry for entry in _TABLE}

_CLASS_HINTS = {
    1: "a usage or environment problem (ACL code class 1xxxxx)",
    2: "a resource or hardware mismatch (ACL code class 2xxxxx): device memory, streams, or an "
       "OM built for other hardware",
    3: "a service problem (ACL code class 3xxxxx): a queue or storage is full",
    5: "an internal CANN failure (ACL code class 5xxxxx): " + _SUPPORT,
}


def describe(code: int) -> AclCode:
    """The name and hint for ``code``; unknown codes get the hint of their class."""
    if code in KNOWN_CODES:
        return KNOWN_CODES[code]
    hint = _CLASS_HINTS.get(code // 100000, "not a documented ACL code")
    return AclCode(code, "unknown ACL code", hint)


class AclError(ToolError):
    """A pyACL call returned an error code (or a null handle)."""

    reference = Ref.ACL_CALL_FAILED.value

    def __init__(self, api: str, code: int, *, context: str | None = None) -> None:
        known = describe(code)
        super().__init__(f"{api} failed with {code} ({known.name})", context=context,
                         hint=known.hint)
        self.api = api
        self.code = code


def check(ret: int, api: str) -> None:
    """Raise ``AclError`` unless ``ret`` is ACL_SUCCESS."""
    if ret != ACL_SUCCESS:
        raise AclError(api, ret)


def numpy_dtype(acl_dtype: int, what: str) -> np.dtype:
    """The numpy dtype of an OM input/output, or an error naming the type numpy cannot hold."""
    if acl_dtype in ACL_DTYPES:
        return ACL_DTYPES[acl_dtype]
    name = ACL_DTYPES_WITHOUT_NUMPY.get(acl_dtype, f"aclDataType {acl_dtype}")
    raise ModelLoadError(
        f"{what} of the OM is {name}, which numpy cannot hold",
        hint="compile the model with float32, float16 or integer inputs and outputs",
        reference=Ref.UNSUPPORTED_ACL_DTYPE,
    )
