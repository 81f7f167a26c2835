"""EdgefuseSwish TBE DSL kernel: y = x * sigmoid(alpha * x) = x / (1 + exp(-alpha * x)).

Runs inside ATC's TBE compiler (CANN toolkit), never in edgefuse's own process; edgefuse only
checks that this file compiles as Python and that its signature matches the op's OpSpec.

Written like CANN's built-in swish (impl/dynamic/swish.py): exp and division in float32 where the
vector unit supports float32 exp, so float16 inputs do not lose the small gate values near
x = -10; for very negative x exp overflows to inf and the quotient is the correct -0.
``support_fusion=True`` lets GE fuse it into the UB of the preceding convolution's output.
"""

import functools
import operator

import tbe.common.platform as tbe_platform
import tbe.dsl as tbe
from tbe import tvm
from tbe.common.register import register_op_compute
from tbe.common.utils import para_check

SUPPORTED_DTYPES = ("float16", "float32")


@register_op_compute("EdgefuseSwish", op_mode="static", support_fusion=True)
def edgefuse_swish_compute(x, y, alpha=1.0, kernel_name="edgefuse_swish"):
    """x / (1 + exp(-alpha * x)) on a TVM tensor; y (the output dict) is unused by the compute."""
    dtype = x.dtype
    work = x
    if dtype == "float16" and tbe_platform.api_check_support("tbe.dsl.vexp", "float32"):
        work = tbe.cast_to(x, "float32")
    scaled = tbe.vmuls(work, tvm.const(-alpha, dtype=work.dtype))
    denominator = tbe.vadds(tbe.vexp(scaled), tvm.const(1.0, dtype=work.dtype))
    result = tbe.vdiv(work, denominator)
    if result.dtype != dtype:
        result = tbe.cast_to(result, dtype)
    return result


@para_check.check_op_params(
    para_check.REQUIRED_INPUT,
    para_check.REQUIRED_OUTPUT,
    para_check.OPTION_ATTR_FLOAT,
    para_check.KERNEL_NAME,
)
def edgefuse_swish(x, y, alpha=1.0, kernel_name="edgefuse_swish"):
    """Build the kernel for one static shape; x and y are GE tensor dicts (shape, dtype, format).

    The op is elementwise, so the kernel runs on the flattened tensor whatever the format
    (ND, NCHW, NHWC or NC1HWC0): one schedule, no format-specific code.
    """
    shape = x.get("shape")
    dtype = x.get("dtype").lower()
    para_check.check_shape(shape, param_name="x")
    para_check.check_dtype(dtype, SUPPORTED_DTYPES, param_name="x")
    flat = (functools.reduce(operator.mul, shape, 1),)
    data = tvm.placeholder(flat, name="data_x", dtype=dtype)
    with tvm.target.cce():
        result = edgefuse_swish_compute(data, y, alpha, kernel_name)
        schedule = tbe.auto_schedule(result)
    tbe.build(schedule, {"name": kernel_name, "tensor_list": [data, result]})
