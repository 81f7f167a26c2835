"""EdgefuseDepthwiseConv2d TIK kernel: a depthwise convolution on NC1HWC0 float16 activations.

Runs inside ATC's TBE compiler (CANN toolkit), never in edgefuse's own process; edgefuse only
checks that this file compiles as Python and that its signature matches the op's OpSpec.

Layout and why it is fast (a claim to be measured on a board; see the op's spec.py):

- ``x`` is ``[N, C1, H, W, C0]``: the 16 channels of one C0 block of one pixel are one 32-byte
  block, and a row of W pixels is W consecutive blocks, so an input row moves from global memory
  to the unified buffer (UB) as one burst.
- A depthwise tap multiplies every pixel's 16 channels by the same 16 weights. ``vmla`` with a
  weight block stride of 0 broadcasts the weight block over the 8 blocks of a repeat, so one
  instruction does 8 output pixels x 16 channels = 128 multiply-adds; the input block stride is
  the convolution stride, so strided convolutions need no gather.
- Work is split over AI cores by (n, c1) block; inside a block the output-row loop is double
  buffered (``thread_num=2``): the rows for output row r+1 move in while row r computes.

Accumulation is in float16 like the vector path of CANN's own fp16 kernels; padding channels of
the last C0 block get zero weights and bias, so they stay zero. Rows wider than the UB budget
are refused at compile time (column tiling is not implemented).
"""

import tbe.common.platform as tbe_platform
from tbe import tik
from tbe.common.utils import para_check

DTYPE = "float16"
C0 = 16  # channels per NC1HWC0 block for float16
PIXELS_PER_REPEAT = 8  # a vector repeat covers 8 blocks of 32 bytes
VECTOR_MASK = C0 * PIXELS_PER_REPEAT  # 128 float16 lanes
BYTES = 2
BLOCK_BYTES = 32
MAX_REPEAT = 255
UB_RESERVED_BYTES = 8 * 1024  # left to the compiler for scalars and alignment
NO_SCALAR_GM_READ = ("Ascend310", "Ascend910")  # SHORT_SOC_VERSION values, see _load_short


def _ceil_div(a, b):
    return (a + b - 1) // b


class DepthwiseConv2d:
    """One compiled kernel: static shapes, strides, pads and dilations."""

    def __init__(self, x, weights, bias, y, strides, pads, dilations):
        self.batch, self.c1, self.height, self.width, c0 = x.get("shape")
        self.channels, _, self.kh, self.kw = weights.get("shape")
        self.sh, self.sw = strides
        self.dh, self.dw = dilations
        self.pt, self.pl, self.pb, self.pr = pads
        self.out_h = (self.height + self.pt + self.pb - self.dh * (self.kh - 1) - 1) // self.sh + 1
        self.out_w = (self.width + self.pl + self.pr - self.dw * (self.kw - 1) - 1) // self.sw + 1
        self.taps = self.kh * self.kw
        self.repeats = _ceil_div(self.out_w, PIXELS_PER_REPEAT)
        # Pixels per padded input row: the last repeat of the last tap reads this far.
        reach = (self.repeats * PIXELS_PER_REPEAT - 1) * self.sw + (self.kw - 1) * self.dw + 1
        self.row_pixels = max(self.pl + self.width + self.pr, reach)
        self._check(c0, y)

        self.tik = tik.Tik()
        self.core_num = tbe_platform.get_soc_spec("CORE_NUM")
        self.soc = tbe_platform.get_soc_spec("SHORT_SOC_VERSION")
        self.x_gm = self.tik.Tensor(DTYPE, tuple(x.get("shape")), name="x_gm", scope=tik.scope_gm)
        self.w_gm = self.tik.Tensor(
            DTYPE, (self.channels * self.taps,), name="w_gm", scope=tik.scope_gm
        )
        self.b_gm = None
        if bias is not None:
            self.b_gm = self.tik.Tensor(DTYPE, (self.channels,), name="b_gm", scope=tik.scope_gm)
        self.y_gm = self.tik.Tensor(
            DTYPE, (self.batch, self.c1, self.out_h, self.out_w, C0), name="y_gm",
            scope=tik.scope_gm,
        )

    def _check(self, c0, y):
        if c0 != C0:
            raise RuntimeError(f"x must be NC1HWC0 float16 with C0={C0}, got C0={c0}")
        if _ceil_div(self.channels, C0) != self.c1:
            raise RuntimeError(f"filter has {self.channels} channels but x has C1={self.c1}")
        if self.out_h <= 0 or self.out_w <= 0:
            raise RuntimeError("the kernel is larger than the padded input")
        if self.repeats > MAX_REPEAT or PIXELS_PER_REPEAT * self.sw > MAX_REPEAT:
            raise RuntimeError("output rows wider than 2040 pixels or strides above 31")
        expected = [self.batch, self.c1, self.out_h, self.out_w, C0]
        if list(y.get("shape")) != expected:
            raise RuntimeError(f"y shape {list(y.get('shape'))} != computed {expected}")
        ub_bytes = tbe_platform.get_soc_spec("UB_SIZE") - UB_RESERVED_BYTES
        if self._ub_bytes() > ub_bytes:
            raise RuntimeError(
                f"a {self.width}-pixel row needs {self._ub_bytes()} bytes of UB, "
                f"{ub_bytes} available; column tiling is not implemented"
            )

    def _ub_bytes(self):
        per_row = (self.kh * self.row_pixels + self.repeats * PIXELS_PER_REPEAT) * C0 * BYTES
        weights = (_ceil_div(self.channels * self.taps, C0) + self.taps + 2) * C0 * BYTES
        return 2 * per_row + weights + _ceil_div(self.channels, C0) * C0 * BYTES

    # ---- kernel body -------------------------------------------------------------------------

    def build(self, kernel_name):
        blocks = self.batch * self.c1
        cores = min(blocks, self.core_num)
        per_core = _ceil_div(blocks, cores)
        with self.tik.for_range(0, cores, block_num=cores) as core:
            all_weights, all_bias = self._load_parameters()
            with self.tik.for_range(0, per_core) as step:
                block = core * per_core + step
                with self.tik.if_scope(block < blocks):
                    self._convolve_block(block // self.c1, block % self.c1, all_weights, all_bias)
        inputs = [self.x_gm, self.w_gm] + ([self.b_gm] if self.b_gm is not None else [])
        self.tik.BuildCCE(kernel_name=kernel_name, inputs=inputs, outputs=[self.y_gm])
        return self.tik

    def _load_parameters(self):
        """Every channel's weights (and bias) once per core: a few KB, read as one burst."""
        weight_count = self.channels * self.taps
        all_weights = self.tik.Tensor(DTYPE, (_ceil_div(weight_count, C0) * C0,), name="all_w",
                                      scope=tik.scope_ubuf)
        self._load(all_weights, self.w_gm, weight_count)
        bias_elems = _ceil_div(self.channels, C0) * C0
        all_bias = self.tik.Tensor(DTYPE, (bias_elems,), name="all_b", scope=tik.scope_ubuf)
        self._zero(all_bias, bias_elems)
        if self.b_gm is not None:
            self._load(all_bias, self.b_gm, self.channels)
        return all_weights, all_bias

    def _load(self, dst, src, count):
        """``src[0:count]`` (a whole GM tensor) into ``dst`` without reading past ``src``.

        data_move moves whole 32-byte blocks: the full blocks move as one burst, and a partial
        last block is read as the block that ends at ``src``'s end (GM addresses need no
        alignment; UB ones do) into a scratch block, whose last elements are then copied over.
        A tensor smaller than one block (fewer than 16 bias channels or weights) has no such
        block: ``_load_short``.
        """
        full, tail = divmod(count, C0)
        if full == 0:
            self._load_short(dst, src, count)
            return
        self.tik.data_move(dst, src, 0, 1, full * C0 * BYTES // BLOCK_BYTES, 0, 0)
        if tail:
            last = self.tik.Tensor(DTYPE, (C0,), name="last_block", scope=tik.scope_ubuf)
            self.tik.data_move(last, src[count - C0], 0, 1, 1, 0, 0)
            for k in range(tail):
                dst[full * C0 + k].set_as(last[C0 - tail + k])

    def _load_short(self, dst, src, count):
        """``src[0:count]``, fewer elements than one block, into ``dst``.

        Where a Scalar can read GM (Atlas 200I/500 A2, Atlas inference, Atlas A2: TIK set_as,
        hiascend CANNCommunityEdition/900 atlastikapi_07_0012), element by element, nothing
        past ``src`` read. Ascend310 and Ascend910 cannot: the block that covers ``src`` is read
        into a scratch block (CANN pads every device memory segment by 32 bytes,
        aclrtMallocAlign32, canncommercial/80RC3 aclpythondevg_01_0973.html) and only its first
        ``count`` elements are copied, so what lies past ``src`` never reaches ``dst``.
        """
        if self.soc not in NO_SCALAR_GM_READ:
            value = self.tik.Scalar(DTYPE, name="short_value")
            for k in range(count):
                value.set_as(src[k])
                dst[k].set_as(value)
            return
        short = self.tik.Tensor(DTYPE, (C0,), name="short_block", scope=tik.scope_ubuf)
        self.tik.data_move(short, src, 0, 1, 1, 0, 0)
        for k in range(count):
            dst[k].set_as(short[k])

    def _block_parameters(self, c1_index, all_weights, all_bias):
        """Weights as [taps, C0] and bias as [C0] for one channel block; absent channels are 0."""
        weights = self.tik.Tensor(DTYPE, (self.taps * C0,), name="w_blk", scope=tik.scope_ubuf)
        bias = self.tik.Tensor(DTYPE, (C0,), name="b_blk", scope=tik.scope_ubuf)
        self._zero(weights, self.taps * C0)
        self._zero(bias, C0)
        with self.tik.for_range(0, C0) as lane:
            channel = c1_index * C0 + lane
            with self.tik.if_scope(channel < self.channels):
                bias[lane].set_as(all_bias[channel])
                with self.tik.for_range(0, self.taps) as tap:
                    weights[tap * C0 + lane].set_as(all_weights[channel * self.taps + tap])
        return weights, bias

    def _convolve_block(self, n_index, c1_index, all_weights, all_bias):
        weights, bias = self._block_parameters(c1_index, all_weights, all_bias)
        with self.tik.for_range(0, self.out_h, thread_num=2) as out_row:
            in_row = self.tik.Scalar("int32", name="in_row")
            rows = self.tik.Tensor(
                DTYPE, (self.kh, self.row_pixels * C0), name="rows", scope=tik.scope_ubuf
            )
            acc = self.tik.Tensor(
                DTYPE, (self.repeats * VECTOR_MASK,), name="acc", scope=tik.scope_ubuf
            )
            self._zero(rows, self.kh * self.row_pixels * C0)
            for i in range(self.kh):
                in_row.set_as(out_row * self.sh - self.pt + i * self.dh)
                with self.tik.if_scope(tik.all(in_row >= 0, in_row < self.height)):
                    self.tik.data_move(
                        rows[i, self.pl * C0], self.x_gm[n_index, c1_index, in_row, 0, 0],
                        0, 1, self.width, 0, 0,
                    )
            # acc = bias on every pixel (block stride 0 repeats the bias block 8 times)
            self._zero(acc, self.repeats * VECTOR_MASK)
            self.tik.vadd(VECTOR_MASK, acc, acc, bias, self.repeats, 1, 1, 0, 8, 8, 0)
            for i in range(self.kh):
                for j in range(self.kw):
                    self.tik.vmla(
                        VECTOR_MASK,
                        acc,
                        rows[i, j * self.dw * C0],
                        weights[(i * self.kw + j) * C0],
                        self.repeats,
                        1, self.sw, 0,  # block strides: dst, input (= conv stride), weights
                        PIXELS_PER_REPEAT, PIXELS_PER_REPEAT * self.sw, 0,  # repeat strides
                    )
            self.tik.data_move(
                self.y_gm[n_index, c1_index, out_row, 0, 0], acc, 0, 1, self.out_w, 0, 0
            )

    def _zero(self, tensor, count):
        """Fill ``count`` float16 elements (a multiple of 16) with 0, 255 repeats at a time."""
        full, rest = divmod(count, VECTOR_MASK)
        done = 0
        while full > 0:
            repeats = min(full, MAX_REPEAT)
            self.tik.vec_dup(VECTOR_MASK, tensor.reshape((count,))[done], 0, repeats, 8)
            done += repeats * VECTOR_MASK
            full -= repeats
        if rest:
            self.tik.vec_dup(rest, tensor.reshape((count,))[done], 0, 1, 8)


@para_check.check_op_params(
    para_check.REQUIRED_INPUT,
    para_check.REQUIRED_INPUT,
    para_check.OPTION_INPUT,
    para_check.REQUIRED_OUTPUT,
    para_check.REQUIRED_ATTR_INT,
    para_check.OPTION_ATTR_LIST_INT,
    para_check.OPTION_ATTR_LIST_INT,
    para_check.OPTION_ATTR_LIST_INT,
    para_check.KERNEL_NAME,
)
def edgefuse_depthwise_conv2d(
    x,
    filter,  # the name GE passes the weights under (CANN's own conv kernels use it too)
    bias,
    y,
    channels,
    strides=(1, 1),
    pads=(0, 0, 0, 0),
    dilations=(1, 1),
    kernel_name="edgefuse_depthwise_conv2d",
):
    """Build the kernel; tensors are GE dicts (shape, dtype, format), bias may be None."""
    if x.get("dtype").lower() != DTYPE or x.get("format") != "NC1HWC0":
        raise RuntimeError("x must be float16 in NC1HWC0")
    if list(filter.get("shape"))[:2] != [channels, 1]:
        raise RuntimeError(f"filter must be [{channels}, 1, kh, kw], got {filter.get('shape')}")
    if len(strides) != 2 or len(pads) != 4 or len(dilations) != 2:
        raise RuntimeError("strides and dilations take 2 values, pads 4")
    kernel = DepthwiseConv2d(x, filter, bias, y, strides, pads, dilations)
    return kernel.build(kernel_name)
