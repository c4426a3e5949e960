"""`figures` never silently overwrites figures made with another configuration (issue 9: data loss)."""

import json

from reduced_dynamics.cli import main

CHEAP = ["figures", "--quick", "--only", "bayes_ratio", "--quiet"]


def test_figures_refuse_another_configuration_without_force(tmp_path, capsys):
    out = str(tmp_path / "f")
    assert main([*CHEAP, "--out", out]) == 0
    before = (tmp_path / "f" / "bayes_ratio.npz").read_bytes()
    capsys.readouterr()
    rc = main([*CHEAP, "--seed", "3", "--out", out])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "`--out`" in err[0] and "`--force`" in err[0]
    assert (tmp_path / "f" / "bayes_ratio.npz").read_bytes() == before  # untouched
    assert main([*CHEAP, "--out", out]) == 0  # same configuration: allowed
    assert main([*CHEAP, "--seed", "3", "--force", "--out", out]) == 0
    assert json.loads((tmp_path / "f" / "figures_run.json").read_text()) == {"seed": 3, "quick": True}


def test_figures_refuse_a_folder_of_unknown_figures(tmp_path, capsys):
    (tmp_path / "bayes_ratio.png").write_bytes(b"not ours")
    rc = main([*CHEAP, "--out", str(tmp_path)])
    assert rc == 2 and "unknown configuration" in capsys.readouterr().err
    assert (tmp_path / "bayes_ratio.png").read_bytes() == b"not ours"


def test_committed_figures_record_their_configuration():
    """The committed folder says it was made with the defaults, so `make figures` may refresh it."""
    from pathlib import Path

    stamp = Path(__file__).resolve().parents[3] / "figures" / "figures_run.json"
    assert json.loads(stamp.read_text()) == {"seed": 0, "quick": False}
