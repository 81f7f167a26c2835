"""The acl backend: run an OM on the Ascend NPU through the documented pyACL API.

Why written this way (pyACL reference: hiascend aclpythondevg; the sequence in Ascend/samples and
mmdeploy's AscendWrapper; their known bugs in /work/shared/reference/ascend-toolchain.md §5):
- Everything is allocated once, in the constructor: device buffers, data buffers and the two
  datasets, including the ``ascend_mbatch_shape_data`` buffer of gear models. ``run`` only fills
  the inputs, sets the gear and executes, so thousands of runs allocate nothing (acllite
  re-allocated the gear buffer on every call and leaked it).
- No staging copies where host and device are one memory. ``acl.rt.get_run_mode()`` says where
  the program runs (0 ACL_DEVICE: "运行在Device的Control CPU或板端环境上"; 1 ACL_HOST; hiascend
  Atlas200IDKA2DeveloperKit 23.0.RC2 aadgp/aclpythondevg_01_0063). On the Atlas 200I DK A2
  (Ascend 310B, Ascend RC form) it runs on the board, and CANN documents that there host and
  device are one: "针对Ascend RC形态、Control CPU开放形态,Host与Device是合一的,所以申请Host内存
  也等同于申请Device内存" (pyACL malloc_host: canncommercial/800 apiref/appdevgapi/
  aclpythondevg_01_0116.html); "Ascend RC形态下,调用该接口申请的是Device内存" (aclrtMallocHost:
  CANNCommunityEdition/800alpha002 apiref/appdevgapi/aclcppdevg_03_0101.html). So in ACL_DEVICE
  mode every input and output buffer is allocated once with ``acl.rt.malloc_host`` (freed with
  ``acl.rt.free_host``, as both pages require), the feeds are written into it by the CPU and the
  outputs read straight out of it: no ``acl.rt.memcpy`` per frame. Outputs are returned as
  arrays of their own (one CPU read), not as views the next run would overwrite. On a host with
  a PCIe card (ACL_HOST) host memory is not device memory: buffers come from ``acl.rt.malloc``
  and the documented HOST_TO_DEVICE / DEVICE_TO_HOST copies stay, host arrays passed by address
  (``ndarray.ctypes.data``).
- A frame is written once (``input_buffers``). In ACL_DEVICE mode a set of input buffers is handed
  out as numpy arrays over the shared memory itself (a ctypes view of the address: pyACL's own
  ``acl.util.ptr_to_numpy`` does the same without a copy, "已实现零拷贝", canncommercial/5046
  aclpythondevg_01_0048, but is marked for removal in favour of ``acl.util.ptr_to_bytes``, which
  copies: aclpythondevg_01_0054); the preprocessing writes the frame into them, ``run(buffers)``
  executes on that set's own input dataset, and no byte of the frame moves again. Each set has
  its own buffers and dataset, so one frame is written while another runs. The memory may come
  from the caller (``memory=``): DVPP's VPC writes only into media memory
  (``acl.himpi.dvpp_malloc``, 128-byte aligned; when "媒体数据处理的输出作为模型推理的输入" the
  page sizes each picture ALIGN_UP(len, 32) + 32: CANNCommunityEdition/83RC1 appdevgapi
  aclcppdevg_03_0391, Atlas200IDKA2DeveloperKit aadgc aclcppdevg_03_0725), so the board's DVPP
  source allocates the model's input there and VPC's output picture is the model input. On a
  card (ACL_HOST) the sets are plain host arrays and the HOST_TO_DEVICE copy stays.
- Every return code is checked (``AclError`` names the call, the code and a hint); a null handle
  from a ``create_*`` call is an error too. The constructor releases whatever it acquired before
  failing, in reverse order; ``close`` does the same and reports the first failed release.
- Dynamic OMs are gear models (ATC ``--dynamic_batch_size`` / ``--dynamic_image_size`` /
  ``--dynamic_dims``). A batch that is not a gear runs on the next larger gear and the outputs are
  cut back along axis 0 (mmdeploy does the same); image sizes and dims must be a gear exactly.
  The rule lives in ``edgefuse.acl.gears``, shared with the ``sim`` backend. The gear's spare
  rows are zeroed (``_clear_spare``), so a partial batch computes the same whatever ran before;
  the geared axes are read from -1 or from the largest gear, as pyACL versions report them.
- The soc the build was compiled for must be the device's exactly (checked before the OM is
  loaded), even within one family such as Ascend310B1/Ascend310B4 (see ``_check_soc``); a
  different CANN version is logged, since ATC output is only guaranteed on its own CANN.
- ``run`` holds a lock: one session's buffers serve one call at a time, from any thread.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import math
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgefuse.acl.atc.runner import cann_version
from edgefuse.acl.compile.soc import KNOWN_SOCS
from edgefuse.acl.gears import OmGears, geared_axes, select_gear
from edgefuse.acl.resources import NO_ACL_HINT, RUNTIME, CurrentContext, Resources, import_acl
from edgefuse.acl.return_codes import (
    ACL_DEVICE,
    ACL_MEM_MALLOC_HUGE_FIRST,
    ACL_MEMCPY_DEVICE_TO_HOST,
    ACL_MEMCPY_HOST_TO_DEVICE,
    DYNAMIC_INPUT_NAME,
    AclError,
    check,
    numpy_dtype,
)
from edgefuse.errors import BackendUnavailableError, InputError, ModelLoadError, Ref
from edgefuse.manifest import BuildManifest
from edgefuse.model_source import ModelSource
from edgefuse.session import Availability, InputBuffers, Session, TensorSpec

log = logging.getLogger(__name__)

EXECUTE_MODES = ("sync", "async")
_NULL_HANDLE = 500001  # ACL_ERROR_FAILURE: what a create_* call that returned null amounts to


@dataclasses.dataclass(frozen=True)
class _Binding:
    """One model input or output and the device buffer that serves it."""

    index: int
    name: str
    dims: tuple[int, ...]  # as the OM declares them; -1 where a gear decides
    dtype: np.dtype
    size: int  # bytes of the device buffer (the largest gear's size for gear models)
    address: int  # device address of the buffer
    shared: np.ndarray | None  # the buffer's bytes, where host and device share memory


@dataclasses.dataclass
class _InputSet:
    """An input dataset ``execute`` can run on, its buffers, and how much of each the last run
    left stale (``_clear_spare``). The session's own set takes copied feeds; each
    ``input_buffers`` call adds one whose arrays are the feeds."""

    dataset: Any
    data: tuple[_Binding, ...]  # the model's data inputs, without the gear input
    stale: list[int]


class DeviceMemory(Protocol):
    """Where ``input_buffers(memory=...)`` takes a set's input memory from: device memory the CPU
    can also reach (a shared-memory SoC), e.g. DVPP's ``acl.himpi.dvpp_malloc``/``dvpp_free``.
    ``malloc`` returns the address or raises; ``free`` raises when the free fails."""

    def malloc(self, size: int) -> int: ...

    def free(self, address: int) -> None: ...


def probe_acl(source: ModelSource | None = None) -> Availability:
    """Whether pyACL and a device are here, and whether ``source`` has an OM for this soc."""
    try:
        acl = import_acl()
    except BackendUnavailableError as exc:
        return Availability(False, f"{exc.message}; {NO_ACL_HINT}")
    soc = acl.get_soc_name()
    if not soc:
        return Availability(False, "pyACL is installed but sees no Ascend device "
                                   "(acl.get_soc_name() returned nothing); check `npu-smi info`")
    if source is not None:
        if source.om is None:
            what = "the build has no OM" if source.manifest else f"{source.label} is not an OM"
            return Availability(False, f"{what}; compile one for this board with "
                                       f"`edgefuse compile ... --soc {soc}`")
        wanted = source.manifest.soc if source.manifest else None
        if wanted and wanted != soc:
            return Availability(False, f"the OM was compiled for {wanted}, this device is {soc}")
    return Availability(True, f"pyACL on {soc}")


class AclSession(Session):
    """An OM loaded on one NPU, with its buffers allocated once."""

    backend = "acl"

    def __init__(
        self,
        om: str | os.PathLike[str],
        *,
        manifest: BuildManifest | None = None,
        device_id: int = 0,
        execute: str = "sync",
        validate: bool = True,
    ) -> None:
        if execute not in EXECUTE_MODES:
            raise InputError(f"execute must be one of {EXECUTE_MODES}, got {execute!r}",
                             reference=Ref.BAD_SESSION_OPTION)
        self._om = Path(om)
        if not self._om.is_file():
            raise InputError(f"OM file '{self._om}' does not exist", reference=Ref.MODEL_NOT_FOUND)
        self._async = execute == "async"
        self._lock = threading.Lock()
        # Only the input behind YUV420SP AIPP has its trailing 1 dropped (see _binding_info).
        record = manifest.preprocess if manifest is not None else None
        self._yuv_input = record.input if record is not None and record.spec.is_yuv else None
        self._resources = Resources()
        acl = RUNTIME.acquire()
        self._resources.push("release pyACL (finalized at exit)", RUNTIME.release)
        try:
            self._acl = acl
            self._check_soc(manifest)
            self._open_device(device_id)
            self._load()
            inputs, outputs = self._specs(manifest)
        except BaseException:
            self._resources.release_after_error()
            raise
        super().__init__(inputs, outputs, validate=validate)

    # --- construction ------------------------------------------------------------------------

    def _check_soc(self, manifest: BuildManifest | None) -> None:
        soc = self._acl.get_soc_name()
        if not soc:
            raise BackendUnavailableError(
                "pyACL sees no Ascend device (acl.get_soc_name() returned nothing)",
                hint="check `npu-smi info` and the NPU driver",
            )
        self.soc: str = soc
        if manifest is None:
            return
        # Not even a sibling of the same family is accepted. CANN's --soc_version page: the value
        # used for conversion "must be" the processor the model runs on, the 310B suffix varies
        # with the chip's performance and core-count grade, and one conversion serves several
        # products only "as long as the --soc_version value is the same" (hiascend
        # CANNCommunityEdition/82RC1alpha003 devaids/atctool/atlasatcparam_16_0035.html,
        # canncommercial/62RC2 inferapplicationdev/atctool/atctool_000066.html). Nothing there
        # says an OM for Ascend310B1 loads on Ascend310B4, so a DK A2 image that reports the other
        # name needs a rebuild, which the hint spells out.
        if manifest.soc and manifest.soc != soc:
            build, known = KNOWN_SOCS.get(manifest.soc), KNOWN_SOCS.get(soc)
            sibling = build is not None and known is not None and (
                build.short_name == known.short_name)
            why = (f"; {manifest.soc} and {soc} are one chip family, but CANN documents an OM "
                   "only for the exact --soc_version it was converted for" if sibling else "")
            raise BackendUnavailableError(
                f"{self._om.name} was compiled for {manifest.soc}, this device reports {soc}"
                f"{why}",
                hint=f"rebuild for the device: `edgefuse compile MODEL --soc {soc} -o BUILD_DIR` "
                f"(with the model and options of this build; its compile.sh has them, with "
                f"--soc_version={manifest.soc} to change to {soc})"
                + ("; an edgefuse op package built for the family serves both names"
                   if sibling else ""),
            )
        installed = cann_version()
        if manifest.cann_version and installed and installed != manifest.cann_version:
            log.warning(
                "%s was compiled with CANN %s, this board runs CANN %s; an OM is only "
                "guaranteed to load on the CANN that built it",
                self._om.name, manifest.cann_version, installed,
            )

    def _open_device(self, device_id: int) -> None:
        acl, res = self._acl, self._resources
        check(acl.rt.set_device(device_id), "acl.rt.set_device")
        res.push_call("acl.rt.reset_device", acl.rt.reset_device, device_id)
        context, ret = acl.rt.create_context(device_id)
        check(ret, "acl.rt.create_context")
        self._context = CurrentContext(context)
        res.push("forget the context", self._context.forget)
        res.push_call("acl.rt.destroy_context", acl.rt.destroy_context, context)
        stream, ret = acl.rt.create_stream()
        check(ret, "acl.rt.create_stream")
        res.push_call("acl.rt.destroy_stream", acl.rt.destroy_stream, stream)
        self._stream = stream
        run_mode, ret = acl.rt.get_run_mode()
        check(ret, "acl.rt.get_run_mode")
        self.run_mode: int = run_mode
        # On the board host and device memory are one (see the module docstring): in place.
        self.in_place: bool = run_mode == ACL_DEVICE
        self.device_id = device_id

    def _load(self) -> None:
        acl, res = self._acl, self._resources
        # The description is created before the model is loaded so that teardown unloads the
        # model first and destroys the description after it, the documented order.
        desc = self._created(acl.mdl.create_desc(), "acl.mdl.create_desc")
        res.push_call("acl.mdl.destroy_desc", acl.mdl.destroy_desc, desc)
        self._desc = desc
        model_id, ret = acl.mdl.load_from_file(str(self._om))
        if ret != 0:
            raise AclError("acl.mdl.load_from_file", ret, context=f"OM: {self._om}")
        res.push_call("acl.mdl.unload", acl.mdl.unload, model_id)
        self._model_id = model_id
        check(acl.mdl.get_desc(desc, model_id), "acl.mdl.get_desc")

        inputs = [self._binding_info(i, "input") for i in range(acl.mdl.get_num_inputs(desc))]
        outputs = [self._binding_info(i, "output") for i in range(acl.mdl.get_num_outputs(desc))]
        dynamic = [b for b in inputs if b[1] == DYNAMIC_INPUT_NAME]
        self._dynamic_index = dynamic[0][0] if dynamic else None
        self.gears: OmGears | None = self._read_gears() if dynamic else None
        if self.gears is not None:
            inputs = self._with_geared_axes(self.gears, inputs)

        self._input_infos = inputs
        self._own_inputs = self._input_set(None)
        self._data_inputs = self._own_inputs.data
        self._output_dataset = self._dataset()
        self._outputs = tuple(self._buffer(self._output_dataset, *info) for info in outputs)

    def _input_set(self, memory: DeviceMemory | None) -> _InputSet:
        """A dataset with a buffer per input (the gear input's included); ``memory`` allocates
        the data inputs' buffers, the default memory of the run mode otherwise."""
        dataset = self._dataset()
        bindings = [self._buffer(dataset, *info,
                                 memory=None if info[1] == DYNAMIC_INPUT_NAME else memory)
                    for info in self._input_infos]
        data = tuple(b for b in bindings if b.name != DYNAMIC_INPUT_NAME)
        # Bytes past what the last run wrote that may hold something else: fresh device memory
        # is not zeroed, and a smaller batch leaves a larger one's rows behind (``_clear_spare``).
        return _InputSet(dataset, data, [b.size for b in data])

    @staticmethod
    def _with_geared_axes(gears: OmGears, inputs: list[tuple]) -> list[tuple]:
        """The inputs' dims with -1 on every axis a gear decides (``geared_axes``: pyACL may
        report the largest gear there instead of -1)."""
        data = [info for info in inputs if info[1] != DYNAMIC_INPUT_NAME]
        axes = iter(geared_axes(gears, [info[2] for info in data]))
        marked = []
        for index, name, dims, dtype, size in inputs:
            if name != DYNAMIC_INPUT_NAME:
                geared = next(axes)
                dims = tuple(-1 if axis in geared else d for axis, d in enumerate(dims))
            marked.append((index, name, dims, dtype, size))
        return marked

    def _binding_info(self, index: int, kind: str) -> tuple[int, str, tuple[int, ...], np.dtype,
                                                             int]:
        mdl = self._acl.mdl
        # For an input behind static AIPP, get_input_dims reports the image as N,H,W,C whatever
        # its format, while get_input_dims_v2 reports the buffer: N,H*1.5,W,1 for YUV420SP, whose
        # product is get_input_size_by_index (aclpythondevg "get_input_dims_v2", Atlas 200I DK
        # A2 23.0.RC2 aadgp/aclpythondevg_01_0190). The frame a user feeds is that buffer.
        use_v2 = kind == "input" and hasattr(mdl, "get_input_dims_v2")
        get_dims = (mdl.get_input_dims_v2 if use_v2 else
                    mdl.get_input_dims if kind == "input" else mdl.get_output_dims)
        dims, ret = get_dims(self._desc, index)
        check(ret, "acl.mdl.get_input_dims_v2" if use_v2 else f"acl.mdl.get_{kind}_dims")
        # Output names can come back as "node:0:name"; the tensor name is the last part.
        name = str(dims["name"]).split(":")[-1]
        get_type = mdl.get_input_data_type if kind == "input" else mdl.get_output_data_type
        dtype = numpy_dtype(get_type(self._desc, index), f"{kind} '{name}'")
        get_size = mdl.get_input_size_by_index if kind == "input" else mdl.get_output_size_by_index
        size = int(get_size(self._desc, index))
        if size <= 0:
            raise ModelLoadError(
                f"{kind} '{name}' of {self._om.name} has no fixed size (a -1 dimension without "
                "gears)",
                hint="compile with static shapes or with gears (--dynamic_batch_size, "
                "--dynamic_image_size, --dynamic_dims)",
                reference=Ref.UNSUPPORTED_DYNAMIC_OM,
            )
        shape = tuple(int(d) for d in dims["dims"])
        # A YUV420SP frame: (N, H * 3 / 2, W), as the manifest records it. Only the input the
        # manifest marks as such: a plain uint8 (N, H, W, 1) input keeps its 1 (the manifest and
        # sim declare it so); a bare OM without a manifest keeps pyACL's buffer dims.
        if use_v2 and name == self._yuv_input and len(shape) == 4 and shape[-1] == 1:
            shape = shape[:-1]
        return index, name, shape, dtype, size

    def _read_gears(self) -> OmGears:
        mdl = self._acl.mdl
        batch, ret = mdl.get_dynamic_batch(self._desc)
        check(ret, "acl.mdl.get_dynamic_batch")
        if batch["batchCount"]:
            return OmGears("batch", tuple(sorted(int(b) for b in batch["batch"])))
        hw, ret = mdl.get_dynamic_hw(self._desc, -1)
        check(ret, "acl.mdl.get_dynamic_hw")
        if hw["hwCount"]:
            return OmGears("hw", tuple((int(h), int(w)) for h, w in hw["hw"]))
        count, ret = mdl.get_input_dynamic_gear_count(self._desc, -1)
        check(ret, "acl.mdl.get_input_dynamic_gear_count")
        dims, ret = mdl.get_input_dynamic_dims(self._desc, -1, count)
        check(ret, "acl.mdl.get_input_dynamic_dims")
        return OmGears("dims", tuple(tuple(int(d) for d in gear["dims"]) for gear in dims))

    def _dataset(self) -> Any:
        acl = self._acl
        dataset = self._created(acl.mdl.create_dataset(), "acl.mdl.create_dataset")
        self._resources.push_call("acl.mdl.destroy_dataset", acl.mdl.destroy_dataset, dataset)
        return dataset

    def _buffer(self, dataset: Any, index: int, name: str, dims: tuple[int, ...],
                dtype: np.dtype, size: int, memory: DeviceMemory | None = None) -> _Binding:
        acl, res = self._acl, self._resources
        shared = None
        if memory is not None:
            address = int(memory.malloc(size))
            res.push(f"free the memory of input '{name}'", lambda: memory.free(address))
            shared = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))
        elif self.in_place:
            address, ret = acl.rt.malloc_host(size)
            check(ret, "acl.rt.malloc_host")
            res.push_call("acl.rt.free_host", acl.rt.free_host, address)
            shared = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(address))
        else:
            address, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
            check(ret, "acl.rt.malloc")
            res.push_call("acl.rt.free", acl.rt.free, address)
        buffer = self._created(acl.create_data_buffer(address, size), "acl.create_data_buffer")
        res.push_call("acl.destroy_data_buffer", acl.destroy_data_buffer, buffer)
        _, ret = acl.mdl.add_dataset_buffer(dataset, buffer)
        check(ret, "acl.mdl.add_dataset_buffer")
        return _Binding(index, name, dims, dtype, size, address, shared)

    def _specs(self, manifest: BuildManifest | None) -> tuple[list[TensorSpec], list[TensorSpec]]:
        def spec(binding: _Binding, recorded: str | None) -> TensorSpec:
            shape = tuple(d if d >= 0 else None for d in binding.dims)
            return TensorSpec(recorded or binding.name, shape, binding.dtype)

        def names(bindings: tuple[_Binding, ...], entries: tuple[Any, ...]) -> list[str | None]:
            # ATC keeps input names but may rename outputs; when the OM's names are not the
            # build's, the build's names are used by position.
            recorded = [e.name for e in entries]
            if len(recorded) != len(bindings) or {b.name for b in bindings} == set(recorded):
                return [None] * len(bindings)
            return recorded

        in_names = names(self._data_inputs, manifest.inputs if manifest else ())
        out_names = names(self._outputs, manifest.outputs if manifest else ())
        return ([spec(b, n) for b, n in zip(self._data_inputs, in_names, strict=True)],
                [spec(b, n) for b, n in zip(self._outputs, out_names, strict=True)])

    @staticmethod
    def _created(handle: Any, api: str) -> Any:
        if not handle:
            raise AclError(api, _NULL_HANDLE, context=f"{api} returned a null handle")
        return handle

    @property
    def context(self) -> CurrentContext:
        """The pyACL context the session runs in. The board's DVPP source shares it, so the
        media calls, the DVPP memory VPC writes the model input into and ``execute`` are one
        context's on one device (edgefuse.acl.dvpp.units)."""
        return self._context

    # --- input buffers -----------------------------------------------------------------------

    def input_buffers(self, shapes: Mapping[str, Iterable[int]] | None = None, *,
                      memory: DeviceMemory | None = None) -> InputBuffers:
        """A new set of input buffers (``Session.input_buffers``). In ACL_DEVICE mode the arrays
        are the device memory the model reads, allocated once with ``acl.rt.malloc_host`` or by
        ``memory`` (DVPP's allocator, so that VPC writes the model input: ``device_addresses``);
        ``run(buffers)`` copies nothing. On a host with a card they are host arrays (``memory``
        is refused there: the CPU cannot write device memory) and each run copies them to the
        device once."""
        self._check_open()
        if memory is not None and not self.in_place:
            raise InputError(
                "input_buffers(memory=...) needs device memory the CPU can write, which only a "
                f"SoC whose host and device share memory has (run mode ACL_DEVICE); this is run "
                f"mode {self.run_mode} (ACL_HOST, a PCIe card)",
                hint="leave memory out: the buffers are then host arrays copied to the device "
                     "once per run", reference=Ref.BAD_SESSION_OPTION)
        shapes = self._buffer_shapes(dict(shapes or {}))
        for spec, binding in zip(self.inputs, self._data_inputs, strict=True):
            nbytes = math.prod(shapes[spec.name]) * spec.dtype.itemsize
            if nbytes > binding.size:
                raise InputError(f"input_buffers: {spec.name} {list(shapes[spec.name])} is "
                                 f"{nbytes} bytes, the OM's buffer holds {binding.size}",
                                 context=self._expected(), reference=Ref.BAD_FEEDS)
        if not self.in_place:
            return self._input_buffers(shapes)
        with self._lock:
            self._context.make_current(self._acl)
            inputs = self._input_set(memory)
        arrays, addresses = {}, {}
        for spec, binding in zip(self.inputs, inputs.data, strict=True):
            shape = shapes[spec.name]
            nbytes = math.prod(shape) * spec.dtype.itemsize
            shared = binding.shared  # in place, every buffer of the set is shared memory
            arrays[spec.name] = shared[:nbytes].view(spec.dtype).reshape(shape)  # type: ignore[index]
            addresses[spec.name] = binding.address
        return InputBuffers(self, arrays, device_addresses=addresses, handle=inputs)

    # --- running -----------------------------------------------------------------------------

    def _run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        acl = self._acl
        inputs = (feeds.handle if isinstance(feeds, InputBuffers) and feeds.owned_by(self)
                  and isinstance(feeds.handle, _InputSet) else self._own_inputs)
        with self._lock:
            self._context.make_current(acl)
            # With validation off a wrong dtype would copy the wrong bytes; converting is free
            # when the dtype is already right.
            arrays = [np.ascontiguousarray(feeds[s.name], dtype=s.dtype) for s in self.inputs]
            real_batch = self._set_gear(inputs, self.gears, arrays) if self.gears else None
            for binding, array in zip(inputs.data, arrays, strict=True):
                if array.nbytes > binding.size:
                    raise InputError(
                        f"input '{binding.name}' is {array.nbytes} bytes, the OM's buffer holds "
                        f"{binding.size}",
                        context=self._expected(),
                        reference=Ref.BAD_FEEDS,
                    )
                if binding.shared is not None:
                    if array.ctypes.data != binding.address:  # not written in place already
                        binding.shared[:array.nbytes] = array.reshape(-1).view(np.uint8)
                else:
                    check(acl.rt.memcpy(binding.address, binding.size, array.ctypes.data,
                                        array.nbytes, ACL_MEMCPY_HOST_TO_DEVICE),
                          "acl.rt.memcpy")
            self._clear_spare(inputs, arrays)
            if self._async:
                check(acl.mdl.execute_async(self._model_id, inputs.dataset,
                                            self._output_dataset, self._stream),
                      "acl.mdl.execute_async")
                check(acl.rt.synchronize_stream(self._stream), "acl.rt.synchronize_stream")
            else:
                check(acl.mdl.execute(self._model_id, inputs.dataset, self._output_dataset),
                      "acl.mdl.execute")
            return {spec.name: self._fetch(binding, real_batch)
                    for spec, binding in zip(self.outputs, self._outputs, strict=True)}

    def _clear_spare(self, inputs: _InputSet, arrays: list[np.ndarray]) -> None:
        """Zero what lies past each input's real rows, once: a batch that runs on a larger gear
        copies only its own rows, and the gear's spare rows would otherwise hold garbage or an
        earlier run's frames, so the same feed would not always give the same outputs. Each
        stale byte is cleared once (``acl.rt.memset``); a run that fills its buffer clears
        nothing."""
        for position, (binding, array) in enumerate(zip(inputs.data, arrays, strict=True)):
            stale = inputs.stale[position]
            if stale > array.nbytes:
                check(self._acl.rt.memset(binding.address + array.nbytes,
                                          binding.size - array.nbytes, 0, stale - array.nbytes),
                      "acl.rt.memset")
            inputs.stale[position] = array.nbytes

    def _fetch(self, binding: _Binding, real_batch: int | None) -> np.ndarray:
        acl = self._acl
        dims = binding.dims
        if self.gears is not None:
            current, ret = acl.mdl.get_cur_output_dims(self._desc, binding.index)
            check(ret, "acl.mdl.get_cur_output_dims")
            dims = tuple(int(d) for d in current["dims"])
        nbytes = math.prod(dims) * binding.dtype.itemsize
        if nbytes > binding.size:
            raise AclError("acl.mdl.get_cur_output_dims", 100018,
                           context=f"output '{binding.name}' dims {dims} exceed its buffer")
        if binding.shared is not None:
            array = binding.shared[:nbytes].view(binding.dtype).reshape(dims).copy()
        else:
            array = np.empty(dims, dtype=binding.dtype)
            check(acl.rt.memcpy(array.ctypes.data, nbytes, binding.address, nbytes,
                                ACL_MEMCPY_DEVICE_TO_HOST), "acl.rt.memcpy")
        if real_batch is not None and array.ndim and array.shape[0] > real_batch:
            return array[:real_batch]
        return array

    def _set_gear(self, inputs: _InputSet, gears: OmGears,
                  arrays: list[np.ndarray]) -> int | None:
        """Select the gear the feeds need; returns the real batch when it runs on a larger gear."""
        mdl = self._acl.mdl
        where = (self._model_id, inputs.dataset, self._dynamic_index)
        dynamic = [(array, [axis for axis, d in enumerate(b.dims) if d < 0])
                   for array, b in zip(arrays, inputs.data, strict=True)]
        choice = select_gear(gears, dynamic, self._om.name)
        if gears.kind == "batch":
            check(mdl.set_dynamic_batch_size(*where, choice.value),
                  "acl.mdl.set_dynamic_batch_size")
        elif gears.kind == "hw":
            height, width = choice.value
            check(mdl.set_dynamic_hw_size(*where, height, width), "acl.mdl.set_dynamic_hw_size")
        else:
            dims = list(choice.value)
            check(mdl.set_input_dynamic_dims(*where, {"dimCount": len(dims), "name": "",
                                                      "dims": dims}),
                  "acl.mdl.set_input_dynamic_dims")
        return choice.real_batch

    # --- teardown ----------------------------------------------------------------------------

    def _close(self) -> None:
        with self._lock:
            try:
                self._context.make_current(self._acl)
            finally:
                self._resources.release_all()
