"""A stand-in for CANN's ``tbe`` package that runs the kernels' build code on the host.

Why: the TBE kernels only run inside ATC. Executing their Python against this fake catches what
``compile()`` cannot: names that do not exist, TIK calls with the wrong number of arguments
(each fake method has the parameter list of the TIK/DSL API reference), vector operands of
mismatched dtypes, masks and repeat counts beyond one instruction, and unified-buffer use above
the chip's size (every scope's UB tensors are summed, double-buffered loops counting twice).
It checks the kernels against the API as documented; it does not prove they compute correctly.
"""

from __future__ import annotations

import contextlib
import math
import sys
import types

BYTES = {"float16": 2, "float32": 4, "int32": 4, "uint32": 4, "uint16": 2, "int64": 8}
MAX_REPEAT, MAX_STRIDE = 255, 255
SOC_SPEC = {"UB_SIZE": 248 * 1024, "CORE_NUM": 2}  # Ascend310B-like


class Expr:
    """A TIK scalar expression: arithmetic and comparisons build more expressions."""

    def _op(self, *_):
        return Expr()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _op
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _op
    __lt__ = __le__ = __gt__ = __ge__ = _op

    def __bool__(self):
        raise AssertionError("a TIK expression was used as a Python bool")


class Scalar(Expr):
    def __init__(self, dtype="int64", name="scalar", init_value=None):
        assert dtype in BYTES, dtype
        self.dtype = dtype

    def set_as(self, value, src_offset=None):
        assert isinstance(value, (Expr, int, float, TensorView)), value


class TensorView:
    """A tensor or a view of it at an offset; knows its dtype and element count."""

    def __init__(self, dtype, count, scope):
        self.dtype, self.count, self.scope = dtype, count, scope

    def __getitem__(self, index):
        return TensorView(self.dtype, self.count, self.scope)

    def reshape(self, shape):
        assert math.prod(shape) <= self.count, (shape, self.count)
        return TensorView(self.dtype, self.count, self.scope)

    def set_as(self, value, src_offset=None):
        assert isinstance(value, (Expr, int, float, TensorView)), value

    def reinterpret_cast_to(self, dtype):
        return TensorView(dtype, self.count * BYTES[self.dtype] // BYTES[dtype], self.scope)


class Tik:
    def __init__(self, *args, **kwargs):
        self.scopes = [0]  # UB bytes per open scope
        self.factor = [1]  # 2 inside a double-buffered loop
        self.peak = 0
        self.built = None

    # ---- declarations and control flow -----------------------------------------------------

    def Tensor(self, dtype, shape, scope, name, enable_buffer_reuse=False):  # noqa: N802
        assert dtype in BYTES and all(isinstance(d, int) and d > 0 for d in shape), shape
        count = math.prod(shape)
        if scope == "ubuf":
            self.scopes[-1] += count * BYTES[dtype] * self.factor[-1]
            self.peak = max(self.peak, sum(self.scopes))
            assert self.peak <= SOC_SPEC["UB_SIZE"], f"UB overflow: {self.peak} bytes"
        return TensorView(dtype, count, scope)

    def Scalar(self, dtype="int64", name="scalar", init_value=None):  # noqa: N802
        return Scalar(dtype, name, init_value)

    @contextlib.contextmanager
    def _scope(self, factor=1):
        self.scopes.append(0)
        self.factor.append(self.factor[-1] * factor)
        try:
            yield
        finally:
            self.scopes.pop()
            self.factor.pop()

    @contextlib.contextmanager
    def for_range(self, begin, end, name="i", thread_num=1, thread_type="whole", block_num=1,
                  dtype="int32", for_type="serial"):
        assert thread_num in (1, 2) and (not isinstance(block_num, int) or block_num >= 1)
        with self._scope(thread_num):
            yield Expr()

    def if_scope(self, condition):
        assert isinstance(condition, Expr), condition
        return self._scope()

    def new_stmt_scope(self, disable_sync=False):
        return self._scope()

    def BuildCCE(self, kernel_name, inputs, outputs, output_files_path=None,  # noqa: N802
                 enable_l2=False, config=None, flowtable=None):
        assert all(t.scope == "gm" for t in (*inputs, *outputs))
        self.built = (kernel_name, len(inputs), len(outputs))

    # ---- data movement and vector instructions ----------------------------------------------

    def data_move(self, dst, src, sid, nburst, burst, src_stride, dst_stride, *args, **kwargs):
        assert dst.dtype == src.dtype and {dst.scope, src.scope} == {"gm", "ubuf"}
        assert _count(nburst) >= 1 and _count(burst) >= 1

    def vec_dup(self, mask, dst, scalar, repeat_times, dst_rep_stride):
        _check_vector(mask, repeat_times, dst_rep_stride, tensors=(dst,))

    def _binary(self, mask, dst, src0, src1, repeat_times, dst_rep_stride, src0_rep_stride,
                src1_rep_stride):
        _check_vector(mask, repeat_times, dst_rep_stride, src0_rep_stride, src1_rep_stride,
                      tensors=(dst, src0, src1))

    vec_add = vec_sub = vec_mul = vec_div = vec_max = vec_min = _binary

    def _scalar(self, mask, dst, src, scalar, repeat_times, dst_rep_stride, src_rep_stride,
                mask_mode="normal"):
        _check_vector(mask, repeat_times, dst_rep_stride, src_rep_stride, tensors=(dst, src))

    vec_adds = vec_muls = vec_maxs = vec_mins = _scalar

    def vec_conv(self, mask, round_mode, dst, src, repeat_times, dst_rep_stride, src_rep_stride,
                 deqscale=None, ldst_high_half=False):
        assert round_mode in ("", "none", "round", "floor", "ceil", "away-zero", "to-zero", "odd")
        _check_vector(mask, repeat_times, dst_rep_stride, src_rep_stride, tensors=(dst,))

    def _compare(self, dst, src0, src1, repeat_times, src0_rep_stride, src1_rep_stride):
        assert dst.dtype == "uint16" and src0.dtype == src1.dtype
        _check_vector(64 if src0.dtype == "float32" else 128, repeat_times, src0_rep_stride,
                      src1_rep_stride, tensors=(src0, src1))

    vec_cmpv_gt = vec_cmpv_eq = vec_cmpv_lt = _compare

    def vec_sel(self, mask, mode, dst, sel, src0, src1, repeat_times, dst_rep_stride=0,
                src0_rep_stride=0, src1_rep_stride=0):
        assert mode in (0, 1, 2) and sel.dtype == "uint16"
        _check_vector(mask, repeat_times, dst_rep_stride, src0_rep_stride, src1_rep_stride,
                      tensors=(dst, src0, src1))

    def vec_reduce_max(self, mask, dst, src, work_tensor, repeat_times, src_rep_stride,
                       cal_index=False):
        _check_vector(mask, repeat_times, src_rep_stride, tensors=(dst, src, work_tensor))

    def _block_strided(self, mask, dst, src0, src1, repeat_times, dst_blk_stride,
                       src0_blk_stride, src1_blk_stride, dst_rep_stride, src0_rep_stride,
                       src1_rep_stride, stride_unit=0):
        _check_vector(mask, repeat_times, dst_blk_stride, src0_blk_stride, src1_blk_stride,
                      dst_rep_stride, src0_rep_stride, src1_rep_stride, tensors=(dst, src0, src1))

    vadd = vmla = vmul = _block_strided


def _count(value):
    return value if isinstance(value, int) else 1


def _check_vector(mask, repeat_times, *strides, tensors):
    dtypes = {t.dtype for t in tensors}
    assert len(dtypes) == 1, f"vector operands of different dtypes: {dtypes}"
    assert all(t.scope == "ubuf" for t in tensors), "vector operands must be in the UB"
    lanes = 256 // BYTES[dtypes.pop()]
    assert isinstance(mask, int) and 1 <= mask <= lanes, f"mask {mask} > {lanes} lanes"
    if isinstance(repeat_times, int):
        assert 1 <= repeat_times <= MAX_REPEAT, f"repeat {repeat_times}"
    assert all(not isinstance(s, int) or 0 <= s <= MAX_STRIDE for s in strides), strides


def _all(*conditions):
    assert all(isinstance(c, Expr) for c in conditions)
    return Expr()


class _Compute:
    """tvm/DSL tensors: each DSL call checks its operands and returns a new tensor."""

    def __init__(self, dtype):
        self.dtype = dtype


def install(monkeypatch) -> dict:
    """Put the fake ``tbe`` (and its submodules) in ``sys.modules``; returns build records."""
    records: dict = {}
    tik = types.SimpleNamespace(Tik=Tik, all=_all, scope_gm="gm", scope_ubuf="ubuf")

    def unary(x, *args):
        assert isinstance(x, _Compute)
        return _Compute(x.dtype)

    def scalar_op(x, value):
        assert isinstance(x, _Compute) and isinstance(value, _Compute)
        return _Compute(x.dtype)

    def binary(a, b):
        assert isinstance(a, _Compute) and a.dtype == b.dtype, (a.dtype, b.dtype)
        return _Compute(a.dtype)

    def build(schedule, config):
        records["dsl"] = config

    dsl = types.SimpleNamespace(
        cast_to=lambda x, dtype: _Compute(dtype), vmuls=scalar_op, vadds=scalar_op, vexp=unary,
        vdiv=binary, auto_schedule=lambda result: "schedule", build=build,
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
    platform = types.SimpleNamespace(
        get_soc_spec=SOC_SPEC.__getitem__, api_check_support=lambda api, dtype: True
    )
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
