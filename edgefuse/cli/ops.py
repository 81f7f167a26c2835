"""Build or list edgefuse's custom operators for Ascend (TBE kernels, op-info, plugins).

`build` writes the custom-op project for a soc (kernels, op-info .ini, REG_OP prototypes, ONNX
parser plugins, msopgen IR JSON, build.sh, install.sh) and, where the CANN toolkit is set up
(ASCEND_HOME_PATH, msopgen, cmake), builds custom_opp_<os>_<arch>.run in it. Without CANN it
writes the project, says how to build it on a CANN host and exits 0; --require-cann makes a
missing toolkit an error (exit 2, nothing written). The packages are TBE projects and target
CANN 6.0 up to, not including, 8.5; a toolkit outside that range is refused (exit 2). Ops whose
kernel needs instructions the soc lacks are left out (YoloHead on Ascend310/Ascend910), or
refused when named in --ops. An existing OPP_DIR is refused unless --force, which replaces only
a project that `ops build` wrote.

Examples:
  edgefuse ops list
  edgefuse ops build --soc Ascend310B4 -o build/opp
  edgefuse ops build --soc Ascend310B4 -o build/opp --ops Swish,YoloHead --require-cann
"""

from __future__ import annotations

import argparse

from edgefuse.acl.ops.build import VENDOR, build_op_package
from edgefuse.acl.ops.registry import ALL_OPS, select_ops


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="ops_command", metavar="SUBCOMMAND", required=True)
    build = commands.add_parser("build", help="write (and with CANN, build) the op package")
    build.add_argument("--soc", required=True, help="ATC --soc_version, e.g. Ascend310B4")
    build.add_argument("-o", "--output", required=True, metavar="OPP_DIR",
                       help="directory to write the project to (must not exist, see --force)")
    build.add_argument("--ops", type=_names, metavar="NAMES",
                       help="comma-separated ops (default: every op whose kernel runs on the "
                       "soc; see `edgefuse ops list`)")
    build.add_argument("--vendor", default=VENDOR,
                       help=f"OPP vendor name: letters, digits, '_' or '-' (default {VENDOR})")
    build.add_argument("--require-cann", action="store_true",
                       help="fail (exit 2) instead of only writing the project without CANN")
    build.add_argument("--force", action="store_true",
                       help="replace OPP_DIR if it holds a project `edgefuse ops build` wrote")
    commands.add_parser("list", help="list the custom ops with their Ascend names")


def run(args: argparse.Namespace) -> int:
    if args.ops_command == "list":
        _list()
        return 0
    package = build_op_package(
        args.soc,
        args.output,
        select_ops(args.ops) if args.ops else None,
        vendor=args.vendor,
        require_cann=args.require_cann,
        overwrite=args.force,
    )
    print(package.summary())
    return 0


def _list() -> None:
    for spec in ALL_OPS:
        inputs = ", ".join(t.name + ("?" if t.optional else "") for t in spec.inputs)
        outputs = ", ".join(t.name for t in spec.outputs)
        print(f"edgefuse::{spec.name} -> {spec.ascend_type} ({spec.kernel_name}.py)")
        print(f"  {spec.doc}")
        print(f"  ({inputs}) -> ({outputs})")
        families = ", ".join(spec.soc_families) if spec.soc_families else "every soc"
        print(f"  kernel builds for: {families}")
        for attr in spec.attributes:
            default = "required" if attr.required else f"default {attr.default}"
            print(f"  {attr.name}: {attr.type}, {default} -- {attr.doc}")
