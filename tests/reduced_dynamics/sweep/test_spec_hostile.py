"""Hostile sweep specs found by tests/fuzz/test_sweep_spec_fuzz.py (issue 23): each refused with one line naming its key."""

from __future__ import annotations

import pytest

from reduced_dynamics.cli import main
from reduced_dynamics.sweep import load_spec


def _one_line(capsys, tmp_path, text: str, *extra) -> str:
    spec = tmp_path / "spec.toml"
    spec.write_text(text, encoding="utf-8")
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--dry-run", *extra])
    err = [s for s in capsys.readouterr().err.splitlines() if s.strip()]
    assert rc == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("value", ["1", '"abc"', "[]"])
def test_quick_not_a_table_names_the_key_not_the_flag(value, capsys, tmp_path):
    """`quick = 1` named the command line's `--quick` (the error was renamed to the sweep's flag)."""
    line = _one_line(capsys, tmp_path, f'command = "run"\nquick = {value}\n')
    assert "`[quick]` must be a table" in line and "--quick" not in line


@pytest.mark.parametrize("table", ["seeds = -1", "fixed = 3", "axes = [1]", "zip = 3", "axes = { bogus = [1] }"])
def test_broken_quick_table_refused_without_quick(table):
    """A [quick] that --quick would refuse is refused by the full-size spec too (it was accepted until --quick)."""
    with pytest.raises(ValueError, match=r"`\[quick\]` makes a bad spec"):
        load_spec(_quick(table))


def _quick(table: str) -> dict:
    import tomllib

    return tomllib.loads(f'command = "run"\n[quick]\n{table}\n')


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('command = "run"\n[fixed]\n"a\\nb" = 1\n', "`fixed.a\\nb`"),
        ('command = "run"\n[axes]\n"t\\rend" = [1]\n', "`axes.t\\rend`"),
        ('command = "run"\n"\\u001b[2J" = 1\n', "`\\x1b[2J`"),
    ],
)
def test_key_with_control_characters_named_escaped(text, shown, capsys, tmp_path):
    """A key holding a newline cut the error line before the key; an escape sequence reached the terminal."""
    line = _one_line(capsys, tmp_path, text)
    assert shown in line and "\x1b" not in line
