"""Make the Ed25519 key pair that signs bundles (`edgefuse build --sign`).

`new NAME` writes NAME.key.pem (private, mode 0600: keep it off the boards, e.g. in the CI
secret store) and NAME.pub.pem (public: install it once on each board, in
/etc/edgefuse/keys/, with the card-maker hook or the Ansible role; then install.sh accepts only
bundles it signed). Both are PEM, which `openssl pkeyutl` reads on a board without edgefuse.

Examples:
  edgefuse keys new release -o keys/
  edgefuse build spec.yaml -o out --sign keys/release.key.pem
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edgefuse.bundle.signing import key_fingerprint, new_key_pair
from edgefuse.errors import InputError, Ref


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="keys_command", metavar="SUBCOMMAND", required=True)
    new = commands.add_parser("new", help="make a signing key pair")
    new.add_argument("name", metavar="NAME", help="file name stem of the pair")
    new.add_argument("-o", "--output", metavar="DIR", default=".",
                     help="folder to write the pair into (default: here)")


def run(args: argparse.Namespace) -> int:
    folder = Path(args.output)
    if not folder.is_dir():
        raise InputError(f"'{folder}' is not a folder", hint=f"mkdir -p {folder}",
                         reference=Ref.BAD_OUTPUT_PATH)
    if not args.name or "/" in args.name or args.name.startswith("."):
        raise InputError(f"the key name {args.name!r} must be a plain file name stem",
                         hint="e.g. edgefuse keys new release", reference=Ref.BAD_ARGUMENT)
    private, public = new_key_pair(folder, args.name)
    print(f"private: {private}   (sign with: edgefuse build SPEC -o OUT --sign {private})")
    print(f"public:  {public}   (trust on a board: /etc/edgefuse/keys/"
          f"{key_fingerprint(public)}.pem, named by its fingerprint)")
    return 0
