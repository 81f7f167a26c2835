"""Show what this machine has (edgefuse, ONNX Runtime providers, CUDA, CANN/ATC/pyACL, the NPU's
soc) and what each backend still needs.

Examples:
  edgefuse doctor
  edgefuse doctor --json env.json
"""

from __future__ import annotations

import argparse
import json

from edgefuse._files import write_text
from edgefuse.doctor import diagnose


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="R.json", help="also write the findings as JSON")


def run(args: argparse.Namespace) -> int:
    diagnosis = diagnose()
    print(diagnosis.render())
    if args.json:
        write_text(args.json, json.dumps(diagnosis.to_json(), indent=2) + "\n")
    return 0
