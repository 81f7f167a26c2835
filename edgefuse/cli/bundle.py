"""Check a bundle from `edgefuse build`, or rehearse its life on an aarch64 system.

`verify DIR|ARCHIVE` does what install.sh does before it installs anything: an archive must be
complete and hold only files and folders inside its bundle folder (no absolute paths, '..',
links, device files); every file must match MANIFEST.json and MANIFEST.json its own digest;
with --key, MANIFEST.json must be signed by one of the keys; without it the signature is NOT
checked, the report says so, and a signed bundle is refused (exit 2) unless --no-signature-check
says that is meant: anyone can re-sign a bundle. Then each model runs once on the
best backend here against the golden recording made at build time, and the agreement is
reported (exit 1 when a model misses its gate).

`pin-image K8S_DIR IMAGE@sha256:HEX` names the built and pushed image by its digest in the
DaemonSet that `build --emit k8s` wrote (a tag can be pushed again with other content).

`rehearse SPEC.yaml -o OUT_DIR` (as root) builds the spec three times, signed (as it is, a newer
version, a newer one broken on purpose), and in a Debian 12 arm64 root under qemu-user >= 10
(made by debootstrap once and cached in ~/.cache/edgefuse/rehearsal, or --rootfs DIR, a board
image's root) installs the first with its install.sh, starts the service from the installed unit
on a generated clip, upgrades, has the broken release rolled back by the installer's health
check, and runs `install.sh --rollback`; a table of steps and times, OUT_DIR/rehearsal.json.
docs/fleet.md, "Rehearse on an aarch64 system", has the details and the measured times.

Examples:
  edgefuse bundle verify out/tiny/tiny-camera-0.1.0.tar.gz
  edgefuse bundle verify /opt/edgefuse/tiny-camera/current --backend acl
  edgefuse bundle verify bundle/ --no-run --json report.json
  edgefuse bundle verify release.tar.gz --key keys/release.pub.pem --no-run
  edgefuse bundle pin-image out/release/k8s registry.example/edgefuse/camera@sha256:<digest>
  sudo edgefuse bundle rehearse spec.yaml -o out/rehearsal --sign keys/release.key.pem
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from edgefuse._files import check_output_path, check_outputs_spare_inputs, write_text
from edgefuse.bundle.bundle_check import verify_bundle
from edgefuse.bundle.kube import pin_image
from edgefuse.bundle.rehearsal import RehearsalReport, StepFailed, rehearse
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
    verify.add_argument("--no-signature-check", action="store_true",
                        help="check a signed bundle's files without a key (its signature is "
                             "NOT checked; the report says so)")
    pin = commands.add_parser(
        "pin-image", help="name the pushed image by its digest in k8s/daemonset.yaml")
    pin.add_argument("folder", metavar="K8S_DIR", help="the k8s/ folder of --emit k8s")
    pin.add_argument("image", metavar="IMAGE@sha256:HEX",
                     help="the pushed image by digest (podman push --digestfile)")
    rehearsal = commands.add_parser(
        "rehearse", help="install, run, upgrade and roll back the spec's bundle in an aarch64 "
                         "root under qemu-user (root only)")
    rehearsal.add_argument("spec", metavar="SPEC.yaml")
    rehearsal.add_argument("-o", "--output", required=True, metavar="OUT_DIR",
                           help="a new folder: the builds, the logs, rehearsal.json")
    rehearsal.add_argument("--sign", metavar="KEY.pem",
                           help="the publisher's Ed25519 private key (default: a new one in "
                                "OUT_DIR/keys)")
    rehearsal.add_argument("--rootfs", metavar="DIR",
                           help="a board image's root file system to rehearse in (never "
                                "written) instead of the cached Debian 12 arm64 root")
    rehearsal.add_argument("--qemu", metavar="PATH",
                           help="qemu-aarch64 >= 10 (default: qemu-aarch64-static or "
                                "qemu-aarch64 on PATH)")
    rehearsal.add_argument("--mirror", metavar="URL",
                           help="the Debian mirror debootstrap uses (default: this machine's "
                                "own apt source)")
    rehearsal.add_argument("--cache", metavar="DIR",
                           help="the build cache (default: as edgefuse build)")


def run(args: argparse.Namespace) -> int:
    if args.bundle_command == "rehearse":
        return _rehearse(args)
    if args.bundle_command == "pin-image":
        print(f"wrote {pin_image(Path(args.folder), args.image)}: image {args.image}")
        return 0
    if args.json:
        check_output_path(args.json)
    check_outputs_spare_inputs({"--json report": args.json}, {"bundle": args.bundle})
    report = verify_bundle(args.bundle, backends=tuple(args.backend or DEFAULT_BACKENDS),
                           run_models=not args.no_run,
                           keys=tuple(Path(key) for key in args.key or ()),
                           check_signature=not args.no_signature_check)
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


def _rehearse(args: argparse.Namespace) -> int:
    try:
        report = rehearse(args.spec, args.output, sign_key=args.sign, rootfs=args.rootfs,
                          qemu=args.qemu, mirror=args.mirror, cache_dir=args.cache,
                          progress=lambda line: print(line, file=sys.stderr, flush=True))
    except StepFailed as error:
        _write_report(error.report, Path(args.output))
        raise
    _write_report(report, Path(args.output))
    return 0


def _write_report(report: RehearsalReport, out: Path) -> None:
    print(report.render())
    write_text(out / "rehearsal.json", json.dumps(report.to_json(), indent=2) + "\n")
    print(f"wrote {out / 'rehearsal.json'}")
