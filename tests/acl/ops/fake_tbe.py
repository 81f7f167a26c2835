"""A strict stand-in for CANN's ``tbe`` package, so that the kernels' build code runs on the host.

Why: the TBE kernels only run inside ATC. Executing their Python against this fake catches what
``compile()`` cannot, each check taken from the TIK/DSL API reference:

- names that do not exist, and calls with the wrong parameters (each fake method has the
  parameter list of its API page);
- operands of mismatched dtypes, masks wider than one repeat, repeat counts, strides, burst
  counts and lengths outside their documented ranges;
- every memory access against the tensor it names (below), and reads of a unified-buffer (UB)
  tensor that nothing has written;
- UB use above the chip's size (every scope's UB tensors summed, double-buffered loops twice);
- APIs and dtypes the target chip lacks (``CAPABILITIES``, from the API pages' product lists).

Bounds. A tensor is its declared shape and dtype. An element index must lie inside each of its
dimensions; an instruction's operand, from its start element over all its repeats (mask lanes,
block stride, repeat stride) or bursts (``nburst`` x ``burst`` blocks and the gaps between them),
must lie inside the tensor's bytes; UB operands must start on a 32-byte block (TIK "通用约束":
UB addresses are 32-byte aligned; data_move: "若dst/src的scope为UB, 则要求地址偏移32Byte对齐").
One allowance, for global memory (GM) only: data_move moves whole 32-byte blocks, so a GM tensor
smaller than one block may be moved as the single block that covers it, within two rules (CANN
rounds every device memory segment up to a multiple of 32 bytes, aclrtMallocAlign32:
"内存大小向上对齐成32整数倍+32字节", hiascend canncommercial/80RC3
apiref/appdevgapi/aclpythondevg_01_0973.html; whether TIK's own checks accept it is not
documented): a write past the end must put back what it read there (the block was first read
from that tensor into the UB buffer written out: read-modify-write through a scratch block), and
a read past the end is allowed only where it is the read of such a write, or where the chip
cannot read GM element by element (``Scalar.set_as`` from GM: not on Ascend310/Ascend910, TIK
set_as page atlastikapi_07_0012). A tensor of one block or more gets no slack: a burst past its
end is a failure even where the allocator's padding would hide it.

Indices that are TIK expressions are checked as intervals. A ``for_range`` variable spans its
range; an ``if_scope`` condition ``x < c`` (``<=``, ``>``, ``>=``, ``tik.all``) narrows ``x``
inside the scope; a Scalar assigned inside a loop or branch opened after it was declared spans
every value assigned to it, a loop-carried increment ``s.set_as(s + d)`` growing by ``d`` times
the trip count of those loops; a Scalar read from a tensor spans the values written there
(``vec_dup`` constants, ``vec_sel`` of its sources, ``vec_conv`` of its source, scalar stores),
and the index ``vec_reduce_max(cal_index=True)`` stores lies in ``[0, elements reduced)``. Python
runs a TIK loop body once, so a read that precedes the increment in the body would see too small
a range: ``run`` builds a kernel twice, the first build learning each loop-carried Scalar's range
and the second checking every access with it.

It checks the kernels against the API as documented; it computes no values, so it proves nothing
about their results.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import types

BYTES = {"float16": 2, "float32": 4, "int32": 4, "uint32": 4, "uint16": 2, "int64": 8,
         "uint8": 1, "int8": 1}
FLOATS = {"float16", "float32"}
BLOCK = 32  # bytes in one block
REPEAT_BYTES = 256  # bytes one vector repeat processes
MAX_REPEAT, MAX_STRIDE = 255, 255
MAX_NBURST, MAX_BURST, MAX_GAP = 4095, 65535, 65535
INF = math.inf

# get_soc_spec values per soc; the UB size is the same Ascend310B-like budget for every chip, so
# that only the documented capability differences below tell the chips apart.
SOCS = {
    "Ascend310": "ascend310",
    "Ascend310B4": "ascend310b",
    "Ascend310P3": "ascend310p",
    "Ascend910A": "ascend910",
    "Ascend910B3": "ascend910b",
}
SOC_SPEC = {"UB_SIZE": 248 * 1024, "CORE_NUM": 2}

# What the chips lack, from the "支持的数据类型"/"mode" lines of the API pages (CANN 8.0.RC1):
# Atlas 200/300/500 inference = ascend310, Atlas training = ascend910.
#   DSL vexp (atlaste_07_0012): float32 on every product but Atlas 200/300/500 inference;
#   TIK vec_sel (atlastikapi_07_0081): Atlas 200/300/500 inference and Atlas training support
#     only mode 0, and Atlas 200/300/500 inference only float16 operands;
#   TIK vec_reduce_max (atlastikapi_07_0089): float16 only on those two.
ALL_FLOAT = frozenset(FLOATS)
CAPABILITIES = {
    "tbe.dsl.vexp": {"ascend310": frozenset({"float16"})},
    "tik.vec_sel.dtype": {"ascend310": frozenset({"float16"})},
    "tik.vec_sel.mode": {"ascend310": frozenset({0}), "ascend910": frozenset({0})},
    "tik.vec_reduce_max": {"ascend310": frozenset({"float16"}),
                           "ascend910": frozenset({"float16"})},
    #   TIK Scalar.set_as (atlastikapi_07_0012): a GM tensor element as the value on Atlas
    #     inference (310P), A2 (910B) and 200I/500 A2 (310B); scope_ubuf only on the others.
    "tik.scalar_from_gm": {"ascend310": frozenset(), "ascend910": frozenset()},
}
_DEFAULTS = {"tbe.dsl.vexp": ALL_FLOAT, "tik.vec_sel.dtype": ALL_FLOAT,
             "tik.vec_sel.mode": frozenset({0, 1, 2}), "tik.vec_reduce_max": ALL_FLOAT,
             "tik.scalar_from_gm": frozenset({True})}

_STATE = types.SimpleNamespace(soc="Ascend310B4", envelopes=None, last_tik=None)


class StandInError(AssertionError):
    """A kernel did something the TIK/DSL API does not allow."""


def _fail(message: str) -> None:
    raise StandInError(message)


def _supported(capability: str) -> frozenset:
    family = SOCS[_STATE.soc]
    return CAPABILITIES[capability].get(family, _DEFAULTS[capability])


# ---- intervals ----------------------------------------------------------------------------------


def _hull(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return (min(a[0], b[0]), max(a[1], b[1]))


def _times(x, y):
    return 0 if x == 0 or y == 0 else x * y


def _dtype_range(dtype):
    if dtype in FLOATS:
        return (-INF, INF)
    bits = 8 * BYTES[dtype]
    if dtype.startswith("u"):
        return (0, 2**bits - 1)
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _span(value):
    """(lo, hi) of a TIK scalar value: an expression, or a Python number."""
    if isinstance(value, Expr):
        return value.bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(f"not a TIK scalar value: {value!r}")
    return (value, value)


def _integral(value):
    return value.integral if isinstance(value, Expr) else isinstance(value, int)


def _top(value):
    """The largest value a count or stride can take (an expression's upper bound)."""
    return _span(value)[1]


class Expr:
    """A TIK scalar expression: arithmetic builds expressions, comparisons build conditions."""

    def __init__(self, lo, hi, integral=True, increment_of=None):
        self._lo, self._hi = lo, hi
        self.integral = integral
        self._narrowed: list[tuple] = []
        self.increment_of = increment_of  # (scalar, (dlo, dhi)) for ``scalar + d``

    @property
    def bounds(self):
        lo, hi = self._lo, self._hi
        for nlo, nhi in self._narrowed:
            lo, hi = max(lo, nlo), min(hi, nhi)
        return lo, hi

    def _binary(self, other, combine, reverse=False):
        a, b = (_span(other), self.bounds) if reverse else (self.bounds, _span(other))
        return Expr(*combine(a, b), integral=self.integral and _integral(other))

    def __add__(self, other):
        result = self._binary(other, lambda a, b: (a[0] + b[0], a[1] + b[1]))
        if isinstance(self, Scalar) and other is not self:
            result.increment_of = (self, _span(other))
        return result

    __radd__ = __add__

    def __sub__(self, other):
        result = self._binary(other, lambda a, b: (a[0] - b[1], a[1] - b[0]))
        if isinstance(self, Scalar) and other is not self:
            lo, hi = _span(other)
            result.increment_of = (self, (-hi, -lo))
        return result

    def __rsub__(self, other):
        return self._binary(other, lambda a, b: (a[0] - b[1], a[1] - b[0]), reverse=True)

    def __mul__(self, other):
        def combine(a, b):
            products = [_times(x, y) for x in a for y in b]
            return min(products), max(products)

        return self._binary(other, combine)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if not (isinstance(other, int) and other > 0):
            _fail(f"the stand-in divides expressions by positive ints only, not {other!r}")
        lo, hi = self.bounds
        return Expr(math.floor(lo / other) if lo != -INF else -INF,
                    math.floor(hi / other) if hi != INF else INF, self.integral)

    def __mod__(self, other):
        if not (isinstance(other, int) and other > 0):
            _fail(f"the stand-in takes expressions modulo positive ints only, not {other!r}")
        lo, hi = self.bounds
        if lo >= 0 and hi - lo < other and lo % other <= hi % other:
            return Expr(lo % other, hi % other)
        return Expr(0, other - 1)

    def _compare(self, op, other):
        return Cond([(self, op, other)])

    def __lt__(self, other):
        return self._compare("<", other)

    def __le__(self, other):
        return self._compare("<=", other)

    def __gt__(self, other):
        return self._compare(">", other)

    def __ge__(self, other):
        return self._compare(">=", other)

    def __bool__(self):
        _fail("a TIK expression was used as a Python bool")


class Cond:
    """A TIK condition: comparisons of expressions, joined by ``tik.all``."""

    def __init__(self, terms):
        self.terms = terms

    def narrowing(self):
        """(expression, (lo, hi)) for each term that compares an expression with a constant."""
        found = []
        for expr, op, other in self.terms:
            if isinstance(other, Expr) or not isinstance(other, (int, float)):
                continue
            step = 1 if expr.integral and isinstance(other, int) else 0
            found.append((expr, {
                "<": (-INF, other - step), "<=": (-INF, other),
                ">": (other + step, INF), ">=": (other, INF),
            }[op]))
        return found

    def __bool__(self):
        _fail("a TIK condition was used as a Python bool")


class Scalar(Expr):
    """A TIK Scalar; see the module docstring for how its range is tracked."""

    def __init__(self, tik, dtype="int64", name="scalar", init_value=None):
        if dtype not in BYTES:
            _fail(f"Scalar dtype {dtype}")
        self.tik, self.dtype, self.name = tik, dtype, name
        self.depth = len(tik.frames)
        self.history = None if init_value is None else _span(init_value)
        self.carried = False
        index = len(tik.scalars)
        tik.scalars.append(self)
        envelopes = tik.envelopes
        self.envelope = envelopes[index] if envelopes is not None else None
        lo, hi = self.history if self.history is not None else _dtype_range(dtype)
        super().__init__(lo, hi, integral=dtype not in FLOATS)
        if self.envelope is not None:
            self._lo, self._hi = _hull(self.history, self.envelope)

    def set_as(self, value, src_offset=None):
        if isinstance(value, TensorView) and value.scope == "gm" and (
                True not in _supported("tik.scalar_from_gm")):
            _fail(f"Scalar.set_as from GM tensor {value.name} is not supported on {_STATE.soc}")
        new = self.tik.value_of(value)
        inner = [frame for frame in self.tik.frames[self.depth:] if frame.kind != "stmt"]
        if not inner:  # straight-line code at the Scalar's own level: the value replaces
            self.history = _hull(self.history, new)
            if self.envelope is None:
                self._lo, self._hi = new
            return
        self.carried = True
        increment = value.increment_of if isinstance(value, Expr) else None
        if increment is not None and increment[0] is self:
            trips = math.prod(frame.trips for frame in inner)
            lo, hi = self.history if self.history is not None else self.bounds
            new = (lo + _times(min(0, increment[1][0]), trips),
                   hi + _times(max(0, increment[1][1]), trips))
        self.history = _hull(self.history, new)
        if self.envelope is None:
            self._lo, self._hi = self.history


# ---- tensors ------------------------------------------------------------------------------------


class Buffer:
    """The memory a ``tik.Tensor`` declares, and what is known of the values written to it."""

    def __init__(self, name, dtype, shape, scope):
        self.name, self.dtype, self.shape, self.scope = name, dtype, tuple(shape), scope
        self.nbytes = math.prod(shape) * BYTES[dtype]
        self.values = None if scope == "ubuf" else _dtype_range(dtype)  # None: never written
        self.index_values = None  # the index a vec_reduce_max(cal_index=True) stored
        self.loaded_from = None  # the GM buffer a data_move last filled this UB buffer from

    def wrote(self, values, element=False):
        """Record a write; anything but an element store replaces what a data_move loaded."""
        self.values = _hull(self.values, values)
        if not element:
            self.loaded_from = None


class TensorView:
    """A tensor (``element=False``) or the element an index names; offsets are intervals."""

    def __init__(self, tik, buffer, dtype, shape, offset=(0, 0), element=False):
        self.tik, self.buffer, self.dtype, self.shape = tik, buffer, dtype, tuple(shape)
        self.offset, self.element = offset, element

    @property
    def scope(self):
        return self.buffer.scope

    @property
    def name(self):
        return self.buffer.name

    def __getitem__(self, index):
        if self.element:
            _fail(f"{self.name}: indexing an element")
        index = index if isinstance(index, tuple) else (index,)
        if len(index) > len(self.shape):
            _fail(f"{self.name}{list(self.shape)} indexed with {len(index)} indices")
        index = index + (0,) * (len(self.shape) - len(index))
        lo = hi = 0
        stride = 1
        for position in reversed(range(len(self.shape))):
            value, dim = index[position], self.shape[position]
            if isinstance(value, slice):
                _fail(f"{self.name}: slices are not modelled by the stand-in")
            ilo, ihi = _span(value)
            self.tik.check(
                0 <= ilo and ihi < dim,
                f"out of bounds: index {position} of {self.name}{list(self.shape)} spans "
                f"[{ilo}, {ihi}], the dimension has {dim}",
            )
            lo, hi = lo + _times(ilo, stride), hi + _times(ihi, stride)
            stride *= dim
        return TensorView(self.tik, self.buffer, self.dtype, self.shape,
                          (self.offset[0] + lo, self.offset[1] + hi), element=True)

    def reshape(self, shape):
        if self.element or math.prod(shape) != math.prod(self.shape):
            _fail(f"{self.name}: reshape {list(self.shape)} -> {list(shape)}")
        return TensorView(self.tik, self.buffer, self.dtype, shape)

    def reinterpret_cast_to(self, dtype):
        if self.element:
            _fail(f"{self.name}: reinterpret_cast_to of an element")
        count = math.prod(self.shape) * BYTES[self.dtype] // BYTES[dtype]
        return TensorView(self.tik, self.buffer, dtype, (count,))

    def set_as(self, value, src_offset=None):
        if not self.element:
            _fail(f"{self.name}: set_as needs an element, e.g. tensor[i]")
        new = self.tik.value_of(value)
        self.tik.access(self, BYTES[self.dtype], "write", align=False)
        self.buffer.wrote(new if self.dtype == self.buffer.dtype else _dtype_range(self.dtype),
                          element=True)


@dataclasses.dataclass
class Frame:
    kind: str  # "loop", "if" or "stmt"
    trips: float = 1
    factor: int = 1  # 2 inside a double-buffered loop
    ub_bytes: int = 0
    dead: bool = False  # an if_scope whose condition no value satisfies


# ---- TIK ----------------------------------------------------------------------------------------


class Tik:
    def __init__(self, *args, **kwargs):
        self.frames: list[Frame] = [Frame("stmt")]  # the kernel's top level
        self.scalars: list[Scalar] = []
        self.envelopes = _STATE.envelopes
        self.peak = 0
        self.built = None
        self.slack_reads: list[tuple[Buffer, Buffer]] = []  # (GM read past its end, UB dst)
        _STATE.last_tik = self

    # ---- checks -----------------------------------------------------------------------------

    def check(self, condition, message):
        if not condition and not any(frame.dead for frame in self.frames):
            _fail(message)

    def value_of(self, value):
        """The range of a value being stored: a constant, an expression or a tensor element."""
        if isinstance(value, TensorView):
            return self.read(value)
        return _span(value)

    def read(self, view):
        if not view.element:
            _fail(f"{view.name}: a whole tensor used as a scalar value")
        self.access(view, BYTES[view.dtype], "read", align=False)
        return self._values(view)

    def _values(self, view):
        buffer = view.buffer
        self.check(buffer.values is not None,
                   f"read of UB tensor {buffer.name} before anything was written to it")
        if view.dtype == buffer.dtype and buffer.values is not None:
            return buffer.values
        if view.dtype not in FLOATS and buffer.index_values is not None:
            return buffer.index_values
        return _dtype_range(view.dtype)

    def access(self, view, nbytes, what, align=True):
        """Check ``nbytes`` from ``view``'s start (every start its offset interval allows)."""
        buffer, size = view.buffer, BYTES[view.dtype]
        start_lo, start_hi = view.offset[0] * size, view.offset[1] * size
        end = start_hi + nbytes
        limit = buffer.nbytes
        if buffer.scope == "gm" and buffer.nbytes < BLOCK:
            limit = BLOCK  # a tensor smaller than a block moves as the block that covers it
        self.check(
            start_lo >= 0 and end <= limit,
            f"out of bounds: {what} of bytes [{start_lo}, {end}) of {buffer.name} "
            f"({buffer.dtype}{list(buffer.shape)}, {buffer.nbytes} bytes)",
        )
        if align and buffer.scope == "ubuf" and start_lo == start_hi:
            self.check(start_lo % BLOCK == 0,
                       f"{buffer.name}: UB operand at byte {start_lo}, not on a 32-byte block")

    def _source(self, view, nbytes):
        if view.scope == "ubuf":
            self._values(view)  # the read-before-write check
        self.access(view, nbytes, "read")

    # ---- declarations and control flow ------------------------------------------------------

    def Tensor(self, dtype, shape, scope, name, enable_buffer_reuse=False):  # noqa: N802
        if dtype not in BYTES or not all(isinstance(d, int) and d > 0 for d in shape):
            _fail(f"Tensor {name}: dtype {dtype}, shape {shape}")
        if scope not in ("gm", "ubuf"):
            _fail(f"Tensor {name}: scope {scope}")
        buffer = Buffer(name, dtype, shape, scope)
        if scope == "ubuf":
            self.frames[-1].ub_bytes += buffer.nbytes * self.frames[-1].factor
            self.peak = max(self.peak, sum(frame.ub_bytes for frame in self.frames))
            if self.peak > SOC_SPEC["UB_SIZE"]:
                _fail(f"UB overflow: {self.peak} bytes")
        return TensorView(self, buffer, dtype, shape)

    def Scalar(self, dtype="int64", name="scalar", init_value=None):  # noqa: N802
        return Scalar(self, dtype, name, init_value)

    @contextlib.contextmanager
    def _scope(self, kind, trips=1, factor=1, narrowing=()):
        frame = Frame(kind, trips, self.frames[-1].factor * factor)
        for expr, (lo, hi) in narrowing:
            expr._narrowed.append((lo, hi))
            nlo, nhi = expr.bounds
            frame.dead = frame.dead or nlo > nhi
        self.frames.append(frame)
        try:
            yield frame
        finally:
            self.frames.pop()
            for expr, _ in narrowing:
                expr._narrowed.pop()

    @contextlib.contextmanager
    def for_range(self, begin, end, name="i", thread_num=1, thread_type="whole", block_num=1,
                  dtype="int32", for_type="serial"):
        if thread_num not in (1, 2) or (isinstance(block_num, int) and block_num < 1):
            _fail(f"for_range thread_num={thread_num}, block_num={block_num}")
        lo, hi = _span(begin)[0], _span(end)[1] - 1
        trips = max(0, hi - lo + 1)
        with self._scope("loop", trips, thread_num) as frame:
            frame.dead = trips == 0
            yield Expr(lo, hi)

    def if_scope(self, condition):
        if not isinstance(condition, Cond):
            _fail(f"if_scope takes a TIK condition, not {condition!r}")
        return self._scope("if", narrowing=condition.narrowing())

    def new_stmt_scope(self, disable_sync=False):
        return self._scope("stmt")

    def BuildCCE(self, kernel_name, inputs, outputs, output_files_path=None,  # noqa: N802
                 enable_l2=False, config=None, flowtable=None):
        if not all(t.scope == "gm" and not t.element for t in (*inputs, *outputs)):
            _fail("BuildCCE takes whole GM tensors")
        if self.slack_reads and True in _supported("tik.scalar_from_gm"):
            gm, _ = self.slack_reads[0]
            _fail(f"read past the end of {gm.name} ({gm.nbytes} bytes) on {_STATE.soc}, which "
                  "reads GM element by element (Scalar.set_as): read it that way")
        self.built = (kernel_name, len(inputs), len(outputs))

    # ---- data movement ----------------------------------------------------------------------

    def data_move(self, dst, src, sid, nburst, burst, src_stride, dst_stride, *args, **kwargs):
        if dst.dtype != src.dtype:
            _fail(f"data_move {src.dtype} -> {dst.dtype}")
        if {dst.scope, src.scope} not in ({"gm", "ubuf"}, {"ubuf"}):
            _fail(f"data_move {src.scope} -> {dst.scope}")
        counts = {"nburst": (nburst, 1, MAX_NBURST), "burst": (burst, 1, MAX_BURST),
                  "src_stride": (src_stride, 0, MAX_GAP), "dst_stride": (dst_stride, 0, MAX_GAP)}
        for label, (value, low, high) in counts.items():
            lo, hi = _span(value)
            if not low <= lo <= hi <= high:
                _fail(f"data_move {label} spans [{lo}, {hi}], allowed [{low}, {high}]")
        bursts, length = _top(nburst), _top(burst)
        read = ((bursts - 1) * (length + _top(src_stride)) + length) * BLOCK
        written = ((bursts - 1) * (length + _top(dst_stride)) + length) * BLOCK
        self._source(src, read)
        self.access(dst, written, "write")
        if self._past_end(src, read):
            self.slack_reads.append((src.buffer, dst.buffer))
        if self._past_end(dst, written):
            self.check(src.buffer.loaded_from is dst.buffer,
                       f"write past the end of {dst.name} ({dst.buffer.nbytes} bytes) from "
                       f"{src.name}, which was not read from {dst.name}: the bytes past the end "
                       "must be written back as they were (read-modify-write)")
            self.slack_reads = [(gm, ub) for gm, ub in self.slack_reads
                                if not (gm is dst.buffer and ub is src.buffer)]
        dst.buffer.wrote(self._moved(src))
        dst.buffer.loaded_from = src.buffer if src.scope == "gm" else None

    @staticmethod
    def _past_end(view, nbytes):
        return view.scope == "gm" and view.offset[1] * BYTES[view.dtype] + nbytes > (
            view.buffer.nbytes)

    def _moved(self, src):
        return _dtype_range(src.dtype) if src.scope == "gm" else self._values(src)

    # ---- vector instructions ----------------------------------------------------------------

    def _vector(self, mask, repeat_times, *strides, dtypes):
        lanes = REPEAT_BYTES // max(BYTES[d] for d in dtypes)
        if not (isinstance(mask, int) and 1 <= mask <= lanes):
            _fail(f"mask {mask!r}: 1..{lanes} lanes for {'/'.join(sorted(set(dtypes)))}")
        lo, hi = _span(repeat_times)
        if not 1 <= lo <= hi <= MAX_REPEAT:
            _fail(f"repeat_times spans [{lo}, {hi}], allowed [1, {MAX_REPEAT}]")
        for stride in strides:
            slo, shi = _span(stride)
            if not 0 <= slo <= shi <= MAX_STRIDE:
                _fail(f"stride spans [{slo}, {shi}], allowed [0, {MAX_STRIDE}]")

    @staticmethod
    def _extent(mask, repeat_times, rep_stride, size, blk_stride=1):
        """Bytes from an operand's start to the end of the last lane it touches."""
        lane_bytes = mask * size
        blocks = math.ceil(lane_bytes / BLOCK)
        last = lane_bytes - (blocks - 1) * BLOCK
        return ((_top(repeat_times) - 1) * _top(rep_stride) * BLOCK
                + (blocks - 1) * _top(blk_stride) * BLOCK + last)

    def _operands(self, mask, repeat_times, dst, dst_rep, sources):
        """Check the sources (view, rep stride) and the destination; mark it written."""
        for view, rep in sources:
            self._in_ub(view)
            self._source(view, self._extent(mask, repeat_times, rep, BYTES[view.dtype]))
        self._in_ub(dst)
        self.access(dst, self._extent(mask, repeat_times, dst_rep, BYTES[dst.dtype]), "write")

    @staticmethod
    def _in_ub(view):
        if view.scope != "ubuf":
            _fail(f"{view.name}: vector operands must be in the UB")

    @staticmethod
    def _same_dtype(*views):
        dtypes = {view.dtype for view in views}
        if len(dtypes) != 1:
            _fail(f"vector operands of different dtypes: {sorted(dtypes)}")
        return dtypes.pop()

    def vec_dup(self, mask, dst, scalar, repeat_times, dst_rep_stride):
        self._vector(mask, repeat_times, dst_rep_stride, dtypes=(dst.dtype,))
        self._operands(mask, repeat_times, dst, dst_rep_stride, ())
        dst.buffer.wrote(_span(scalar))

    def _binary(self, mask, dst, src0, src1, repeat_times, dst_rep_stride, src0_rep_stride,
                src1_rep_stride):
        dtype = self._same_dtype(dst, src0, src1)
        self._vector(mask, repeat_times, dst_rep_stride, src0_rep_stride, src1_rep_stride,
                     dtypes=(dtype,))
        self._operands(mask, repeat_times, dst, dst_rep_stride,
                       ((src0, src0_rep_stride), (src1, src1_rep_stride)))
        dst.buffer.wrote(_dtype_range(dtype))

    vec_add = vec_sub = vec_mul = vec_div = vec_max = vec_min = _binary

    def _scalar(self, mask, dst, src, scalar, repeat_times, dst_rep_stride, src_rep_stride,
                mask_mode="normal"):
        dtype = self._same_dtype(dst, src)
        _span(scalar)
        self._vector(mask, repeat_times, dst_rep_stride, src_rep_stride, dtypes=(dtype,))
        self._operands(mask, repeat_times, dst, dst_rep_stride, ((src, src_rep_stride),))
        dst.buffer.wrote(_dtype_range(dtype))

    vec_adds = vec_muls = vec_maxs = vec_mins = _scalar

    def vec_conv(self, mask, round_mode, dst, src, repeat_times, dst_rep_stride, src_rep_stride,
                 deqscale=None, ldst_high_half=False):
        if round_mode not in ("", "none", "round", "floor", "ceil", "away-zero", "to-zero",
                              "odd"):
            _fail(f"vec_conv round_mode {round_mode!r}")
        self._vector(mask, repeat_times, dst_rep_stride, src_rep_stride,
                     dtypes=(dst.dtype, src.dtype))
        self._operands(mask, repeat_times, dst, dst_rep_stride, ((src, src_rep_stride),))
        lo, hi = self._values(src)
        if dst.dtype not in FLOATS:
            lo, hi = math.floor(lo) if lo != -INF else lo, math.ceil(hi) if hi != INF else hi
        dst.buffer.wrote((lo, hi))

    def _compare(self, dst, src0, src1, repeat_times, src0_rep_stride, src1_rep_stride):
        dtype = self._same_dtype(src0, src1)
        if dst.dtype not in ("uint16", "uint8", "uint32", "uint64"):
            _fail(f"compare result {dst.name} must be an unsigned mask tensor, not {dst.dtype}")
        lanes = REPEAT_BYTES // BYTES[dtype]
        self._vector(lanes, repeat_times, src0_rep_stride, src1_rep_stride, dtypes=(dtype,))
        for view, rep in ((src0, src0_rep_stride), (src1, src1_rep_stride)):
            self._in_ub(view)
            self._source(view, self._extent(lanes, repeat_times, rep, BYTES[dtype]))
        self._in_ub(dst)
        self.access(dst, _top(repeat_times) * lanes // 8, "write")  # one bit per lane
        dst.buffer.wrote(_dtype_range(dst.dtype))

    vec_cmpv_gt = vec_cmpv_eq = vec_cmpv_lt = _compare

    def vec_sel(self, mask, mode, dst, sel, src0, src1, repeat_times, dst_rep_stride=0,
                src0_rep_stride=0, src1_rep_stride=0):
        if mode not in _supported("tik.vec_sel.mode"):
            _fail(f"vec_sel mode {mode} is not supported on {_STATE.soc}")
        if mode == 1:
            dtype = self._same_dtype(dst, src0)
            sources, other = ((src0, src0_rep_stride),), _span(src1)
        else:
            dtype = self._same_dtype(dst, src0, src1)
            sources = ((src0, src0_rep_stride), (src1, src1_rep_stride))
            other = None
        if dtype not in _supported("tik.vec_sel.dtype"):
            _fail(f"vec_sel on {dtype} is not supported on {_STATE.soc}")
        if sel.dtype not in ("uint8", "uint16", "uint32", "uint64"):
            _fail(f"vec_sel sel {sel.name} must be an unsigned mask tensor, not {sel.dtype}")
        self._vector(mask, repeat_times, dst_rep_stride, src0_rep_stride, src1_rep_stride,
                     dtypes=(dtype,))
        lanes = REPEAT_BYTES // BYTES[dtype]
        # mode 0 reads the first repeat's bits every repeat; modes 1 and 2 consume them in turn
        self._source(sel, lanes // 8 if mode == 0 else _top(repeat_times) * lanes // 8)
        self._operands(mask, repeat_times, dst, dst_rep_stride, sources)
        values = [self._values(view) for view, _ in sources] + ([other] if other else [])
        for value in values:
            dst.buffer.wrote(value)

    def vec_reduce_max(self, mask, dst, src, work_tensor, repeat_times, src_rep_stride,
                       cal_index=False):
        dtype = self._same_dtype(dst, src, work_tensor)
        if dtype not in _supported("tik.vec_reduce_max"):
            _fail(f"vec_reduce_max on {dtype} is not supported on {_STATE.soc}")
        self._vector(mask, repeat_times, src_rep_stride, dtypes=(dtype,))
        for view in (dst, src, work_tensor):
            self._in_ub(view)
        self._source(src, self._extent(mask, repeat_times, src_rep_stride, BYTES[dtype]))
        # [INFERENCE] the page's work_tensor formula starts from the first round's 2 values per
        # repeat (value, index); the stand-in checks that lower bound.
        self.access(work_tensor, 2 * _top(repeat_times) * BYTES[dtype], "write")
        size = BYTES[dtype]
        if dst.offset[0] * size % 4:
            _fail(f"vec_reduce_max dst {dst.name} must start on 4 bytes")
        self.access(dst, (2 if cal_index else 1) * size, "write", align=False)
        dst.buffer.wrote(_dtype_range(dtype))
        if cal_index:
            reduced = (_top(repeat_times) - 1) * _top(src_rep_stride) * BLOCK // size + mask
            dst.buffer.index_values = (0, reduced - 1)

    def _block_strided(self, mask, dst, src0, src1, repeat_times, dst_blk_stride,
                       src0_blk_stride, src1_blk_stride, dst_rep_stride, src0_rep_stride,
                       src1_rep_stride, stride_unit=0):
        dtype = self._same_dtype(dst, src0, src1)
        self._vector(mask, repeat_times, dst_blk_stride, src0_blk_stride, src1_blk_stride,
                     dst_rep_stride, src0_rep_stride, src1_rep_stride, dtypes=(dtype,))
        size = BYTES[dtype]
        for view, blk, rep in ((src0, src0_blk_stride, src0_rep_stride),
                               (src1, src1_blk_stride, src1_rep_stride)):
            self._in_ub(view)
            self._source(view, self._extent(mask, repeat_times, rep, size, blk))
        self._in_ub(dst)
        self.access(dst, self._extent(mask, repeat_times, dst_rep_stride, size, dst_blk_stride),
                    "write")
        dst.buffer.wrote(_dtype_range(dtype))

    def vmla(self, mask, dst, src0, src1, repeat_times, dst_blk_stride, src0_blk_stride,
             src1_blk_stride, dst_rep_stride, src0_rep_stride, src1_rep_stride, stride_unit=0):
        self._values(dst)  # dst = src0 * src1 + dst: the accumulator is read too
        self._block_strided(mask, dst, src0, src1, repeat_times, dst_blk_stride,
                            src0_blk_stride, src1_blk_stride, dst_rep_stride, src0_rep_stride,
                            src1_rep_stride, stride_unit)

    vadd = vmul = _block_strided


def _all(*conditions):
    if not all(isinstance(c, Cond) for c in conditions):
        _fail("tik.all takes TIK conditions")
    return Cond([term for c in conditions for term in c.terms])


def run(entry, *args, **kwargs):
    """Build a kernel twice (see the module docstring); the second build's result."""
    _STATE.envelopes = None
    try:
        entry(*args, **kwargs)
        learned = _STATE.last_tik
        if learned is not None:
            _STATE.envelopes = [s.history if s.carried else None for s in learned.scalars]
        return entry(*args, **kwargs)
    finally:
        _STATE.envelopes = None


# ---- TBE DSL --------------------------------------------------------------------------------


class _Compute:
    """tvm/DSL tensors: each DSL call checks its operands and returns a new tensor."""

    def __init__(self, dtype):
        self.dtype = dtype


def _unary(x, *args):
    if not isinstance(x, _Compute):
        _fail(f"DSL operand {x!r}")
    return _Compute(x.dtype)


def _vexp(x):
    _unary(x)
    if x.dtype not in _supported("tbe.dsl.vexp"):
        _fail(f"tbe.dsl.vexp on {x.dtype} is not supported on {_STATE.soc}")
    return _Compute(x.dtype)


def _with_scalar(x, value):
    if not (isinstance(x, _Compute) and isinstance(value, (_Compute, int, float))):
        _fail(f"DSL scalar operation on {x!r}, {value!r}")
    if isinstance(value, _Compute) and value.dtype != x.dtype:
        _fail(f"DSL scalar of {value.dtype} with a {x.dtype} tensor")
    return _Compute(x.dtype)


def _binary_dsl(a, b):
    if not (isinstance(a, _Compute) and isinstance(b, _Compute) and a.dtype == b.dtype):
        _fail(f"DSL operands of different dtypes: {a.dtype}, {b.dtype}")
    return _Compute(a.dtype)


def _api_check_support(api, dtype=""):
    if api not in _DEFAULTS:
        _fail(f"api_check_support({api!r}) is not modelled by the stand-in")
    return dtype in _supported(api)


def _soc_spec(key):
    if key in ("SOC_VERSION", "FULL_SOC_VERSION"):
        return _STATE.soc
    if key == "SHORT_SOC_VERSION":
        return "Ascend" + SOCS[_STATE.soc].removeprefix("ascend").upper()
    return SOC_SPEC[key]


def install(monkeypatch, soc: str = "Ascend310B4") -> dict:
    """Put the fake ``tbe`` (and its submodules) in ``sys.modules`` for ``soc``; build records."""
    if soc not in SOCS:
        raise ValueError(f"the stand-in knows {', '.join(SOCS)}, not {soc}")
    monkeypatch.setattr(_STATE, "soc", soc)
    monkeypatch.setattr(_STATE, "envelopes", None)
    records: dict = {}
    tik = types.SimpleNamespace(Tik=Tik, all=_all, scope_gm="gm", scope_ubuf="ubuf")

    def build(schedule, config):
        records["dsl"] = config

    def cast_to(x, dtype):
        _unary(x)
        return _Compute(dtype)

    dsl = types.SimpleNamespace(
        cast_to=cast_to, vmuls=_with_scalar, vadds=_with_scalar, vmins=_with_scalar,
        vmaxs=_with_scalar, vexp=_vexp, vdiv=_binary_dsl, vmul=_binary_dsl, vadd=_binary_dsl,
        auto_schedule=lambda result: "schedule", build=build,
    )
    tvm = types.SimpleNamespace(
        const=lambda value, dtype: _Compute(dtype),
        placeholder=lambda shape, name, dtype: _Compute(dtype),
        target=types.SimpleNamespace(cce=contextlib.nullcontext),
    )
    para_check = types.SimpleNamespace(
        check_op_params=lambda *checks: (lambda function: function),
        check_shape=lambda shape, param_name=None: None,
        check_dtype=lambda dtype, allowed, param_name=None: None,
        **{name: name for name in (
            "REQUIRED_INPUT", "OPTION_INPUT", "REQUIRED_OUTPUT", "REQUIRED_ATTR_INT",
            "OPTION_ATTR_INT", "OPTION_ATTR_FLOAT", "OPTION_ATTR_LIST_INT", "KERNEL_NAME")},
    )
    platform = types.SimpleNamespace(get_soc_spec=_soc_spec, api_check_support=_api_check_support)
    register = types.SimpleNamespace(
        register_op_compute=lambda name, op_mode="dynamic", support_fusion=True: (lambda f: f)
    )
    modules = {
        "tbe": {"tik": tik, "tvm": tvm},
        "tbe.dsl": vars(dsl),
        "tbe.tik": vars(tik),
        "tbe.common": {},
        "tbe.common.platform": vars(platform),
        "tbe.common.register": vars(register),
        "tbe.common.utils": {"para_check": para_check},
    }
    for name, attributes in modules.items():
        module = types.ModuleType(name)
        vars(module).update(attributes)
        monkeypatch.setitem(sys.modules, name, module)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    return records
