"""The ``sim`` backend: a BUILD_DIR run on the host under the board's contract.

Why: app developers test their pipelines on a laptop and in CI long before a board is free, and a
plain host session is kinder than the board in every way that matters to a test: it runs the
FP32 ONNX with float outputs, accepts shapes the OM would refuse, and knows nothing of the
board's soc or memory, so a host test can pass on code that breaks on the board. No Ascend
toolchain has a host executor for an OM (reference apps-and-pipelines.md §3.5; rknn-toolkit2's PC
simulator is the nearest thing elsewhere), so this one reproduces the OM's contract from the
same BUILD_DIR the board loads:

- I/O exactly as ``manifest.json`` records the OM's: names, shapes, dtypes, layouts after AIPP
  (uint8 NHWC or YUV420SP frames in, AIPP's arithmetic emulated with its FP16 output,
  ``AippSpec.emulate``), the output dtypes the OM gives (without ``--output_type`` ATC keeps
  the dtype of the original network's last operator, float32 for an FP32 ONNX whatever the
  precision mode; with it, the type given: https://www.hiascend.com/document/detail/zh/
  canncommercial/latest/devaids/atctool/atlasatcparam_16_0030.html; compile records the result
  in the manifest's outputs), gear inputs left dynamic and off-gear shapes refused with the
  board's own ``no-matching-gear`` error (``edgefuse.acl.gears``);
- FP16 numerics as the FP16 stage emulates them, with the build's precision mode and keep-FP32
  decisions (``sim_numerics``);
- edgefuse's custom ops through their reference decompositions (``prepare.host_runnable``), with
  the YoloHead kernel's candidate cap in front of each (``sim_device_ops``);
- CANN's NonMaxSuppression output: padded with ``-1`` rows to its fixed size
  (``sim_device_ops``);
- the board's limits: a build made for another soc than the simulated one is refused before
  anything loads (``BackendUnavailableError``, as the board refuses it), and so is a model whose
  estimated footprint (``sim_footprint``) exceeds the board's memory (``ModelLoadError`` with the
  figures).
What it does not simulate is listed once, in ``sim_target.NOT_SIMULATED``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from edgefuse.acl.compile.prepare import host_runnable
from edgefuse.acl.gears import OmGears, gears_from_manifest, select_gear
from edgefuse.convert.onnx_load import load_model
from edgefuse.errors import BackendUnavailableError, ModelLoadError, Ref
from edgefuse.fallback.aipp_frames import AippFrameSession, wants_frames
from edgefuse.fallback.ort_session import OrtSession, probe_provider
from edgefuse.fallback.sim_device_ops import (
    cap_yolo_head_candidates,
    pad_nms_like_cann,
    recorded_unified_buffer,
)
from edgefuse.fallback.sim_footprint import Footprint, estimate_footprint
from edgefuse.fallback.sim_numerics import SimNumerics, name_nodes, plan_numerics
from edgefuse.fallback.sim_target import DEFAULT_SIM_SOC, SimTarget, format_bytes, sim_target
from edgefuse.manifest import BuildManifest, TensorEntry
from edgefuse.model_source import ModelSource, resolve_source
from edgefuse.session import Availability, Session, TensorSpec

log = logging.getLogger(__name__)
INT8_NOTE = (
    "this build is quantized to INT8 on the board (ATC's calibration, compile --int8); the "
    "simulation runs its FP16 numerics, not the INT8 ones: the board's INT8 is predicted by "
    "`edgefuse quantize MODEL --int8 --emulate`'s host_int8.qdq.onnx (edgefuse verify MODEL "
    "FOLDER/host_int8.qdq.onnx --inputs FRAMES), and measured on a board")

SIM_OPTIONS = frozenset({"soc", "memory", "threads", "profile"})


def probe_sim(source: ModelSource | None = None) -> Availability:
    """Whether the simulation can run here (ONNX Runtime), and ``source`` is a build to run."""
    found = probe_provider("cpu")
    if not found.ok:
        return Availability(False, f"the simulation runs on ONNX Runtime: {found.reason}")
    if source is not None and (source.manifest is None or source.onnx is None):
        return Availability(False, _not_a_build(source.label))
    return Availability(True, f"simulates {sim_target().describe()} by default (options soc, "
                              "memory; --sim-soc, --sim-memory) on onnxruntime CPU")


class SimSession(Session):
    """A BUILD_DIR on the host, with the OM's I/O, FP16 numerics, gears, soc and memory."""

    backend = "sim"

    def __init__(
        self,
        build: str | os.PathLike[str] | ModelSource,
        *,
        soc: str = DEFAULT_SIM_SOC,
        memory: int | float | str | None = None,
        threads: int | None = None,
        profile: str | os.PathLike[str] | None = None,
        validate: bool = True,
    ) -> None:
        source = resolve_source(build)
        manifest = source.manifest
        if manifest is None or source.onnx is None:
            raise BackendUnavailableError(_not_a_build(source.label))
        self.target: SimTarget = sim_target(soc, memory)
        self.soc = self.target.soc
        self._om_name = manifest.om or "model.om"
        self._check_soc(manifest)
        board_ops = cap_yolo_head_candidates(
            pad_nms_like_cann(load_model(source.onnx)), self.soc,
            recorded_unified_buffer(manifest.extra.get("custom_ops")))
        model = name_nodes(host_runnable(board_ops))
        self.numerics: SimNumerics = plan_numerics(model, manifest.extra.get("precision"))
        if manifest.extra.get("int8"):
            self.numerics = dataclasses.replace(self.numerics, exact=False,
                                                note=f"{self.numerics.note}; {INT8_NOTE}")
            log.warning("%s: %s", source.label, INT8_NOTE)
        self.gears: OmGears | None
        self.gears, self._gear_axes = gears_from_manifest(manifest.extra.get("gears"))
        self.footprint: Footprint = self._footprint(model, manifest)
        if self.footprint.total > self.target.memory:
            enough = f"{-(-self.footprint.total // (1 << 20))}MiB"
            raise ModelLoadError(
                f"{source.label} needs {format_bytes(self.footprint.total)} of board memory, "
                f"more than the {format_bytes(self.target.memory)} of the simulated "
                f"{self.target.board} ({self.target.soc})",
                context=f"footprint: {self.footprint.describe()}\n"
                        f"board: {self.target.describe()}",
                hint="shrink the model or its input (a smaller input size, fewer or smaller "
                     f"gears), or simulate a board with more memory: memory='{enough}' "
                     f"(--sim-memory {enough})",
                reference=Ref.BOARD_MEMORY_EXCEEDED,
            )
        inner: Session = OrtSession(self.numerics.emulate(model), "cpu", threads=threads,
                                    profile=profile, validate=False)
        try:
            if wants_frames(manifest):
                inner = AippFrameSession(inner, manifest, validate=False, fp16=True)
        except BaseException:
            inner.close()
            raise
        self._inner = inner
        self._inner_dtypes = {spec.name: spec.dtype for spec in inner.inputs}
        self.manifest = manifest
        self.layouts: dict[str, str | None] = {
            entry.name: entry.layout for entry in (*manifest.inputs, *manifest.outputs)}
        super().__init__([_spec(entry) for entry in manifest.inputs],
                         [_spec(entry) for entry in manifest.outputs], validate=validate)

    def _check_soc(self, manifest: BuildManifest) -> None:
        if manifest.soc and manifest.soc != self.target.soc:
            raise BackendUnavailableError(
                f"{self._om_name} was compiled for {manifest.soc}, the simulated device is "
                f"{self.target.soc}",
                hint=f"recompile with `edgefuse compile ... --soc {self.target.soc}`, or simulate "
                     f"the build's board: soc='{manifest.soc}' (--sim-soc {manifest.soc})",
            )

    def _footprint(self, model: onnx.ModelProto, manifest: BuildManifest) -> Footprint:
        declared = {value.name: [d.dim_value if d.HasField("dim_value") else -1
                                 for d in value.type.tensor_type.shape.dim]
                    for value in model.graph.input}
        record = manifest.preprocess
        model_shapes = {}
        buffers = []
        for entry in manifest.inputs:
            axes = self._gear_axes.get(entry.name, ())
            buffers.append((entry, self._largest(entry.shape, axes)))
            shape = declared.get(entry.name, list(entry.shape))
            if record is not None and record.input == entry.name and record.model_input_shape:
                shape = list(record.model_input_shape)
            model_shapes[entry.name] = self._largest(shape, axes)
        return estimate_footprint(
            model, input_shapes=model_shapes, input_buffers=buffers, outputs=manifest.outputs,
            rounded=self.numerics.rounds, kept=self.numerics.kept_nodes(model),
        )

    def _largest(self, shape: Sequence[int | str | None], axes: Sequence[int]) -> list[int]:
        """``shape`` at the gear that needs the most memory; other unknown dimensions as 1."""
        sizes = [d if isinstance(d, int) and d > 0 else 1 for d in shape]
        if self.gears is not None and self.gears.kind == "batch" and 0 in axes:
            sizes[0] = max(self.gears.values)
        elif self.gears is not None and self.gears.kind == "hw" and len(axes) == 2:
            height, width = max(self.gears.values, key=lambda hw: hw[0] * hw[1])
            sizes[axes[0]], sizes[axes[1]] = height, width
        return sizes

    # --- running -----------------------------------------------------------------------------

    def _run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        # As on the board: with validation off a wrong dtype is converted, not misread.
        arrays = {spec.name: np.asarray(feeds[spec.name], dtype=spec.dtype)
                  for spec in self.inputs}
        if self.gears is not None:
            select_gear(self.gears, [(arrays[spec.name], self._gear_axes.get(spec.name, ()))
                                     for spec in self.inputs], self._om_name)
        inner_feeds = {name: array.astype(self._inner_dtypes[name], copy=False)
                       for name, array in arrays.items()}
        results = self._inner.run(inner_feeds)
        return {spec.name: np.asarray(results[spec.name]).astype(spec.dtype, copy=False)
                for spec in self.outputs}

    def end_profiling(self) -> Path:
        return self._inner.end_profiling()

    def _close(self) -> None:
        self._inner.close()


def _spec(entry: TensorEntry) -> TensorSpec:
    return TensorSpec(entry.name, tuple(entry.shape), np.dtype(entry.dtype))


def _not_a_build(label: str) -> str:
    return (f"{label} is not a BUILD_DIR: the simulation runs a build as the board would; make "
            "one with `edgefuse compile MODEL --soc SOC -o BUILD_DIR`")
