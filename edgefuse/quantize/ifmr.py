"""IFMR: the activation calibration CANN's post-training quantization (AMCT, and ATC's
``--compression_optimize_conf`` calibration) uses, reproduced on the host.

Why not the calibration min/max: IFMR clips. One outlier pixel in a frame stretches a min/max range
and leaves every other value a few of the 256 steps; the board searches the clipping point that
quantizes the calibration data with the least error, and an emulation that does not predicts a
different INT8 model from the one ATC builds.

What the algorithm is (AMCT "IFMR algorithm for activation quantization", atlasamct_16_0389,
https://www.hiascend.com/document/detail/en/canncommercial/850/devaids/amct/atlasamct_16_0389.html;
the parameters in the simple config's ``ifmr_quantize`` / FMRQuantize, atlasamct_16_0131,
https://www.hiascend.com/document/detail/en/canncommercial/850/devaids/amct/atlasamct_16_0131.html;
the device op that runs it, ``IFMR`` in CANN's TBE ops, ``impl/dynamic/ifmr.py``, whose defaults
``torch_npu.npu_ifmr`` documents: percentiles 0.999999, search 0.7 to 1.3 step 0.01, with offset):

1. ``clip_max_init``: the ``max_percentile`` point of the data in ascending order;
   ``clip_min_init``: the ``min_percentile`` point in descending order.
2. With an offset (``activation_offset: true``, asymmetric): the range is widened to hold 0
   (``clip_max_init >= 0 >= clip_min_init``) and only ``clip_max`` is searched, ``clip_min`` stays
   ``clip_min_init`` (the TBE op's ``min_list`` is one value). Without an offset (symmetric):
   ``clip_max_init = max(|clip_max_init|, |clip_min_init|)``.
3. Candidates ``clip_max_init * r`` for ``r = search_range_start + i * search_step``,
   ``i = 0 .. int((end - start) // step)`` (61 candidates with the defaults).
4. Each candidate gives ``scale = (clip_max - clip_min) / 255`` and the INT8 offset
   ``-(round(clip_min / scale) + 128)`` (symmetric: ``scale = clip_max / 127``, offset 0); the data
   is quantized (``round(x / scale) + offset``, clipped to [-128, 127]) and dequantized, and the
   candidate with the least mean squared error wins (the first on a tie).
5. A scale at or below float32's epsilon becomes 1 with offset -128, as on the device.

Differences from the device, on purpose: the percentiles are read exactly from the sorted data
(the TBE op reads them from a histogram of at most 8192 bins); above ``MAX_LOSS_VALUES`` values
the squared error of step 4 is measured on an evenly strided subset (a 640x640 detector's early
layers give tens of millions of values per tensor over 16 frames; the percentiles still use every
value). ``ActivationSketch`` gathers both sample by sample, so a tensor's values over all frames
are never held at once: only the extreme values the percentile points lie among, and the subset.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from edgefuse.errors import InputError, Ref

MAX_LOSS_VALUES = 1 << 18
_EPSILON = float(np.finfo(np.float32).eps)


@dataclasses.dataclass(frozen=True)
class IfmrConfig:
    """The simple config's ``ifmr_quantize`` fields and ``activation_offset``: one object feeds
    both the host emulation and the config file the board gets, so they cannot disagree."""

    max_percentile: float = 0.999999
    min_percentile: float = 0.999999
    search_range_start: float = 0.7
    search_range_end: float = 1.3
    search_step: float = 0.01
    activation_offset: bool = True

    def __post_init__(self) -> None:
        for name in ("max_percentile", "min_percentile"):
            value = getattr(self, name)
            if not 0.5 < value <= 1.0:
                raise InputError(f"IFMR {name} must be in (0.5, 1], got {value!r}",
                                 reference=Ref.BAD_CALIBRATION_INPUTS)
        if not (0 < self.search_range_start < self.search_range_end and self.search_step > 0):
            raise InputError(
                "IFMR's search range must satisfy 0 < start < end and step > 0, got "
                f"{self.search_range_start!r}..{self.search_range_end!r} step "
                f"{self.search_step!r}",
                reference=Ref.BAD_CALIBRATION_INPUTS)

    @property
    def ratios(self) -> np.ndarray:
        """The multipliers of ``clip_max_init`` searched, as the TBE op counts them."""
        count = int((self.search_range_end - self.search_range_start) // self.search_step + 1)
        return self.search_range_start + np.arange(count) * self.search_step

    def proto_fields(self) -> dict[str, float]:
        """The ``ifmr_quantize`` block of the simple config (calibration_config.proto)."""
        return {"search_range_start": self.search_range_start,
                "search_range_end": self.search_range_end,
                "search_step": self.search_step,
                "max_percentile": self.max_percentile,
                "min_percentile": self.min_percentile}


CANN_DEFAULTS = IfmrConfig()


@dataclasses.dataclass(frozen=True)
class ActivationQuant:
    """One activation's INT8 parameters: ``q = clip(round(x / scale) + offset, -128, 127)``."""

    scale: float
    offset: int  # INT8 offset (zero point); 0 when symmetric
    clip_min: float
    clip_max: float
    ratio: float  # the chosen multiplier of clip_max_init
    loss: float  # mean squared quantization error of the calibration values

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class ActivationSketch:
    """One tensor's calibration values as IFMR needs them, added one sample at a time:
    ``total`` is the number of values over all samples (every sample has the same shape)."""

    def __init__(self, total: int, config: IfmrConfig = CANN_DEFAULTS) -> None:
        self.total, self.config = total, config
        self._upper, self._lower = _percentile_indices(total, config)
        self._stride = math.ceil(total / MAX_LOSS_VALUES)
        self._largest: list[np.ndarray] = []  # per sample, its (total - upper) largest values
        self._smallest: list[np.ndarray] = []  # per sample, its (lower + 1) smallest values
        self._subset: list[np.ndarray] = []
        self._added = 0

    def add(self, values: np.ndarray) -> None:
        data = np.asarray(values, dtype=np.float32).ravel()
        if not np.isfinite(data).all():
            raise InputError("IFMR needs finite calibration values",
                             context=f"{int(data.size - np.isfinite(data).sum())} of "
                                     f"{data.size} value(s) not finite",
                             reference=Ref.BAD_CALIBRATION_INPUTS)
        top = min(self.total - self._upper, data.size)
        bottom = min(self._lower + 1, data.size)
        self._largest.append(np.partition(data, data.size - top)[data.size - top:])
        self._smallest.append(np.partition(data, bottom - 1)[:bottom])
        self._subset.append(data[(-self._added) % self._stride:: self._stride])
        self._added += data.size

    def search(self) -> ActivationQuant:
        """The scale and offset IFMR picks for every value added."""
        if self._added != self.total or self.total == 0:
            raise ValueError(f"{self._added} value(s) added, {self.total} announced")
        largest, smallest = np.concatenate(self._largest), np.concatenate(self._smallest)
        top, bottom = self.total - self._upper, self._lower + 1
        clip_max_init = float(np.partition(largest, largest.size - top)[largest.size - top])
        clip_min_init = float(np.partition(smallest, bottom - 1)[bottom - 1])
        return _search(np.concatenate(self._subset), clip_max_init, clip_min_init, self.config)


def ifmr_search(values: np.ndarray, config: IfmrConfig = CANN_DEFAULTS) -> ActivationQuant:
    """The scale and offset IFMR picks for ``values`` (every calibration value of one tensor)."""
    data = np.asarray(values, dtype=np.float32)
    if data.size == 0:
        raise InputError("IFMR needs calibration values, got none",
                         reference=Ref.BAD_CALIBRATION_INPUTS)
    sketch = ActivationSketch(data.size, config)
    sketch.add(data)
    return sketch.search()


def _search(measured: np.ndarray, clip_max_init: float, clip_min_init: float,
            config: IfmrConfig) -> ActivationQuant:
    if config.activation_offset:
        clip_max_init, clip_min_init = max(clip_max_init, 0.0), min(clip_min_init, 0.0)
    else:
        clip_max_init = max(abs(clip_max_init), abs(clip_min_init))
        clip_min_init = -clip_max_init
    candidates = []
    for ratio in config.ratios:
        clip_max = clip_max_init * float(ratio)
        scale, offset = _scale_offset(clip_min_init, clip_max, config.activation_offset)
        loss = float(np.mean((fake_quantize(measured, scale, offset) - measured) ** 2,
                             dtype=np.float64))
        candidates.append(ActivationQuant(scale, offset, clip_min_init, clip_max, float(ratio),
                                          loss))
    return min(candidates, key=lambda c: c.loss)  # the first of equal losses, as on the device


def fake_quantize(values: np.ndarray, scale: float, offset: int) -> np.ndarray:
    """Quantize to INT8 with ``scale``/``offset`` and back, as IFMR measures its error."""
    quantized = np.clip(np.rint(values / np.float32(scale)) + offset, -128, 127)
    return ((quantized - offset) * np.float32(scale)).astype(np.float32)


def _percentile_indices(n: int, config: IfmrConfig) -> tuple[int, int]:
    """Ascending indices of (clip_max_init, clip_min_init) among ``n`` values: the smallest value
    with ``max_percentile`` of the data at or below it, the largest with ``min_percentile`` of
    the data at or above it."""
    upper = min(n - 1, max(0, math.ceil(config.max_percentile * n) - 1))
    lower = max(0, min(n - 1, n - math.ceil(config.min_percentile * n)))
    return upper, lower


def _scale_offset(clip_min: float, clip_max: float, asymmetric: bool) -> tuple[float, int]:
    if asymmetric:
        scale = (clip_max - clip_min) / 255.0
        if scale <= _EPSILON:
            return 1.0, -128
        return scale, int(-(np.rint(clip_min / scale) + 128))
    scale = clip_max / 127.0
    return (1.0, 0) if scale <= _EPSILON else (scale, 0)
