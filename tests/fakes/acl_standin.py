"""A strict stand-in for pyACL's ``acl`` module, for the acl backend's contract tests only.

It lives under tests/ and is injected with ``monkeypatch.setitem(sys.modules, "acl", standin)``;
nothing in the edgefuse package can import it, so it can never be picked as a backend.

What it enforces, beyond returning pyACL's shapes of results (``(value, ret)`` tuples, bare codes,
handles that are 0 on failure):
- one ``acl.init`` per process, as older CANN documents ("一个进程内只能调用一次acl.init接口":
  canncommercial/5046 aclpythondevg_01_0004): an ``acl.init`` after ``acl.finalize`` is a
  ``StandInViolation`` (a stand-in is one process: the suite's fixture uses a fresh one per test);
- call order: nothing but ``get_soc_name`` before ``acl.init`` (ACL_ERROR_UNINITIALIZE); calls that
  need a device context fail with ACL_ERROR_RT_CONTEXT_NULL in a thread that has none, and a model
  or stream used under another context fails with ACL_ERROR_RT_MODEL_CONTEXT / STREAM_CONTEXT;
- buffer sizes: device memory is real (ctypes buffers); every memcpy is bounds-checked against the
  allocation and ``destMax``; ``execute`` checks every dataset buffer against the model's sizes;
- memcpy kinds: HOST_TO_DEVICE / DEVICE_TO_HOST when the run mode is ACL_HOST, DEVICE_TO_DEVICE
  when it is ACL_DEVICE (edgefuse's contract; stricter than a board, which may accept both);
  ``memcpy_counts`` counts the successful copies by kind (issue 30 §3: none per frame on a board);
  ``executed_inputs`` records the input buffer addresses each ``execute`` read (which memory a
  run really used: a session's input buffers or its own);
- the run mode (``run_mode=``: ACL_HOST 1, the default, or ACL_DEVICE 0) decides what
  ``acl.rt.malloc_host`` returns: device memory in ACL_DEVICE mode (Ascend RC form: "申请Host内存也
  等同于申请Device内存", aclpythondevg_01_0116), usable by data buffers and ``execute``; plain host
  memory in ACL_HOST mode, which a data buffer may not wrap. It is freed with
  ``acl.rt.free_host`` only, and ``acl.rt.free`` only frees ``acl.rt.malloc`` memory;
- ownership and frees: double frees, use of a destroyed handle, execute on a dataset whose memory
  was freed, and reading the outputs of ``execute_async`` before ``synchronize_stream`` raise
  ``StandInViolation`` (an AssertionError: a bug in edgefuse, not an ACL error);
- what is still alive: ``outstanding()`` counts live allocations by kind, ``calls`` records every
  call in order, and ``leaks_at_finalize`` what ``acl.finalize`` found still alive.

Failure injection: ``fail_call(n, code)`` makes the n-th (0-based) failable call fail, and
``fail_api(name, code, occurrence)`` the given occurrence of one API. A failed call changes no
state, like a real failed call; a failed release therefore leaves its resource alive, and the
teardown-order rules are relaxed from then on (use-after-free and double frees stay errors).
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.machinery
import itertools
import math
import threading
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ACL_DTYPE_OF = {
    np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.int8): 2,
    np.dtype(np.int32): 3, np.dtype(np.uint8): 4, np.dtype(np.int64): 9,
    np.dtype(np.float64): 11, np.dtype(np.bool_): 12,
}
NUMPY_OF = {code: dtype for dtype, code in ACL_DTYPE_OF.items()}

UNINITIALIZE = 100001
REPEAT_INITIALIZE = 100002
REPEAT_FINALIZE = 100037
INVALID_PARAM = 100000
INVALID_FILE = 100003
INPUT_NOT_MATCH = 100017
OUTPUT_NOT_MATCH = 100018
NOT_DYNAMIC = 100019
INVALID_DEVICE = 107001
CONTEXT_NULL = 107002
STREAM_CONTEXT = 107003
MODEL_CONTEXT = 107004
BATCH_INVALID = 145013
SHAPE_INVALID = 145021
DYNAMIC_INPUT = "ascend_mbatch_shape_data"
GARBAGE = b"\xa5"  # what fresh device memory holds here: acl.rt.malloc does not zero it


class StandInViolation(AssertionError):
    """edgefuse broke the pyACL contract."""


@dataclasses.dataclass(frozen=True)
class FakeTensor:
    name: str
    dims: tuple[int, ...]  # -1 where a gear decides
    dtype: np.dtype
    max_dims: tuple[int, ...] | None = None  # for the buffer size of gear tensors
    acl_type: int | None = None  # to declare an aclDataType numpy has no dtype for
    # A static-AIPP input's image format. For "YUV420SP_U8", ``dims`` are the N,H,W,C that
    # get_input_dims reports; get_input_dims_v2 and the buffer are N,H*1.5,W,1 (aclpythondevg
    # "get_input_dims_v2" table 1).
    aipp_format: str | None = None

    @property
    def acl_dtype(self) -> int:
        return self.acl_type if self.acl_type is not None else ACL_DTYPE_OF[self.dtype]

    @property
    def dims_v2(self) -> tuple[int, ...]:
        if self.aipp_format == "YUV420SP_U8":
            n, h, w, _ = self.dims
            return n, h * 3 // 2, w, 1
        return self.dims

    @property
    def buffer_dims(self) -> tuple[int, ...]:
        """The shape of the bytes the model reads (the YUV frame, not its N,H,W,C)."""
        return self.dims_v2 if self.aipp_format else (self.max_dims or self.dims)

    @property
    def size(self) -> int:
        return math.prod(self.buffer_dims) * self.dtype.itemsize


@dataclasses.dataclass
class FakeOm:
    """What a fake OM declares and computes. ``compute`` maps input arrays to output arrays."""

    inputs: Sequence[FakeTensor]
    outputs: Sequence[FakeTensor]
    compute: Callable[[dict[str, np.ndarray]], list[np.ndarray]]
    batch_gears: tuple[int, ...] = ()
    hw_gears: tuple[tuple[int, int], ...] = ()
    dims_gears: tuple[tuple[int, ...], ...] = ()
    output_names: Sequence[str] | None = None  # as the OM reports them, e.g. "node:0:y"
    # get_input_dims_v2 on a gear model: the Atlas 200I DK A2's pyACL page says it returns the
    # largest gear's combination where get_input_dims gives -1 (aclpythondevg_01_0190).
    v2_reports_largest_gear: bool = False

    @property
    def dynamic(self) -> bool:
        return bool(self.batch_gears or self.hw_gears or self.dims_gears)

    def all_inputs(self) -> list[FakeTensor]:
        extra = [FakeTensor(DYNAMIC_INPUT, (8,), np.dtype(np.int64))] if self.dynamic else []
        return [*self.inputs, *extra]


@dataclasses.dataclass
class _Dataset:
    buffers: list[int] = dataclasses.field(default_factory=list)
    gear: Any = None


@dataclasses.dataclass
class _Model:
    om: FakeOm
    context: int
    last_output_dims: list[tuple[int, ...]] | None = None


class AclStandIn(types.ModuleType):
    """Install with ``monkeypatch.setitem(sys.modules, "acl", AclStandIn(...))``."""

    def __init__(self, *, soc: str | None = "Ascend310B4", run_mode: int = 1,
                 device_count: int = 1) -> None:
        super().__init__("acl")
        self.__spec__ = importlib.machinery.ModuleSpec("acl", None)
        self.soc = soc
        self.run_mode = run_mode
        self.device_count = device_count
        self.models: dict[str, FakeOm] = {}
        self.calls: list[str] = []
        self.failable_calls: list[str] = []
        self.violations: list[str] = []
        self.leaks_at_finalize: dict[str, int] = {}
        self.malloc_count = 0
        self.memcpy_counts: dict[int, int] = {}  # acl.rt.memcpy kind -> successful copies
        self.executed_inputs: list[tuple[int, ...]] = []  # input addresses per execute
        self.injected_failures = 0
        self._lock = threading.RLock()
        self._ids = itertools.count(0x1000)
        self._initialized = False
        self._finalized = False
        self._devices: dict[int, int] = {}  # device id -> set_device count
        self._contexts: dict[int, int] = {}  # context -> device
        self._streams: dict[int, int] = {}  # stream -> context
        self._memory: dict[int, Any] = {}  # address -> ctypes buffer
        self._host_memory: dict[int, Any] = {}  # acl.rt.malloc_host's, when it is not device's
        self._from_malloc_host: set[int] = set()  # device memory that must go to free_host
        self._data_buffers: dict[int, tuple[int, int]] = {}  # handle -> (address, size)
        self._datasets: dict[int, _Dataset] = {}
        self._descs: dict[int, int | None] = {}  # desc -> model id
        self._loaded: dict[int, _Model] = {}
        self._dead: set[int] = set()
        self._pending_streams: set[int] = set()
        self._unsynced_memory: set[int] = set()
        self._thread = threading.local()
        self._fail_at: dict[int, int] = {}
        self._fail_api: dict[tuple[str, int], int] = {}
        self._api_counts: dict[str, int] = {}
        self._build_namespaces()

    # --- what tests use ---------------------------------------------------------------------

    def register_model(self, path: str | Path, om: FakeOm) -> Path:
        """Write a placeholder OM file at ``path`` and make ``load_from_file`` serve ``om``."""
        path = Path(path)
        path.write_bytes(b"fake om for the acl stand-in")
        self.models[str(path)] = om
        return path

    def fail_call(self, index: int, code: int = 500001) -> None:
        self._fail_at[index] = code

    def fail_api(self, api: str, code: int = 500001, occurrence: int = 1) -> None:
        self._fail_api[(api, occurrence)] = code

    def outstanding(self) -> dict[str, int]:
        """Live resources by kind; all zero once everything was released."""
        with self._lock:
            counts = {
                "initialized": int(self._initialized),
                "devices": sum(self._devices.values()),
                "contexts": len(self._contexts),
                "streams": len(self._streams),
                "memory": len(self._memory),
                "host_memory": len(self._host_memory),
                "data_buffers": len(self._data_buffers),
                "datasets": len(self._datasets),
                "descs": len(self._descs),
                "models": len(self._loaded),
            }
        return {kind: n for kind, n in counts.items() if n}

    # --- plumbing ----------------------------------------------------------------------------

    def _build_namespaces(self) -> None:
        def api(name: str, impl: Callable[..., Any], failure: str) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                with self._lock:
                    self.calls.append(name)
                    if failure != "value":
                        index = len(self.failable_calls)
                        self.failable_calls.append(name)
                        count = self._api_counts[name] = self._api_counts.get(name, 0) + 1
                        code = self._fail_at.get(index) or self._fail_api.get((name, count))
                        if code:
                            self.injected_failures += 1
                            return {"code": code, "tuple": (None, code), "handle": 0,
                                    "soc": None, "pair": (args[0] if args else None, code)}[
                                failure]
                    return impl(*args)
            call.__name__ = name.rsplit(".", 1)[-1]
            return call

        self.init = api("acl.init", self._init, "code")
        self.finalize = api("acl.finalize", self._finalize, "code")
        self.get_soc_name = api("acl.get_soc_name", lambda: self.soc, "soc")
        self.create_data_buffer = api("acl.create_data_buffer", self._create_data_buffer,
                                      "handle")
        self.destroy_data_buffer = api("acl.destroy_data_buffer", self._destroy_data_buffer,
                                       "code")
        self.rt = types.SimpleNamespace(
            set_device=api("acl.rt.set_device", self._set_device, "code"),
            reset_device=api("acl.rt.reset_device", self._reset_device, "code"),
            create_context=api("acl.rt.create_context", self._create_context, "tuple"),
            destroy_context=api("acl.rt.destroy_context", self._destroy_context, "code"),
            set_context=api("acl.rt.set_context", self._set_context, "code"),
            create_stream=api("acl.rt.create_stream", self._create_stream, "tuple"),
            destroy_stream=api("acl.rt.destroy_stream", self._destroy_stream, "code"),
            synchronize_stream=api("acl.rt.synchronize_stream", self._synchronize, "code"),
            get_run_mode=api("acl.rt.get_run_mode", self._get_run_mode, "tuple"),
            malloc=api("acl.rt.malloc", self._malloc, "tuple"),
            free=api("acl.rt.free", self._free, "code"),
            malloc_host=api("acl.rt.malloc_host", self._malloc_host, "tuple"),
            free_host=api("acl.rt.free_host", self._free_host, "code"),
            memcpy=api("acl.rt.memcpy", self._memcpy, "code"),
            memset=api("acl.rt.memset", self._memset, "code"),
        )
        mdl = {
            "load_from_file": ("tuple", self._load_from_file),
            "unload": ("code", self._unload),
            "create_desc": ("handle", self._create_desc),
            "destroy_desc": ("code", self._destroy_desc),
            "get_desc": ("code", self._get_desc),
            "get_num_inputs": ("value", lambda d: len(self._om(d).all_inputs())),
            "get_num_outputs": ("value", lambda d: len(self._om(d).outputs)),
            "get_input_dims": ("tuple", lambda d, i: self._dims(self._om(d).all_inputs()[i])),
            "get_input_dims_v2": ("tuple", lambda d, i: self._dims(
                self._om(d).all_inputs()[i], v2=True,
                largest=self._om(d).v2_reports_largest_gear)),
            "get_output_dims": ("tuple", self._output_dims),
            "get_input_data_type": ("value", lambda d, i: self._om(d).all_inputs()[i].acl_dtype),
            "get_output_data_type": ("value", lambda d, i: self._om(d).outputs[i].acl_dtype),
            "get_input_size_by_index": ("value", lambda d, i: self._om(d).all_inputs()[i].size),
            "get_output_size_by_index": ("value", lambda d, i: self._om(d).outputs[i].size),
            "get_dynamic_batch": ("tuple", lambda d: ({"batchCount": len(
                self._om(d).batch_gears), "batch": list(self._om(d).batch_gears)}, 0)),
            "get_dynamic_hw": ("tuple", lambda d, _: ({"hwCount": len(self._om(d).hw_gears),
                                                        "hw": [list(g) for g in
                                                               self._om(d).hw_gears]}, 0)),
            "get_input_dynamic_gear_count": ("tuple",
                                             lambda d, _: (len(self._om(d).dims_gears), 0)),
            "get_input_dynamic_dims": ("tuple", self._dynamic_dims),
            "get_cur_output_dims": ("tuple", self._cur_output_dims),
            "create_dataset": ("handle", self._create_dataset),
            "destroy_dataset": ("code", self._destroy_dataset),
            "add_dataset_buffer": ("pair", self._add_dataset_buffer),
            "set_dynamic_batch_size": ("code", self._set_batch),
            "set_dynamic_hw_size": ("code", self._set_hw),
            "set_input_dynamic_dims": ("code", self._set_dims),
            "execute": ("code", self._execute),
            "execute_async": ("code", self._execute_async),
        }
        self.mdl = types.SimpleNamespace(
            **{name: api(f"acl.mdl.{name}", impl, failure)
               for name, (failure, impl) in mdl.items()}
        )

    def _violation(self, message: str) -> None:
        self.violations.append(message)
        raise StandInViolation(message)

    def _order_violation(self, message: str) -> None:
        """A teardown-order rule; after an injected failure a release may have left its resource
        alive, and best-effort cleanup of the rest must not count as a violation."""
        if not self.injected_failures:
            self._violation(message)

    def _handle(self) -> int:
        return next(self._ids)

    def _live(self, table: dict[int, Any], handle: Any, what: str) -> None:
        if handle in self._dead:
            self._violation(f"{what} {handle:#x} used after it was destroyed")
        if handle not in table:
            self._violation(f"{what} {handle!r} was never created")

    def _current_context(self) -> int | None:
        return getattr(self._thread, "context", None)

    def _needs_context(self) -> int | None:
        """The current context, or None when the caller must return ACL_ERROR_RT_CONTEXT_NULL."""
        context = self._current_context()
        return context if context in self._contexts else None

    def _om(self, desc: int) -> FakeOm:
        self._live(self._descs, desc, "model description")
        model_id = self._descs[desc]
        if model_id is None:
            self._violation("model description read before acl.mdl.get_desc")
        return self._loaded[model_id].om

    @staticmethod
    def _dims(tensor: FakeTensor, v2: bool = False,
              largest: bool = False) -> tuple[dict[str, Any], int]:
        dims = tensor.dims_v2 if v2 else tensor.dims
        if largest and tensor.max_dims is not None:
            dims = tensor.max_dims
        return {"name": tensor.name, "dimCount": len(dims), "dims": list(dims)}, 0

    # --- acl / acl.rt ------------------------------------------------------------------------

    def _init(self) -> int:
        if self._initialized:
            return REPEAT_INITIALIZE
        if self._finalized:
            self._violation("acl.init after acl.finalize in one process: older CANN allows one "
                            "acl.init per process (aclpythondevg_01_0004)")
        self._initialized = True
        return 0

    def _finalize(self) -> int:
        if not self._initialized:
            return REPEAT_FINALIZE
        self.leaks_at_finalize = {k: v for k, v in self.outstanding().items()
                                  if k != "initialized"}
        self._initialized = False
        self._finalized = True
        return 0

    def _set_device(self, device: int) -> int:
        if not self._initialized:
            return UNINITIALIZE
        if not 0 <= device < self.device_count:
            return INVALID_DEVICE
        self._devices[device] = self._devices.get(device, 0) + 1
        return 0

    def _reset_device(self, device: int) -> int:
        if not self._devices.get(device):
            self._violation(f"reset_device({device}) without a matching set_device")
        # Reference counted (hiascend aclrtResetDevice): only the last reset releases the device,
        # and by then every context created on it must be gone.
        if self._devices[device] == 1 and any(d == device for d in self._contexts.values()):
            self._order_violation(f"last reset_device({device}) while a context on it is alive")
        self._devices[device] -= 1
        if not self._devices[device]:
            del self._devices[device]
        return 0

    def _create_context(self, device: int) -> tuple[int | None, int]:
        if not self._initialized:
            return None, UNINITIALIZE
        if not self._devices.get(device):
            return None, INVALID_DEVICE
        context = self._handle()
        self._contexts[context] = device
        self._thread.context = context
        return context, 0

    def _destroy_context(self, context: int) -> int:
        self._live(self._contexts, context, "context")
        if any(c == context for c in self._streams.values()):
            self._order_violation("destroy_context while one of its streams is alive")
        if any(m.context == context for m in self._loaded.values()):
            self._order_violation("destroy_context while a model loaded under it is alive")
        del self._contexts[context]
        self._dead.add(context)
        if self._current_context() == context:
            self._thread.context = None
        return 0

    def _set_context(self, context: int) -> int:
        self._live(self._contexts, context, "context")
        self._thread.context = context
        return 0

    def _create_stream(self) -> tuple[int | None, int]:
        context = self._needs_context()
        if context is None:
            return None, CONTEXT_NULL
        stream = self._handle()
        self._streams[stream] = context
        return stream, 0

    def _destroy_stream(self, stream: int) -> int:
        self._live(self._streams, stream, "stream")
        if self._needs_context() is None:
            return CONTEXT_NULL
        del self._streams[stream]
        self._dead.add(stream)
        self._pending_streams.discard(stream)
        return 0

    def _synchronize(self, stream: int) -> int:
        self._live(self._streams, stream, "stream")
        if self._needs_context() != self._streams[stream]:
            return STREAM_CONTEXT
        self._pending_streams.discard(stream)
        self._unsynced_memory.clear()
        return 0

    def _get_run_mode(self) -> tuple[int | None, int]:
        if not self._initialized:
            return None, UNINITIALIZE
        return self.run_mode, 0

    def _malloc(self, size: int, policy: int) -> tuple[int | None, int]:
        if self._needs_context() is None:
            return None, CONTEXT_NULL
        if size <= 0 or policy not in (0, 1, 2):
            return None, INVALID_PARAM
        buffer = ctypes.create_string_buffer(GARBAGE * size, size)  # never zeroed by malloc
        address = ctypes.addressof(buffer)
        self._memory[address] = buffer
        self.malloc_count += 1
        return address, 0

    def _malloc_host(self, size: int) -> tuple[int | None, int]:
        if self._needs_context() is None:
            return None, CONTEXT_NULL
        if size <= 0:
            return None, INVALID_PARAM
        buffer = ctypes.create_string_buffer(GARBAGE * size, size)  # not initialised either
        address = ctypes.addressof(buffer)
        if self.run_mode == 0:  # ACL_DEVICE: host and device are one memory
            self._memory[address] = buffer
            self._from_malloc_host.add(address)
        else:
            self._host_memory[address] = buffer
        self.malloc_count += 1
        return address, 0

    def _free_host(self, address: int) -> int:
        if address not in self._host_memory and address not in self._from_malloc_host:
            self._violation(f"free_host of {address:#x}, which acl.rt.malloc_host did not "
                            "return or was freed")
        if self._needs_context() is None:
            return CONTEXT_NULL
        if any(a == address for a, _ in self._data_buffers.values()):
            self._order_violation("memory freed while a data buffer still wraps it")
        self._host_memory.pop(address, None)
        self._memory.pop(address, None)
        self._from_malloc_host.discard(address)
        return 0

    def _free(self, address: int) -> int:
        if address not in self._memory:
            self._violation(f"free of {address:#x}, which is not live device memory")
        if address in self._from_malloc_host:
            self._violation(f"acl.rt.free of {address:#x}, which acl.rt.malloc_host returned "
                            "(acl.rt.free_host frees it)")
        if self._needs_context() is None:
            return CONTEXT_NULL
        if any(a == address for a, _ in self._data_buffers.values()):
            self._order_violation("device memory freed while a data buffer still wraps it")
        del self._memory[address]
        return 0

    def _allocation(self, address: int, count: int) -> tuple[int, int] | None:
        """(start, size) of the live allocation holding [address, address+count), or None."""
        for start, buffer in self._memory.items():
            size = ctypes.sizeof(buffer)
            if start <= address < start + size:
                if address + count > start + size:
                    self._violation(f"memcpy of {count} bytes runs past the end of a "
                                    f"{size}-byte device allocation")
                return start, size
        return None

    def _memcpy(self, dst: int, dst_max: int, src: int, count: int, kind: int) -> int:
        if self._needs_context() is None:
            return CONTEXT_NULL
        if count > dst_max:
            self._violation(f"memcpy count {count} exceeds destMax {dst_max}")
        expected = {1: (1, 2), 0: (3,)}[self.run_mode]
        if kind not in expected:
            self._violation(f"memcpy kind {kind} in run mode {self.run_mode}; expected one of "
                            f"{expected}")
        dst_device = self._allocation(dst, dst_max)
        src_device = self._allocation(src, count)
        if kind == 1 and (dst_device is None or src_device is not None):
            self._violation("HOST_TO_DEVICE copy whose destination is not device memory or "
                            "whose source is")
        if kind == 2 and (src_device is None or dst_device is not None):
            self._violation("DEVICE_TO_HOST copy whose source is not device memory or whose "
                            "destination is")
        if kind == 3 and dst_device is None and src_device is None:
            self._violation("DEVICE_TO_DEVICE copy touching no device allocation")
        if src_device is not None and src_device[0] in self._unsynced_memory:
            self._violation("output read before acl.rt.synchronize_stream")
        ctypes.memmove(dst, src, count)
        self.memcpy_counts[kind] = self.memcpy_counts.get(kind, 0) + 1
        return 0

    def _memset(self, dst: int, dst_max: int, value: int, count: int) -> int:
        """acl.rt.memset(dev_ptr, max_size, value, count): device memory only, within bounds."""
        if self._needs_context() is None:
            return CONTEXT_NULL
        if count > dst_max:
            self._violation(f"memset count {count} exceeds max_size {dst_max}")
        if self._allocation(dst, dst_max) is None:
            self._violation("memset of memory that is not a live device allocation")
        ctypes.memset(dst, value, count)
        return 0

    # --- data buffers and datasets -----------------------------------------------------------

    def _create_data_buffer(self, address: int, size: int) -> int:
        allocation = self._allocation(address, size)
        if allocation is None:
            self._violation("data buffer over memory that is not a live device allocation")
        handle = self._handle()
        self._data_buffers[handle] = (address, size)
        return handle

    def _destroy_data_buffer(self, handle: int) -> int:
        self._live(self._data_buffers, handle, "data buffer")
        del self._data_buffers[handle]
        self._dead.add(handle)
        return 0

    def _create_dataset(self) -> int:
        handle = self._handle()
        self._datasets[handle] = _Dataset()
        return handle

    def _destroy_dataset(self, handle: int) -> int:
        self._live(self._datasets, handle, "dataset")
        del self._datasets[handle]
        self._dead.add(handle)
        return 0

    def _add_dataset_buffer(self, dataset: int, buffer: int) -> tuple[int, int]:
        self._live(self._datasets, dataset, "dataset")
        self._live(self._data_buffers, buffer, "data buffer")
        self._datasets[dataset].buffers.append(buffer)
        return dataset, 0

    # --- models ------------------------------------------------------------------------------

    def _load_from_file(self, path: str) -> tuple[int | None, int]:
        context = self._needs_context()
        if context is None:
            return None, CONTEXT_NULL
        if path not in self.models or not Path(path).is_file():
            return None, INVALID_FILE
        model_id = self._handle()
        self._loaded[model_id] = _Model(self.models[path], context)
        return model_id, 0

    def _unload(self, model_id: int) -> int:
        self._live(self._loaded, model_id, "model")
        if self._needs_context() != self._loaded[model_id].context:
            return MODEL_CONTEXT
        del self._loaded[model_id]
        self._dead.add(model_id)
        return 0

    def _create_desc(self) -> int:
        if not self._initialized:
            return 0
        handle = self._handle()
        self._descs[handle] = None
        return handle

    def _destroy_desc(self, desc: int) -> int:
        self._live(self._descs, desc, "model description")
        del self._descs[desc]
        self._dead.add(desc)
        return 0

    def _get_desc(self, desc: int, model_id: int) -> int:
        self._live(self._descs, desc, "model description")
        self._live(self._loaded, model_id, "model")
        self._descs[desc] = model_id
        return 0

    def _output_dims(self, desc: int, index: int) -> tuple[dict[str, Any], int]:
        om = self._om(desc)
        dims, ret = self._dims(om.outputs[index])
        if om.output_names:
            dims["name"] = om.output_names[index]
        return dims, ret

    def _dynamic_dims(self, desc: int, _: int, count: int) -> tuple[list[dict[str, Any]], int]:
        gears = self._om(desc).dims_gears
        if count != len(gears):
            return [], INVALID_PARAM
        return [{"name": "", "dimCount": len(g), "dims": list(g)} for g in gears], 0

    def _cur_output_dims(self, desc: int, index: int) -> tuple[dict[str, Any], int]:
        om = self._om(desc)
        model = self._loaded[self._descs[desc]]
        dims = (model.last_output_dims[index] if model and model.last_output_dims
                else om.outputs[index].max_dims or om.outputs[index].dims)
        return {"name": om.outputs[index].name, "dimCount": len(dims), "dims": list(dims)}, 0

    def _gear_target(self, model_id: int, dataset: int, index: int) -> tuple[FakeOm, _Dataset]:
        self._live(self._loaded, model_id, "model")
        self._live(self._datasets, dataset, "dataset")
        om = self._loaded[model_id].om
        if not om.dynamic:
            return om, None  # type: ignore[return-value]
        if index != len(om.inputs):
            self._violation(f"gear set on input {index}, not on {DYNAMIC_INPUT}")
        return om, self._datasets[dataset]

    def _set_batch(self, model_id: int, dataset: int, index: int, batch: int) -> int:
        om, target = self._gear_target(model_id, dataset, index)
        if target is None or not om.batch_gears:
            return NOT_DYNAMIC
        if batch not in om.batch_gears:
            return BATCH_INVALID
        target.gear = ("batch", batch)
        return 0

    def _set_hw(self, model_id: int, dataset: int, index: int, height: int, width: int) -> int:
        om, target = self._gear_target(model_id, dataset, index)
        if target is None or not om.hw_gears:
            return NOT_DYNAMIC
        if (height, width) not in om.hw_gears:
            return SHAPE_INVALID
        target.gear = ("hw", (height, width))
        return 0

    def _set_dims(self, model_id: int, dataset: int, index: int, dims: dict[str, Any]) -> int:
        om, target = self._gear_target(model_id, dataset, index)
        if target is None or not om.dims_gears:
            return NOT_DYNAMIC
        gear = tuple(dims["dims"])
        if dims.get("dimCount") != len(gear) or gear not in om.dims_gears:
            return SHAPE_INVALID
        target.gear = ("dims", gear)
        return 0

    def _input_shapes(self, om: FakeOm, gear: Any) -> list[tuple[int, ...]]:
        if not om.dynamic:  # what the model computes on: a YUV frame as its bytes, (N, 1.5H, W)
            return [t.dims_v2[:-1] if t.aipp_format == "YUV420SP_U8" else t.dims
                    for t in om.inputs]
        kind, value = gear
        if kind == "batch":
            return [tuple(value if d < 0 else d for d in t.dims) for t in om.inputs]
        if kind == "hw":
            shapes = []
            for t in om.inputs:
                fill = iter(value)
                shapes.append(tuple(next(fill) if d < 0 else d for d in t.dims))
            return shapes
        flat, shapes = list(value), []
        for t in om.inputs:
            shapes.append(tuple(flat[:len(t.dims)]))
            del flat[:len(t.dims)]
        return shapes

    def _execute(self, model_id: int, inputs: int, outputs: int) -> int:
        self._live(self._loaded, model_id, "model")
        model = self._loaded[model_id]
        if self._needs_context() != model.context:
            return MODEL_CONTEXT
        self._live(self._datasets, inputs, "input dataset")
        self._live(self._datasets, outputs, "output dataset")
        om, in_ds, out_ds = model.om, self._datasets[inputs], self._datasets[outputs]
        if not self._buffers_fit(in_ds, om.all_inputs()) or not self._buffers_fit(
                out_ds, om.outputs):
            return INPUT_NOT_MATCH
        if om.dynamic and in_ds.gear is None:
            return BATCH_INVALID
        feeds = {}
        self.executed_inputs.append(tuple(self._data_buffers[h][0] for h in in_ds.buffers))
        for tensor, shape, handle in zip(om.inputs, self._input_shapes(om, in_ds.gear),
                                         in_ds.buffers, strict=False):
            address, _ = self._data_buffers[handle]
            nbytes = math.prod(shape) * tensor.dtype.itemsize
            feeds[tensor.name] = np.frombuffer(ctypes.string_at(address, nbytes),
                                               dtype=tensor.dtype).reshape(shape)
        results = om.compute(feeds)
        model.last_output_dims = []
        for tensor, result, handle in zip(om.outputs, results, out_ds.buffers, strict=True):
            result = np.ascontiguousarray(result, dtype=tensor.dtype)
            address, size = self._data_buffers[handle]
            if result.nbytes > size:
                return OUTPUT_NOT_MATCH
            ctypes.memmove(address, result.ctypes.data, result.nbytes)
            model.last_output_dims.append(result.shape)
        return 0

    def _buffers_fit(self, dataset: _Dataset, tensors: Sequence[FakeTensor]) -> bool:
        if len(dataset.buffers) != len(tensors):
            return False
        for handle, tensor in zip(dataset.buffers, tensors, strict=True):
            self._live(self._data_buffers, handle, "data buffer in a dataset")
            address, size = self._data_buffers[handle]
            if address not in self._memory:
                self._violation("execute on a dataset whose device memory was freed")
            if size < tensor.size:
                return False
        return True

    def _execute_async(self, model_id: int, inputs: int, outputs: int, stream: int) -> int:
        self._live(self._streams, stream, "stream")
        if self._streams[stream] != self._loaded.get(model_id, _Model(None, -1)).context:
            return STREAM_CONTEXT
        ret = self._execute(model_id, inputs, outputs)
        if ret == 0:
            self._pending_streams.add(stream)
            self._unsynced_memory.update(self._data_buffers[h][0]
                                         for h in self._datasets[outputs].buffers)
        return ret
