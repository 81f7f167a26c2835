"""Entry point of the ``edgefuse`` command: dispatch to a verb and map outcomes to exit codes.

Exit codes (ruff's convention, extended): 0 ok; 1 a gate failed (verify, bench); 2 a user or
environment error, printed as a diagnostic without a traceback; 3 an internal error, printed with
its traceback and a request to report it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import shlex
import sys
import traceback
from collections.abc import Sequence

from edgefuse._version import __version__
from edgefuse.errors import EdgefuseError, Ref

# Every verb, in the order `edgefuse --help` lists them. A test checks that each module under
# edgefuse/cli/ that defines a verb is listed here exactly once.
COMMANDS: tuple[str, ...] = (
    "demo",
    "convert",
    "optimize",
    "quantize",
    "compile",
    "build",
    "bundle",
    "keys",
    "ops",
    "inspect",
    "run",
    "detect",
    "segment",
    "bench",
    "profile",
    "rules",
    "verify",
    "doctor",
)

EXIT_OK, EXIT_GATE_FAILED, EXIT_USER_ERROR, EXIT_INTERNAL_ERROR = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad usage already; keep its message but add our error prefix."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USER_ERROR, f"error[{Ref.BAD_USAGE}]: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="edgefuse", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"edgefuse {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    verbs = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"edgefuse.cli.{name}")
        doc = (module.__doc__ or "").strip()
        sub = verbs.add_parser(
            name.replace("_", "-"),
            help=doc.splitlines()[0] if doc else None,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    args.command_line = shlex.join(["edgefuse", *given])  # what a recording says made it
    if args.command is None:
        parser.print_usage(sys.stderr)
        print(f"error[{Ref.BAD_USAGE}]: no command given\n  hint: `edgefuse --help` lists the "
              "commands, `edgefuse COMMAND --help` explains one", file=sys.stderr)
        return EXIT_USER_ERROR
    # Only edgefuse's own progress under -v: the libraries' INFO chatter is noise to users.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("edgefuse").setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        return int(args._run(args))
    except EdgefuseError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - the one place that turns a bug into exit 3
        traceback.print_exc()
        print(
            f"\nedgefuse {__version__} hit an internal error. This is a bug: please report it "
            "with the traceback above and the command you ran.",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
