"""The complete parser (for the docs' CLI reference) and the one data-model option group of every command."""

import argparse
import importlib
import subprocess
import sys

import pytest

from reduced_dynamics.cli import COMMAND_HELP, COMMANDS, _parser, build_parser, main

SETTING_COMMANDS = ["run", "risk", "check", "train", "portrait"]


def _subparsers(parser):
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def test_build_parser_has_every_command():
    sub = _subparsers(build_parser())
    assert list(sub) == list(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_option_has_help(command):
    parser = _subparsers(build_parser())[command]
    assert parser.description
    for action in parser._actions:
        assert action.help and action.help.strip(), (command, action.option_strings)
    assert "usage:" in parser.format_help()


@pytest.mark.parametrize("command", SETTING_COMMANDS)
def test_setting_flags_and_defaults(command):
    """Every data-model command takes --d --L --sigma2 with the paper's defaults."""
    args = build_parser().parse_args([command])
    assert (args.d, args.L, args.sigma2) == (5, 40, 0.1)
    args = build_parser().parse_args([command, "--d", "3", "--L", "12", "--sigma2", "0.5"])
    assert (args.d, args.L, args.sigma2) == (3, 12, 0.5)


@pytest.mark.parametrize("command", SETTING_COMMANDS)
@pytest.mark.parametrize("flag, value", [("--d", "0"), ("--L", "0"), ("--sigma2", "-0.5"), ("--sigma2", "inf")])
def test_bad_setting_one_line_exit_2(capsys, command, flag, value):
    """A bad data-model value is rejected by Setting before any work: one line naming the flag, exit 2."""
    rc = main([command, flag, value])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"`{flag}`" in err
    assert err.startswith(f"reduced-dynamics {command}: error:")


def test_no_command_prints_help_exit_2(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().err


def test_module_and_script_entry_agree():
    """`python -m reduced_dynamics --help` lists the same commands as build_parser()."""
    proc = subprocess.run([sys.executable, "-m", "reduced_dynamics", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for name in COMMANDS:
        assert name in proc.stdout


def test_the_static_help_table_is_each_modules_help():
    """`--help` reads COMMAND_HELP instead of importing the commands: it must say what each module's HELP says."""
    assert list(COMMAND_HELP) == list(COMMANDS)
    for name, modname in COMMANDS.items():
        assert COMMAND_HELP[name] == importlib.import_module(modname).HELP, name


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_lazy_parser_gives_each_command_the_complete_parser(command, capsys):
    """main() fills a command's parser only when it is chosen: its --help is the complete parser's, character for character."""
    full = _subparsers(build_parser())[command].format_help()
    lazy = _parser(lazy=True)
    unfilled = _subparsers(lazy)[command]
    assert [a.dest for a in unfilled._actions] == ["help"]  # nothing imported or added before it is chosen
    with pytest.raises(SystemExit) as exc:
        lazy.parse_args([command, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == full
    assert main([command, "--help"]) == 0
    assert capsys.readouterr().out == full


def test_the_lazy_parser_parses_like_the_complete_one():
    argv = ["exact-risk", "--d", "3", "--L", "12", "--omega", "0.2", "--mu", "1.0", "--grad"]
    a, b = build_parser().parse_args(argv), _parser(lazy=True).parse_args(argv)
    assert vars(a).keys() == vars(b).keys()
    assert {k: v for k, v in vars(a).items() if k != "_module"} == {k: v for k, v in vars(b).items() if k != "_module"}
    assert a._module is b._module
