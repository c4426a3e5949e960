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


def test_figures_workers_make_the_same_files(tmp_path, capsys):
    """`--workers 2` runs the figures in parallel processes; the data files equal the serial run's, bit for bit."""
    import numpy as np

    only = ["--only", "bayes_ratio,approx_vs_mc", "--quick", "--quiet", "--json"]
    assert main(["figures", *only, "--out", str(tmp_path / "w1")]) == 0
    serial = json.loads(capsys.readouterr().out)
    assert main(["figures", *only, "--workers", "2", "--out", str(tmp_path / "w2")]) == 0
    parallel = json.loads(capsys.readouterr().out)
    assert list(parallel) == list(serial) == ["bayes_ratio", "approx_vs_mc"]  # registry order, not finishing order
    for name in serial:
        a, b = np.load(tmp_path / "w1" / f"{name}.npz"), np.load(tmp_path / "w2" / f"{name}.npz")
        assert a.files == b.files
        for k in a.files:
            assert np.array_equal(a[k], b[k]), (name, k)
        assert {k: v for k, v in parallel[name].items() if k != "seconds"} == {
            k: v for k, v in serial[name].items() if k != "seconds"
        }


def test_figures_workers_out_of_range(tmp_path, capsys):
    rc = main(["figures", "--quick", "--only", "bayes_ratio", "--workers", "0", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "`--workers`" in err[0]
