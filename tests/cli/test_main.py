"""The dispatcher's contract: verbs listed once, exit codes 0/1/2/3, no user-error traceback."""

import importlib
import pkgutil

import pytest

import edgefuse.cli
from edgefuse.cli import main as cli_main
from edgefuse.errors import EdgefuseError, InputError, Ref

pytestmark = pytest.mark.unit


def test_every_verb_module_is_registered_once():
    modules = {
        m.name for m in pkgutil.iter_modules(edgefuse.cli.__path__)
        if not m.name.startswith("_") and m.name != "main"
    }
    assert sorted(cli_main.COMMANDS) == sorted(set(cli_main.COMMANDS))
    assert modules == set(cli_main.COMMANDS)
    for name in cli_main.COMMANDS:
        module = importlib.import_module(f"edgefuse.cli.{name}")
        assert module.__doc__ and module.__doc__.strip(), f"verb {name} has no help text"


def _fake_verb(monkeypatch, run):
    real = cli_main.build_parser

    def build():
        parser = real()
        parser.set_defaults(_run=run, command="fake")
        return parser

    monkeypatch.setattr(cli_main, "build_parser", build)


def test_user_error_exits_2_with_diagnostic_and_no_traceback(monkeypatch, capsys):
    def run(args):
        raise InputError("the thing is wrong", context="in file x", hint="do y",
                         reference=Ref.BAD_FEEDS)

    _fake_verb(monkeypatch, run)
    assert cli_main.main([]) == 2
    err = capsys.readouterr().err
    assert "error[bad-feeds]: the thing is wrong" in err
    assert "╰─> in file x" in err and "hint: do y" in err
    assert "Traceback" not in err


def test_internal_error_exits_3_with_traceback(monkeypatch, capsys):
    def run(args):
        raise ZeroDivisionError("boom")

    _fake_verb(monkeypatch, run)
    assert cli_main.main([]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "ZeroDivisionError: boom" in err and "please report" in err


def test_no_verb_prints_usage_on_stderr_and_exits_2(capsys):
    assert cli_main.main([]) == 2
    assert "COMMAND" in capsys.readouterr().err


def test_bad_usage_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main.main(["no-such-verb"])
    assert exc.value.code == 2
    assert "error[bad-usage]" in capsys.readouterr().err


def test_an_undeclared_error_reference_is_refused():
    with pytest.raises(ValueError, match="'bad-x' is not in edgefuse.errors.Ref"):
        EdgefuseError("x", reference="bad-x")
