"""The rule registry: one rule per module, each listed once, with a usable id and documentation."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest

from edgefuse.cli.main import main
from edgefuse.optimize import rules as rules_package
from edgefuse.optimize.rule import AdoptedRule, Rule
from edgefuse.optimize.rules import ALL_RULES, ASCEND_RULES, RULES_BY_ID

pytestmark = pytest.mark.unit

KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
EVERY_RULE = ALL_RULES + ASCEND_RULES  # host rules, then the Ascend-only ones
RULE_MODULES = sorted(
    name for _, name, _ in pkgutil.iter_modules(rules_package.__path__) if not name.startswith("_")
)


def rules_defined_in(module) -> list[type]:
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, (Rule, AdoptedRule))
        and obj not in (Rule, AdoptedRule)
        and obj.__module__ == module.__name__
    ]


@pytest.mark.parametrize("module_name", RULE_MODULES)
def test_each_rule_module_defines_one_registered_rule_named_after_it(module_name):
    module = importlib.import_module(f"{rules_package.__name__}.{module_name}")
    (rule,) = rules_defined_in(module)
    assert rule in EVERY_RULE
    assert rule.id == module_name.replace("_", "-")
    assert (module.__doc__ or "").strip().startswith(f"{rule.id}:")


def test_every_registered_rule_comes_from_its_own_module():
    modules = [rule.__module__.rsplit(".", 1)[1] for rule in EVERY_RULE]
    assert sorted(modules) == RULE_MODULES


def test_rule_ids_are_unique_kebab_case():
    ids = [rule.id for rule in EVERY_RULE]
    assert len(ids) == len(set(ids)) == len(RULES_BY_ID)
    assert [i for i in ids if not KEBAB.match(i)] == []


@pytest.mark.parametrize("rule", EVERY_RULE, ids=lambda rule: rule.id)
def test_every_rule_has_a_description_and_rewrite_rules(rule):
    assert rule.description.strip() and "\n" not in rule.description
    assert len(rule.rewrite_rules()) >= 1


def test_host_and_ascend_rules_do_not_overlap():
    assert set(ALL_RULES).isdisjoint(ASCEND_RULES)


def test_bn_folds_come_before_bn_to_affine():
    order = [rule.id for rule in ALL_RULES]
    for fold in ("fold-bn-into-conv", "fold-bn-into-conv-transpose", "fold-bn-into-gemm"):
        assert order.index(fold) < order.index("bn-to-affine")


def test_rules_cli_lists_every_rule_under_its_targets(capsys):
    assert main(["rules"]) == 0
    lines = capsys.readouterr().out.splitlines()
    split = lines.index("Ascend targets only:")
    assert lines[0] == "every target:"
    host, ascend = lines[1:split], lines[split + 1 :]
    for listed, rules in ((host, ALL_RULES), (ascend, ASCEND_RULES)):
        assert [line.split()[0] for line in listed] == [rule.id for rule in rules]
        for line, rule in zip(listed, rules, strict=True):
            assert rule.description in line
