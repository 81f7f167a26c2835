"""AtcOptions: the exact argv and shell text, and every documented conflict refused up front."""

import pytest

from edgefuse.acl.atc.options import AtcOptions, shell_quote
from edgefuse.errors import InputError

pytestmark = pytest.mark.unit

BASE = dict(model="model.onnx", output="model", soc_version="Ascend310B4")


def test_static_argv_golden():
    options = AtcOptions(**BASE, input_shape={"images": (1, 3, 640, 640)})
    assert options.to_argv() == [
        "atc",
        "--framework=5",
        "--model=model.onnx",
        "--output=model",
        "--soc_version=Ascend310B4",
        "--input_shape=images:1,3,640,640",
        "--precision_mode=force_fp16",
        "--log=error",
    ]


def test_full_argv_golden_with_aipp_keep_dtype_and_batch_gears():
    options = AtcOptions(
        **BASE,
        input_shape={"data": (-1, 3, 416, 416), "img_info": (-1, 4)},
        precision_mode="allow_mix_precision",
        insert_op_conf="aipp.cfg",
        keep_dtype="keep_dtype.cfg",
        modify_mixlist="modify_mixlist.json",
        dynamic_batch_size=(1, 2, 4, 8),
    )
    assert options.to_argv()[5:] == [
        "--input_shape=data:-1,3,416,416;img_info:-1,4",
        "--dynamic_batch_size=1,2,4,8",
        "--precision_mode=allow_mix_precision",
        "--insert_op_conf=aipp.cfg",
        "--keep_dtype=keep_dtype.cfg",
        "--modify_mixlist=modify_mixlist.json",
        "--log=error",
    ]
    # The shell form double-quotes only the value that needs it, as people write it by hand.
    assert options.to_shell().splitlines() == [
        "atc \\",
        "    --framework=5 \\",
        "    --model=model.onnx \\",
        "    --output=model \\",
        "    --soc_version=Ascend310B4 \\",
        '    --input_shape="data:-1,3,416,416;img_info:-1,4" \\',
        "    --dynamic_batch_size=1,2,4,8 \\",
        "    --precision_mode=allow_mix_precision \\",
        "    --insert_op_conf=aipp.cfg \\",
        "    --keep_dtype=keep_dtype.cfg \\",
        "    --modify_mixlist=modify_mixlist.json \\",
        "    --log=error",
    ]


def test_image_size_and_dims_gears():
    image = AtcOptions(**BASE, input_shape={"x": (1, 3, -1, -1)},
                       dynamic_image_size=((416, 416), (832, 832)))
    assert "--dynamic_image_size=416,416;832,832" in image.to_argv()
    dims = AtcOptions(**BASE, input_shape={"x": (-1, 3, -1, -1)},
                      dynamic_dims=((1, 640, 640), (4, 640, 640)))
    argv = dims.to_argv()
    assert "--input_format=ND" in argv and "--dynamic_dims=1,640,640;4,640,640" in argv
    assert argv.index("--input_format=ND") < argv.index("--input_shape=x:-1,3,-1,-1")


def test_shell_quote_escapes_what_bash_would_expand():
    assert shell_quote("--model=a b.onnx") == '--model="a b.onnx"'
    assert shell_quote('--x=$HOME"`') == '--x="\\$HOME\\"\\`"'
    assert shell_quote("plain/path.onnx") == "plain/path.onnx"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(input_shape={"x": (-1, 3, 8, 8)}, dynamic_batch_size=(1, 2),
              dynamic_image_size=((8, 8), (16, 16))), "cannot be used together"),
        (dict(input_shape={"x": (-1, 3, -1, -1)}, dynamic_dims=((1, 8, 8), (2, 8, 8)),
              insert_op_conf="aipp.cfg"), "--dynamic_dims cannot be combined with AIPP"),
        (dict(input_shape={"x": (-1, 3, 8, 8)}), "no gears are given"),
        (dict(input_shape={"x": (-1, 3, 8, 8)}, dynamic_batch_size=(4,)), "between 2 and 100"),
        (dict(input_shape={"x": (-1, 3, 8, 8)}, dynamic_batch_size=tuple(range(1, 102))),
         "between 2 and 100"),
        (dict(input_shape={"x": (-1, 3, 8, 8)}, dynamic_batch_size=(1, 4096)), r"\[1, 2048\]"),
        (dict(input_shape={"x": (1, -1, 8, 8)}, dynamic_batch_size=(1, 2)), "beyond its first"),
        (dict(input_shape={"x": (1, 3, 8, 8)}, dynamic_batch_size=(1, 2)), "batch dimension"),
        (dict(input_shape={"x": (1, 3, -1, -1)}, dynamic_image_size=((8, 8), (16, 16)),
              insert_op_conf="aipp.cfg"), "source size comes from the gears"),
        (dict(input_shape={"x": (1, 3, 8, 8)}, insert_op_conf="aipp.cfg",
              aipp_size_from_gears=True), "needs --insert_op_conf and --dynamic_image_size"),
        (dict(input_shape={"x": (1, -1, 8)}, dynamic_image_size=((8, 8), (16, 16))),
         "not NCHW with -1 as H and W"),
        (dict(input_shape={"x": (-1, 3, -1, -1)}, dynamic_dims=((1, 8), (2, 8))),
         "must give 3 values"),
        (dict(input_shape={"x": (1, 3, 8, 8)}, precision_mode="must_keep_origin_dtype",
              keep_dtype="keep_dtype.cfg"), "--keep_dtype has no effect"),
        (dict(input_shape={"x": (1, 3, 8, 8)}, modify_mixlist="m.json"),
         "--modify_mixlist only applies"),
        (dict(input_shape={"x": (1, 3, 8, 8)}, precision_mode="fp16"), "unknown precision"),
        (dict(input_shape={"x": (1, 3, 8, 8)}, log="verbose"), "unknown ATC log level"),
        (dict(input_shape={"x": (1, 0, 8, 8)}), "invalid dimension"),
    ],
)
def test_conflicts_are_refused(kwargs, match):
    with pytest.raises(InputError, match=match):
        AtcOptions(**BASE, **kwargs)


@pytest.mark.parametrize("mode", ["force_fp32", "cube_fp16in_fp32out", "force_fp16"])
def test_keep_dtype_is_accepted_where_atc_applies_it(mode):
    argv = AtcOptions(**BASE, input_shape={"x": (1, 3, 8, 8)}, precision_mode=mode,
                      keep_dtype="keep_dtype.cfg").to_argv()
    assert "--keep_dtype=keep_dtype.cfg" in argv


def test_static_aipp_with_image_size_gears_is_allowed_with_the_size_from_the_gears():
    """Issue 30 §4: src_image_size_w/h 0 and no crop or padding (aclpythondevg_0044)."""
    options = AtcOptions(model="m.onnx", output="m", soc_version="Ascend310B4",
                         input_shape={"x": (1, 3, -1, -1)},
                         dynamic_image_size=((8, 8), (16, 24)), insert_op_conf="aipp.cfg",
                         aipp_size_from_gears=True)
    argv = options.to_argv()
    assert "--insert_op_conf=aipp.cfg" in argv and "--dynamic_image_size=8,8;16,24" in argv
