"""`figures` never silently overwrites figures made with another configuration (issue 9: data loss)."""

import json
from pathlib import Path

import pytest

from reduced_dynamics.cli import main

CHEAP = ["figures", "--quick", "--only", "risk_vs_L", "--quiet"]


def test_figures_refuse_another_configuration_without_force(tmp_path, capsys):
    out = str(tmp_path / "f")
    assert main([*CHEAP, "--out", out]) == 0
    before = (tmp_path / "f" / "risk_vs_L.npz").read_bytes()
    capsys.readouterr()
    rc = main([*CHEAP, "--seed", "3", "--out", out])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "`--out`" in err[0] and "`--force`" in err[0]
    assert (tmp_path / "f" / "risk_vs_L.npz").read_bytes() == before  # untouched
    assert main([*CHEAP, "--out", out]) == 0  # same configuration: allowed
    assert main([*CHEAP, "--seed", "3", "--force", "--out", out]) == 0
    stamp = json.loads((tmp_path / "f" / "figures_run.json").read_text())
    assert stamp == {"figures": {"risk_vs_L": {"seed": 3, "quick": True}}}


def test_figures_refuse_a_folder_of_unknown_figures(tmp_path, capsys):
    (tmp_path / "risk_vs_L.png").write_bytes(b"not ours")
    rc = main([*CHEAP, "--out", str(tmp_path)])
    assert rc == 2 and "unknown configuration" in capsys.readouterr().err
    assert (tmp_path / "risk_vs_L.png").read_bytes() == b"not ours"


def test_committed_figures_record_their_configuration():
    """The committed folder says every figure was made with the defaults, so `make figures` may refresh it
    (its figures_run.json is the folder-wide record of 0.2, read as one record per figure present)."""
    from pathlib import Path

    from reduced_dynamics.cli.figures import read_stamps
    from reduced_dynamics.figures.registry import FIGURES

    folder = Path(__file__).resolve().parents[3] / "figures"
    assert read_stamps(folder, list(FIGURES)) == {n: {"seed": 0, "quick": False} for n in FIGURES}


def test_figures_workers_make_the_same_files(tmp_path, capsys, quick_figure):
    """`--workers 2` runs the figures in parallel processes; the data files equal the serial run's, bit for bit.

    The serial run is the session's ``FIGURES[name].run(quick=True, seed=0)`` under a one-thread BLAS limit
    (tests/conftest.py's ``quick_figure``), what ``figures --quick`` runs for each figure in its own process (its
    printed key numbers are the run's); the serial command itself is run by the tests above.
    """
    import numpy as np

    only = ["--only", "risk_vs_L,approx_vs_mc", "--quick", "--quiet", "--json"]
    assert main(["figures", *only, "--workers", "2", "--out", str(tmp_path / "w2")]) == 0
    parallel = json.loads(capsys.readouterr().out)
    assert list(parallel) == ["risk_vs_L", "approx_vs_mc"]  # registry order, not finishing order
    for name in parallel:
        folder, serial = quick_figure(name)
        a, b = np.load(folder / f"{name}.npz"), np.load(tmp_path / "w2" / f"{name}.npz")
        assert a.files == b.files
        for k in a.files:
            assert np.array_equal(a[k], b[k]), (name, k)
        assert {k: v for k, v in parallel[name].items() if k != "seconds"} == serial["key_numbers"]


def test_figures_workers_out_of_range(tmp_path, capsys):
    rc = main(["figures", "--quick", "--only", "risk_vs_L", "--workers", "0", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "`--workers`" in err[0]


# ----------------------------------------------------------------------------- issue 23: one record per figure

CHEAP2 = ["figures", "--quick", "--quiet"]


def _stamps(folder):
    from reduced_dynamics.cli.figures import read_stamps
    from reduced_dynamics.figures.registry import FIGURES

    return read_stamps(folder, list(FIGURES))


def test_force_on_one_figure_does_not_restamp_the_others(tmp_path, capsys):
    """`figures --force --seed 1 --only risk_vs_L` restamped the whole folder as seed 1, so a later
    `figures --seed 1 --only approx_vs_mc` silently replaced the seed-0 approx_vs_mc.npz: each figure has its
    own record now; the seed-0 figure keeps its record and is refused."""
    out = str(tmp_path / "f")
    assert main([*CHEAP2, "--only", "risk_vs_L,approx_vs_mc", "--out", out]) == 0
    assert main([*CHEAP2, "--force", "--seed", "1", "--only", "risk_vs_L", "--out", out]) == 0
    assert _stamps(out) == {"risk_vs_L": {"seed": 1, "quick": True}, "approx_vs_mc": {"seed": 0, "quick": True}}
    before = (tmp_path / "f" / "approx_vs_mc.npz").read_bytes()
    capsys.readouterr()
    rc = main([*CHEAP2, "--seed", "1", "--only", "approx_vs_mc", "--out", out])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "approx_vs_mc made with {'seed': 0, 'quick': True}" in err[0]
    assert (tmp_path / "f" / "approx_vs_mc.npz").read_bytes() == before
    # the seed-1 figure is this configuration's: made again without --force
    assert main([*CHEAP2, "--seed", "1", "--only", "risk_vs_L", "--out", out]) == 0


class _Killed(BaseException):
    """Stands in for SIGKILL: nothing after the raise runs (no except clause of the command catches it)."""


def test_a_killed_run_does_not_block_the_same_command(tmp_path, capsys, monkeypatch):
    """A SIGKILLed `figures` left files without their stamp (written only at the end), so the same command was
    refused afterwards ("unknown configuration"). Each figure is claimed before it is made: after a death
    midway (simulated: the first figure's data file written, then the process gone), the same command runs,
    another seed is refused."""
    import reduced_dynamics.figures.registry as registry

    out = tmp_path / "f"

    def dies_midway(*, out, **kwargs):
        Path(out, "risk_vs_L.npz").write_bytes(b"half")
        raise _Killed

    monkeypatch.setattr(registry, "run_figures", dies_midway)
    with pytest.raises(_Killed):
        main([*CHEAP2, "--only", "risk_vs_L,approx_vs_mc", "--out", str(out)])
    monkeypatch.undo()
    assert _stamps(out)["risk_vs_L"] == {"seed": 0, "quick": True}
    capsys.readouterr()
    rc = main([*CHEAP2, "--seed", "5", "--only", "risk_vs_L", "--out", str(out)])
    assert rc == 2 and "`--force`" in capsys.readouterr().err
    assert main([*CHEAP2, "--only", "risk_vs_L,approx_vs_mc", "--out", str(out)]) == 0
    assert (out / "risk_vs_L.npz").read_bytes() != b"half"


def test_the_record_of_0_2_is_read_per_figure(tmp_path, capsys):
    """A folder stamped by 0.2 (one {"seed", "quick"} for the folder) keeps working: the record applies to the
    figures present; a figure not there yet is made under this run's configuration without --force."""
    out = tmp_path / "f"
    assert main([*CHEAP2, "--only", "risk_vs_L", "--out", str(out)]) == 0
    (out / "figures_run.json").write_text(json.dumps({"seed": 0, "quick": True}))
    assert _stamps(out) == {"risk_vs_L": {"seed": 0, "quick": True}}
    assert main([*CHEAP2, "--seed", "2", "--only", "approx_vs_mc", "--out", str(out)]) == 0
    assert _stamps(out) == {"risk_vs_L": {"seed": 0, "quick": True}, "approx_vs_mc": {"seed": 2, "quick": True}}


@pytest.mark.parametrize("second", ["risk_vs_L", "bayes_ratio"])
def test_concurrent_claims_take_turns(tmp_path, monkeypatch, second):
    """Two runs claiming figures in one folder at once (issue 23): neither claim is lost (other figures),
    and of two configurations claiming one figure only the first gets it. The record's read is slowed so
    that, without the folder lock, both runs read it before either writes (a lost update, or both let through)."""
    import threading
    import time

    from reduced_dynamics.cli import figures as cmd

    real = cmd.read_stamps

    def slow_read(out, names):
        found = real(out, names)
        time.sleep(0.3)
        return found

    monkeypatch.setattr(cmd, "read_stamps", slow_read)
    names = ["bayes_ratio", "risk_vs_L"]
    errors = []

    def claim(config, fig):
        try:
            cmd.claim_figures(tmp_path, config, force=False, names=[fig], all_names=names)
        except ValueError as exc:
            errors.append(str(exc))

    threads = [
        threading.Thread(target=claim, args=({"seed": 0, "quick": True}, "bayes_ratio")),
        threading.Thread(target=claim, args=({"seed": 1, "quick": True}, second)),
    ]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join()
    record = json.loads((tmp_path / cmd.STAMP).read_text())["figures"]
    if second == "risk_vs_L":
        assert not errors
        assert record == {"bayes_ratio": {"seed": 0, "quick": True}, "risk_vs_L": {"seed": 1, "quick": True}}
    else:
        assert len(errors) == 1 and "--force" in errors[0]
        assert record == {"bayes_ratio": {"seed": 0, "quick": True}}
