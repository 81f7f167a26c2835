"""EdgefuseSwish TBE DSL kernel: y = x * sigmoid(alpha * x) = x / (1 + exp(-alpha * x)).

Runs inside ATC's TBE compiler (CANN toolkit), never in edgefuse's own process; edgefuse only
checks that this file compiles as Python and that its signature matches the op's OpSpec.

Written like CANN's built-in swish (impl/swish.py, ``swish_normal``): it asks
``tbe_platform.api_check_support("tbe.dsl.vexp", "float32")`` and computes

- where float32 exp exists: exp and division in float32, so float16 inputs do not lose the small
  gate values near x = -10; for very negative x exp overflows to inf and the quotient is the
  correct -0;
- where it does not -- Ascend310 (Atlas 200/300/500 inference) has float16 vexp only (DSL vexp
  page, hiascend canncommercial/80RC2 apiref/opdevgapi/atlaste_07_0012.html) -- the exponent is
  clamped to ln(65504) and taken in float16, everything else stays in the input's dtype (float32
  division is available there; CANN's kernel divides in float32 on every chip).

``support_fusion=True`` lets GE fuse it into the UB of the preceding convolution's output.
"""

import functools
import math
import operator

import tbe.common.platform as tbe_platform
import tbe.dsl as tbe
from tbe import tvm
from tbe.common.register import register_op_compute
from tbe.common.utils import para_check

SUPPORTED_DTYPES = ("float16", "float32")
# exp(-alpha * x) in float16 overflows past this exponent; CANN's swish clamps to it as well
FLOAT16_EXP_LIMIT = int(math.log(65504.0) * 1000) / 1000


@register_op_compute("EdgefuseSwish", op_mode="static", support_fusion=True)
def edgefuse_swish_compute(x, y, alpha=1.0, kernel_name="edgefuse_swish"):
    """x / (1 + exp(-alpha * x)) on a TVM tensor; y (the output dict) is unused by the compute."""
    dtype = x.dtype
    float32_exp = tbe_platform.api_check_support("tbe.dsl.vexp", "float32")
    work = tbe.cast_to(x, "float32") if dtype == "float16" and float32_exp else x
    scaled = tbe.vmuls(work, tvm.const(-alpha, dtype=work.dtype))
    if work.dtype == "float32" and not float32_exp:
        clamped = tbe.vmins(scaled, tvm.const(FLOAT16_EXP_LIMIT, dtype="float32"))
        exp = tbe.cast_to(tbe.vexp(tbe.cast_to(clamped, "float16")), "float32")
    else:
        exp = tbe.vexp(scaled)
    denominator = tbe.vadds(exp, tvm.const(1.0, dtype=work.dtype))
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
