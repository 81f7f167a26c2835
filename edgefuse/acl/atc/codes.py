"""ATC error codes: what each means, how to pull the failing node out of its line, and the fix.

Why a table: ATC's own text ("Check the version of the installation package and reinstall the
package") is the same for most codes and rarely the fix. The meanings and message shapes below come
from public logs and from the parser's source; each entry names its sources. A code that is not
listed still surfaces (verbatim, with the log lines around it), just without a tailored hint.

Message shapes (verbatim from logs):
  E19010/EZ9010  No parser is registered for Op [Conv_52, optype [ai.onnx::11::Convx]].
  EZ0501         IR for Op [Conv_52, optype [Conv]], is not registered.
  EZ3002         Optype [Convx] of Ops kernel [AICORE] is unsupported.
  EZ3003         No supported Ops kernel and engine are found for [Conv_52], optype [Conv].
  (mjlovesz/sync-ait@ait/components/analyze/tests/model_eval/dataset/atc_err/*.txt, and the regexes
  of its parser, ait/components/analyze/src/model_eval/parser/atc.py)
  E20001         Failed to compile Op [/model/layers.20/Slice_x]. (optype: [StridedSliceD])
                 (Tlntin/qwen-ascend-llm#11)
  E10001         Value [-1] for parameter [input_2] is invalid. Reason: maybe you should set
                 input_shape to specify its shape.  (reference ascend-toolchain.md §1.7)
  E16002         No ONNX parser is registered for optype [%s].  (hiascend canncommercial/700
                 troublemanagement/troubleshooting/atlaserrorcode_15_0092.html; the page gives the
                 template only, so an unfilled ``%s`` names no op type here)
  A custom op whose op package is not installed shows up on current CANN as E19010 with the op's
  parser key: ``No parser is registered for Op [Swish_0, optype [ai.onnx::11::Swish]].``

When the op type of a "no parser registered" code is one of edgefuse's custom ops, the fix is
always the same -- install edgefuse's op package, or compile without custom ops -- so
``hint_for`` gives that hint instead of the code's general one.
"""

from __future__ import annotations

import dataclasses
import re

from edgefuse.acl.ops.registry import OPS_BY_NAME


@dataclasses.dataclass(frozen=True)
class AtcCode:
    code: str
    meaning: str
    hint: str
    sources: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class AtcDiagnostic:
    """One coded error found in an ATC log, with the node and op type when the line names them."""

    code: str
    line: str
    node: str | None
    op_type: str | None
    known: AtcCode | None


_SYNC_AIT = "mjlovesz/sync-ait@ait/components/analyze (parser/atc.py, tests/.../atc_err/*.txt)"
_PARSER_SRC = "Ascend/parser@parser/onnx/onnx_parser.cc"

_UNSUPPORTED_OP_HINT = (
    "run `edgefuse inspect MODEL --target SOC` to list every unsupported node; rewrite the op into "
    "supported ones, export at a lower opset, or register a custom operator plugin for it"
)

KNOWN_CODES: dict[str, AtcCode] = {
    code.code: code
    for code in (
        AtcCode(
            "E10001",
            "an ATC argument has an invalid value, most often --input_shape (an input name that "
            "is not a graph input, or a dynamic dimension with no shape given)",
            "check that every --input_shape name is an ONNX graph input and every -1 has a gear "
            "option (--dynamic_batch_size / --dynamic_image_size); edgefuse writes these from the "
            "model, so re-run `edgefuse compile` instead of editing compile.sh by hand",
            ("/work/shared/reference/ascend-toolchain.md §1.1 and §1.7 (community log)",),
        ),
        AtcCode(
            "E10501",
            "the parser created no operator for the node: its Ascend IR type is not registered",
            _UNSUPPORTED_OP_HINT,
            (f"{_PARSER_SRC} (TransNodeToOperator)",),
        ),
        AtcCode(
            "E11010",
            "the ONNX parser plugin rejected the node's attributes or inputs",
            "check the node's attributes against the CANN ONNX operator list (`edgefuse inspect` "
            "shows the known restrictions); the log line names the node",
            (f"{_PARSER_SRC} (ParseOpParam)",),
        ),
        AtcCode(
            "E16005",
            "the model imports several opset domains while some nodes use the default domain; "
            "the CANN parser then cannot tell which opset a default-domain node belongs to",
            "drop unused opset_import entries (edgefuse's prepared model does) and move custom "
            "nodes into their registered form",
            (f"{_PARSER_SRC} (ConstructOriType)",),
        ),
        AtcCode(
            "E16002",
            "no ONNX parser is registered for this op type: an op CANN does not know, or a "
            "custom op whose op package is not installed where ATC looks",
            _UNSUPPORTED_OP_HINT + "; for edgefuse's custom ops, install edgefuse's op package "
            "(`edgefuse ops build`) or compile with --no-custom-ops",
            ("hiascend canncommercial/700 troubleshooting/atlaserrorcode_15_0092.html",),
        ),
        AtcCode(
            "E19010",
            "no ONNX parser plugin is registered for this op type at this opset "
            "(an op CANN does not know, a custom domain, or an opset outside the op's range)",
            _UNSUPPORTED_OP_HINT,
            (_SYNC_AIT, "Ascend/ModelZoo-PyTorch#6", "Ascend/samples#5", "yinghuo302/ascend-llm#7"),
        ),
        AtcCode(
            "EZ9010",
            "no ONNX parser plugin is registered for this op type (older code of E19010)",
            _UNSUPPORTED_OP_HINT,
            (_SYNC_AIT,),
        ),
        AtcCode(
            "EZ0501",
            "the op's Ascend IR prototype (REG_OP) is not registered in this CANN install",
            "the op needs an op_proto from a custom operator package, or a CANN version that has "
            "it; check the CANN version against the one the model was validated with",
            (_SYNC_AIT,),
        ),
        AtcCode(
            "EZ3002",
            "the op exists but no kernel on this SoC accepts its dtype/format/shape (the Reason "
            "line says which; 'Dynamic shape is not supported on this chip!' on Ascend310)",
            "use static shapes or gears on Ascend310/310B, keep the op's inputs in a supported "
            "dtype (float16/float32), and see the Reason line in the log",
            (_SYNC_AIT, "mindspore-lab/mindocr#690"),
        ),
        AtcCode(
            "EZ3003",
            "no kernel and engine supports this op on this SoC at all",
            "replace the op with supported ones for this SoC or supply a custom operator; ops "
            "that exist on 310P/910 may be missing on 310B",
            (_SYNC_AIT, "/work/shared/reference/ascend-toolchain.md §7.1"),
        ),
        AtcCode(
            "E20001",
            "the TBE compiler failed to compile a kernel for this node (seen with many "
            "--dynamic_dims gears and mixed precision)",
            "reduce the number of gears, try --precision force_fp16 or must_keep_origin_dtype, "
            "and on small boards export TE_PARALLEL_COMPILER=1 MAX_COMPILE_CORE_NUMBER=1",
            ("Tlntin/qwen-ascend-llm#11", "/work/shared/reference/ascend-toolchain.md §1.6"),
        ),
        AtcCode(
            "E19999",
            "internal error; the root cause is on the last lines of its traceback (often a CANN "
            "version mismatch, too little memory, or a model from another NPU type)",
            "read the last lines of the log; check that the CANN toolkit, driver and --soc_version "
            "match the board; re-run with --log=debug for details",
            ("/work/shared/reference/ascend-toolchain.md §1.7-1.8 (GE source, ait benchmark FAQ)",),
        ),
    )
}

_CODE = re.compile(r"\b(E[0-9A-Z]\d{4})\b")
_NODE_PATTERNS = (
    re.compile(r"Op \[(?P<node>[^,\]]+), optype \[(?P<op_type>[^\]]+)\]\]"),  # E19010, EZ0501
    re.compile(r"found for \[(?P<node>[^\]]+)\], optype \[(?P<op_type>[^\]]+)\]"),  # EZ3003
    re.compile(r"Failed to compile Op \[(?P<node>[^\]]+)\]\.? \(optype: \[(?P<op_type>[^\]]+)\]\)"),
    re.compile(r"Optype \[(?P<op_type>[^\]]+)\] of Ops kernel"),  # EZ3002
    re.compile(r"parameter \[(?P<node>[^\]]+)\] is invalid"),  # E10001: the parameter, not a node
    re.compile(r"registered for optype \[?(?P<op_type>[^\]\s]+?)\]?\.?$"),  # E16002
)

# Codes that mean "the parser has no plugin for this op type".
_NO_PARSER_CODES = ("E16002", "E19010", "EZ9010")
CUSTOM_OP_HINT = (
    "{op} is an edgefuse custom op, which ATC parses only through an installed edgefuse op "
    "package: build one for this soc (`edgefuse ops build --soc SOC -o OPP_DIR`), then on the "
    "CANN host `bash OPP_DIR/build.sh && bash OPP_DIR/install.sh` (with a DIR, also source the "
    "set_env.bash line it prints); or recompile with `edgefuse compile ... --no-custom-ops`, "
    "which decomposes the custom ops into standard ONNX ops"
)


def hint_for(diagnostic: AtcDiagnostic) -> str | None:
    """The fix for a diagnostic: the custom-op install hint when its op type is edgefuse's."""
    op = (diagnostic.op_type or "").rsplit("::", 1)[-1]
    if diagnostic.code in _NO_PARSER_CODES and op in OPS_BY_NAME:
        return CUSTOM_OP_HINT.format(op=op)
    return diagnostic.known.hint if diagnostic.known is not None else None


def find_diagnostics(log_text: str) -> list[AtcDiagnostic]:
    """Every coded error line in an ATC log, in order, each with its node and op type if named.

    A node named only in the traceback lines below the coded line (ATC lists further failing
    nodes there) is attached to the same code.
    """
    diagnostics: list[AtcDiagnostic] = []
    current: str | None = None
    for raw in log_text.splitlines():
        line = raw.strip()
        match = _CODE.search(line)
        if match and line.startswith(match.group(1)):
            current = match.group(1)
            node, op_type = _node_and_type(line)
            known = KNOWN_CODES.get(current)
            diagnostics.append(AtcDiagnostic(current, line, node, op_type, known))
            continue
        if current is not None:
            node, op_type = _node_and_type(line)
            if node is not None or op_type is not None:
                known = KNOWN_CODES.get(current)
                diagnostics.append(AtcDiagnostic(current, line, node, op_type, known))
    return diagnostics


def _node_and_type(line: str) -> tuple[str | None, str | None]:
    for pattern in _NODE_PATTERNS:
        match = pattern.search(line)
        if match:
            groups = match.groupdict()
            op_type = groups.get("op_type")
            return groups.get("node"), None if op_type == "%s" else op_type
    return None, None
