"""The files of each op package agree with each other and with the op's OpSpec.

The op-info .ini, the REG_OP header, the ONNX parser plugin and msopgen's IR JSON are rendered
from the OpSpec, and the TBE kernel and the ONNX function are written by hand; each is parsed
back here (not compared as text) and checked for the same names, dtypes, formats and attributes.
A renderer bug, or a kernel whose signature drifted from its spec, fails here.
"""

from __future__ import annotations

import ast
import configparser
import json
import re

import onnx
import onnx.defs
import pytest

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.acl.ops import _render
from edgefuse.acl.ops.build import project_files
from edgefuse.acl.ops.registry import ALL_OPS, select_ops
from edgefuse.acl.ops.spec import DEVICE_DTYPES, DOMAIN, register_onnx_schemas
from edgefuse.errors import InputError

pytestmark = pytest.mark.unit

SOC = validate_soc("Ascend310B4")
FILES = project_files(ALL_OPS, SOC)
INI_TO_DEVICE = {v: k for k, v in _render.INI_DTYPES.items()}
MSOPGEN_TO_DEVICE = {v: k for k, v in _render.MSOPGEN_DTYPES.items()}
GE_TO_DEVICE = {v: k for k, v in _render.GE_DTYPES.items()}
ops = pytest.mark.parametrize("spec", ALL_OPS, ids=lambda spec: spec.name)


def parse_default(attr_type: str, text: str):
    if attr_type in ("ints", "listInt", "ListInt"):
        return tuple(int(v) for v in re.findall(r"-?\d+", text))
    return float(text) if attr_type in ("float", "Float") else int(text)


def spec_attrs(spec) -> list[tuple[str, str, object]]:
    return [(a.name, a.type, a.default) for a in spec.attributes]


# ---- op-info .ini ------------------------------------------------------------------------------


@ops
def test_ini_lists_the_spec_tensors_columns_and_attributes(spec):
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read_string(FILES[f"tbe/op_info_cfg/ai_core/{SOC.short_name}/{spec.kernel_name}.ini"])
    assert parser.sections() == [spec.ascend_type]
    info = parser[spec.ascend_type]
    for prefix, tensors in (("input", spec.inputs), ("output", spec.outputs)):
        for index, tensor in enumerate(tensors):
            key = f"{prefix}{index}"
            assert info[f"{key}.name"] == tensor.name
            dtypes = [INI_TO_DEVICE[d] for d in info[f"{key}.dtype"].split(",")]
            assert tuple(dtypes) == tensor.device_dtypes
            assert tuple(info[f"{key}.format"].split(",")) == tensor.device_formats
            assert info[f"{key}.paramType"] == ("optional" if tensor.optional else "required")
        assert f"{prefix}{len(tensors)}.name" not in info
    names = info["attr.list"].split(",") if spec.attributes else []
    parsed = []
    for name in names:
        ini_type = info[f"attr_{name}.type"]
        required = info[f"attr_{name}.paramType"] == "required"
        assert required == (f"attr_{name}.defaultValue" not in info)
        default = None if required else parse_default(ini_type, info[f"attr_{name}.defaultValue"])
        parsed.append((name, {"listInt": "ints"}.get(ini_type, ini_type), default))
    assert parsed == spec_attrs(spec)
    assert info["opFile.value"] == info["opInterface.value"] == spec.kernel_name


# ---- REG_OP prototype ------------------------------------------------------------------------


@ops
def test_reg_op_header_declares_the_spec_signature(spec):
    header = FILES[f"op_proto/{spec.kernel_name}.h"]
    assert re.findall(r"REG_OP\((\w+)\)", header) == [spec.ascend_type]
    assert re.findall(r"OP_END_FACTORY_REG\((\w+)\)", header) == [spec.ascend_type]
    tensors = re.findall(r"\.(INPUT|OPTIONAL_INPUT|OUTPUT)\((\w+), TensorType\(\{([^}]*)\}\)\)",
                         header)
    expected = [
        ("OPTIONAL_INPUT" if t.optional else "INPUT", t.name) for t in spec.inputs
    ] + [("OUTPUT", t.name) for t in spec.outputs]
    assert [(kind, name) for kind, name, _ in tensors] == expected
    for (_, _, types), tensor in zip(tensors, spec.tensors, strict=True):
        declared = {GE_TO_DEVICE[t.strip()] for t in types.split(",")}
        assert declared == set(tensor.device_dtypes)
    attrs = []
    for line in header.splitlines():
        if match := re.search(r"\.REQUIRED_ATTR\((\w+), (\w+)\)", line):
            attrs.append((match[1], match[2], None))
        elif match := re.search(r"\.ATTR\((\w+), (\w+), (.+)\)$", line):
            attrs.append((match[1], match[2], parse_default(match[2], match[3])))
    types = {"Float": "float", "Int": "int", "ListInt": "ints"}
    assert [(n, types[t], d) for n, t, d in attrs] == spec_attrs(spec)


@ops
def test_proto_source_registers_infer_and_verify_for_the_op(spec):
    source = FILES[f"op_proto/{spec.kernel_name}.cc"]
    assert f'#include "{spec.kernel_name}.h"' in source
    assert f"INFER_FUNC_REG({spec.ascend_type}, {spec.ascend_type}InferShape);" in source
    assert f"VERIFY_FUNC_REG({spec.ascend_type}, {spec.ascend_type}Verify);" in source
    read = set(re.findall(r'op\.GetAttr\("(\w+)"', source))
    assert read <= {a.name for a in spec.attributes}
    for name in re.findall(r'GetInputDescByName\("(\w+)"\)', source):
        assert name in {t.name for t in spec.inputs}
    for name in re.findall(r'(?:GetOutputDescByName|UpdateOutputDesc)\("(\w+)"', source):
        assert name in {t.name for t in spec.outputs}


# ---- ONNX parser plugin ----------------------------------------------------------------------


@ops
def test_onnx_plugin_maps_the_onnx_op_and_every_attribute(spec):
    plugin = FILES[f"framework/onnx_plugin/{spec.kernel_name}_plugin.cc"]
    assert re.findall(r'REGISTER_CUSTOM_OP\("(\w+)"\)', plugin) == [spec.ascend_type]
    assert ".FrameworkType(ONNX)" in plugin and ".ImplyType(ImplyType::TVM)" in plugin
    origins = re.findall(r'ge::AscendString\("([^"]+)"\)', plugin)
    assert origins[0] == f"{DOMAIN}::1::{spec.name}"
    assert all(o.endswith(f"::{spec.name}") for o in origins)
    assert re.findall(r'attrs\.find\("(\w+)"\)', plugin) == [a.name for a in spec.attributes]
    assert re.findall(r'op_dest\.SetAttr\("(\w+)"', plugin) == [a.name for a in spec.attributes]
    required = sum(a.required for a in spec.attributes)
    assert plugin.count("return FAILED;  // a required attribute is missing") == required
    for attr in spec.attributes:
        field = {"float": '["f"]', "int": '["i"]', "ints": '["ints"]'}[attr.type]
        block = plugin.split(f'attrs.find("{attr.name}")', 1)[1].split("op_dest.SetAttr", 1)[0]
        assert field in block, attr.name  # the AttributeProto field of the ONNX type
        if not attr.required:
            declared = re.search(rf"\b{attr.name} = ([^;]+);", plugin)[1]
            default = declared.rstrip("f") if attr.type == "float" else declared
            assert parse_default(attr.type, default) == attr.default


# ---- msopgen IR JSON ---------------------------------------------------------------------------


def test_msopgen_json_has_one_entry_per_op_in_registry_order():
    entries = json.loads(FILES["edgefuse_ops.json"])
    assert [e["op"] for e in entries] == [spec.ascend_type for spec in ALL_OPS]


@ops
def test_msopgen_entry_matches_the_spec(spec):
    (entry,) = [e for e in json.loads(FILES["edgefuse_ops.json"]) if e["op"] == spec.ascend_type]
    for key, tensors in (("input_desc", spec.inputs), ("output_desc", spec.outputs)):
        assert [d["name"] for d in entry[key]] == [t.name for t in tensors]
        for desc, tensor in zip(entry[key], tensors, strict=True):
            assert tuple(MSOPGEN_TO_DEVICE[t] for t in desc["type"]) == tensor.device_dtypes
            assert tuple(desc["format"]) == tensor.device_formats
            assert desc["param_type"] == ("optional" if tensor.optional else "required")
    parsed = [
        (a["name"], {"listInt": "ints"}.get(a["type"], a["type"]),
         parse_default(a["type"], a["default_value"]) if "default_value" in a else None)
        for a in entry["attr"]
    ]
    assert parsed == spec_attrs(spec)
    assert all((a["param_type"] == "required") == ("default_value" not in a) for a in entry["attr"])


# ---- ONNX side: schema, function, type constraints ------------------------------------------


@ops
def test_onnx_schema_matches_the_spec(spec):
    register_onnx_schemas(ALL_OPS)
    schema = onnx.defs.get_schema(spec.name, spec.version, DOMAIN)
    assert [p.name for p in schema.inputs] == [t.name for t in spec.inputs]
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    assert [p.option == optional for p in schema.inputs] == [t.optional for t in spec.inputs]
    assert [p.name for p in schema.outputs] == [t.name for t in spec.outputs]
    assert [p.type_str for p in schema.outputs] == [t.onnx_type for t in spec.outputs]
    assert sorted(schema.attributes) == sorted(a.name for a in spec.attributes)
    for attr in spec.attributes:
        declared = schema.attributes[attr.name]
        assert declared.required == attr.required
        if not attr.required:
            value = onnx.helper.get_attribute_value(declared.default_value)
            value = tuple(value) if attr.type == "ints" else value
            assert value == pytest.approx(attr.default)  # ONNX stores floats as float32


@ops
def test_onnx_function_has_the_spec_signature(spec):
    function = spec.function_proto()
    assert (function.domain, function.name) == (DOMAIN, spec.name)
    assert list(function.input) == [t.name for t in spec.inputs]
    assert list(function.output) == [t.name for t in spec.outputs]
    names = list(function.attribute) + [a.name for a in function.attribute_proto]
    assert sorted(names) == sorted(a.name for a in spec.attributes)
    defaults = {a.name: onnx.helper.get_attribute_value(a) for a in function.attribute_proto}
    for attr in spec.attributes:
        if not attr.required:
            value = defaults[attr.name]
            assert (tuple(value) if attr.type == "ints" else value) == pytest.approx(attr.default)


@ops
def test_device_dtypes_are_allowed_by_the_onnx_types(spec):
    allowed = dict(spec.type_constraints)
    for tensor in spec.tensors:
        types = allowed.get(tensor.onnx_type, (tensor.onnx_type,))
        assert {DEVICE_DTYPES[d] for d in tensor.device_dtypes} <= set(types), tensor.name


# ---- the hand-written TBE kernel -------------------------------------------------------------


def kernel_entry(spec) -> ast.FunctionDef:
    tree = ast.parse(spec.kernel_source())
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    (entry,) = [n for n in functions if n.name == spec.kernel_name]
    return entry


@ops
def test_kernel_signature_is_inputs_outputs_attributes_kernel_name(spec):
    entry = kernel_entry(spec)
    params = [a.arg for a in entry.args.args]
    assert params == [
        *(t.name for t in spec.tensors), *(a.name for a in spec.attributes), "kernel_name"
    ]
    with_default = params[len(params) - len(entry.args.defaults) :]
    defaults = dict(zip(with_default, entry.args.defaults, strict=True))
    assert ast.literal_eval(defaults["kernel_name"]) == spec.kernel_name
    for attr in spec.attributes:
        if attr.required:
            assert attr.name not in defaults
        else:
            value = ast.literal_eval(defaults[attr.name])
            assert (tuple(value) if attr.type == "ints" else value) == attr.default


@ops
def test_kernel_parameter_checks_follow_the_spec(spec):
    (decorator,) = [
        d for d in kernel_entry(spec).decorator_list
        if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("check_op_params")
    ]
    checks = [ast.unparse(arg).rsplit(".", 1)[1] for arg in decorator.args]
    kinds = {"float": "FLOAT", "int": "INT", "ints": "LIST_INT"}
    expected = [
        *(("OPTION_INPUT" if t.optional else "REQUIRED_INPUT") for t in spec.inputs),
        *("REQUIRED_OUTPUT" for _ in spec.outputs),
        *(
            f"{'REQUIRED' if a.required else 'OPTION'}_ATTR_{kinds[a.type]}"
            for a in spec.attributes
        ),
        "KERNEL_NAME",
    ]
    assert checks == expected


@ops
def test_kernel_registers_its_compute_under_the_ascend_type(spec):
    registered = re.findall(r'register_op_compute\("(\w+)"', spec.kernel_source())
    assert registered in ([], [spec.ascend_type])


# ---- selecting ops and checking attributes ---------------------------------------------------


def test_ops_are_selected_by_onnx_or_ascend_name():
    assert select_ops(["YoloHead", "EdgefuseSwish"]) == (ALL_OPS[2], ALL_OPS[0])
    with pytest.raises(InputError, match="unknown custom op Swishh"):
        select_ops(["Swishh"])


def test_attributes_are_checked_with_the_op_named():
    yolo = ALL_OPS[2]
    with pytest.raises(InputError, match="YoloHead needs the attribute 'num_classes'"):
        yolo.resolve_attributes({})
    with pytest.raises(InputError, match="'max_detections' must be int, got 2.5"):
        yolo.resolve_attributes({"num_classes": 2, "max_detections": 2.5})
    with pytest.raises(InputError, match=r"iou_threshold must be in \[0, 1\]"):
        yolo.resolve_attributes({"num_classes": 2, "iou_threshold": 1.5})
    with pytest.raises(InputError, match="predictions has 9 rows"):
        yolo.infer_shapes([(1, 9, 100)], num_classes=80)
