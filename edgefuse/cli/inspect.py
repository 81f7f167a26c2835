"""Check, per node, whether ATC's ONNX parser supports a model on an Ascend SoC (no CANN needed).

Judges each node's op type at the model's opset against a table of CANN's registered ONNX parser
plugins (edgefuse/acl/compile/data/onnx_op_support.yaml, sources inside), plus known restrictions
such as NonMaxSuppression's constant thresholds, custom domains and dynamic input dimensions.
Exit 1 when a node would be refused.

Examples:
  edgefuse inspect model.onnx --target Ascend310B4
  edgefuse inspect model.onnx --json > report.json
"""

from __future__ import annotations

import argparse
import json

from edgefuse.acl.compile.opsupport import check_model
from edgefuse.convert.onnx_load import load_onnx


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="ONNX file")
    parser.add_argument("--target", metavar="SOC",
                        help="ATC --soc_version (enables SoC-specific restrictions)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--problems-only", action="store_true",
                        help="list only nodes with errors or warnings")


def run(args: argparse.Namespace) -> int:
    report = check_model(load_onnx(args.model), target=args.target)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.render(all_nodes=not args.problems_only))
    return 0 if report.ok else 1
