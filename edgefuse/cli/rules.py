"""List every optimize rule with its id and a one-line description."""

from __future__ import annotations

import argparse

from edgefuse.optimize.rules import ALL_RULES, ASCEND_RULES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def run(args: argparse.Namespace) -> int:
    del args
    width = max(len(rule.id) for rule in ALL_RULES + ASCEND_RULES)
    for title, rules in (("every target", ALL_RULES), ("Ascend targets only", ASCEND_RULES)):
        print(f"{title}:")
        for rule in rules:
            exact = "" if rule.exact else "  (inexact)"
            print(f"  {rule.id:<{width}}  {rule.description}{exact}")
    return 0
