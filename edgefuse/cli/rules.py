"""List every optimize rule with its id and a one-line description."""

from __future__ import annotations

import argparse

from edgefuse.optimize.rules import ALL_RULES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace) -> int:
    del args
    width = max(len(rule.id) for rule in ALL_RULES)
    for rule in ALL_RULES:
        exact = "" if rule.exact else "  (inexact)"
        print(f"{rule.id:<{width}}  {rule.description}{exact}")
    return 0
