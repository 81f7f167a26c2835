"""Check a bundle from `edgefuse build`: its files, its archive's safety, its models' parity.

`verify DIR|ARCHIVE` does what install.sh does before it installs anything: an archive must be
complete and hold only files and folders inside its bundle folder (no absolute paths, '..',
links, device files); every file must match MANIFEST.json and MANIFEST.json its own digest;
with --key, MANIFEST.json must be signed by one of the keys. Then each model runs once on the
best backend here against the golden recording made at build time, and the agreement is
reported (exit 1 when a model misses its gate).

Examples:
  edgefuse bundle verify out/tiny/tiny-camera-0.1.0.tar.gz
  edgefuse bundle verify /opt/edgefuse/tiny-camera/current --backend acl
  edgefuse bundle verify bundle/ --no-run --json report.json
  edgefuse bundle verify release.tar.gz --key keys/release.pub.pem --no-run
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from edgefuse._files import check_output_path, check_outputs_spare_inputs, write_text
from edgefuse.bundle.bundle_check import verify_bundle
from edgefuse.errors import EdgefuseError, Ref
from edgefuse.runtime import BACKENDS, DEFAULT_BACKENDS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="bundle_command", metavar="SUBCOMMAND", required=True)
    verify = commands.add_parser("verify", help="check a bundle folder or archive")
    verify.add_argument("bundle", metavar="DIR|ARCHIVE")
    verify.add_argument("--backend", action="append", choices=BACKENDS,
                        help=f"backends to try in order (default: {', '.join(DEFAULT_BACKENDS)})")
    verify.add_argument("--no-run", action="store_true",
                        help="check the files only; run no model")
    verify.add_argument("--json", metavar="OUT.json", help="write the report as JSON")
    verify.add_argument("--key", action="append", metavar="PUB.pem",
                        help="a trusted public key (repeatable): the bundle must be signed by "
                             "one of them")


def run(args: argparse.Namespace) -> int:
    if args.json:
        check_output_path(args.json)
    check_outputs_spare_inputs({"--json report": args.json}, {"bundle": args.bundle})
    report = verify_bundle(args.bundle, backends=tuple(args.backend or DEFAULT_BACKENDS),
                           run_models=not args.no_run,
                           keys=tuple(Path(key) for key in args.key or ()))
    print(report.render())
    if args.json:
        write_text(args.json, json.dumps(report.to_json(), indent=2) + "\n")
    if not report.passed:
        failed = [name for name, check in report.models.items() if not check.passed]
        error = EdgefuseError(
            f"{', '.join(failed)} no longer reproduce(s) the golden recording here",
            hint="a different CANN, driver or op package than at build time, or a damaged "
                 "OM: rebuild with the board's CANN (target.cann) and compare",
            reference=Ref.GOLDEN_MISMATCH)
        error.exit_code = 1
        raise error
    return 0
