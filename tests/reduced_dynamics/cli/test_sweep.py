"""`reduced-dynamics sweep` and `sweep-table`: the examples' --quick sizes end to end, one-line errors, exit codes."""

import json
from pathlib import Path

import pytest

from reduced_dynamics.cli import main

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "sweeps"


@pytest.mark.parametrize(
    ("spec", "points", "metric"),
    [("trained_risk_vs_L.toml", 8, "risk"), ("drift_law.toml", 4, "gamma")],
)
def test_examples_quick_end_to_end(spec, points, metric, tmp_path, capsys):
    out = tmp_path / "s"
    rc = main(["sweep", str(EXAMPLES / spec), "--quick", "--out", str(out), "--workers", "2", "--json", "--quiet"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["n_points"] == res["n_done"] == points and res["n_failed"] == 0
    pd = pytest.importorskip("pandas")
    df = pd.read_csv(res["table"])
    assert len(df) == points and metric in df.columns and df[metric].notna().all()
    # rerun: everything cached
    assert main(["sweep", str(EXAMPLES / spec), "--quick", "--out", str(out), "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["n_cached"] == points


@pytest.mark.parametrize("spec", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_examples_full_size_validate(spec, capsys):
    # the paper-scale grids pass every point's validation (the dry run runs none of them)
    assert main(["sweep", str(EXAMPLES / spec), "--dry-run", "--json", "--out", "/nonexistent/never-made"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["points"] >= 18 and plan["cached"] == 0
    assert not Path("/nonexistent/never-made").exists()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('command = "nope"\n', "`command`"),
        ('command = "run"\n[axes]\nheads = []\n', "`axes.heads`"),
        ('command = "run"\n[axes]\nwidth = [1]\n', "`axes.width`"),
        ('command = "run"\n[axes]\nL = [20, 0]\n', "`--L`"),
        ('command = "run"\n[fixed]\nt-end = -1.0\n', "`--t-end`"),
        ("command = [\n", "TOML"),
    ],
)
def test_bad_spec_is_one_line_and_exit_2(text, named, tmp_path, capsys):
    spec = tmp_path / "bad.toml"
    spec.write_text(text)
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and named in err[0], err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_failed_point_exit_1_and_table(tmp_path, capsys):
    # plain SGD at lr 10 diverges: `train` exits 3, a failed point (omega0 = ±30, the former example, is now bad
    # input refused before any point runs: test_bad_start_in_a_spec_is_exit_2)
    spec = tmp_path / "s.toml"
    spec.write_text(
        'command = "train"\n[fixed]\nsteps = 20\noptimizer = "sgd"\nd = 2\nL = 4\nbatch = 8\neval-prompts = 64\n'
        "[axes]\nlr = [1e-3, 10.0]\n"
    )
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1", "--quiet"])
    text = capsys.readouterr().out
    assert rc == 1 and "1/2 points done" in text and "1 failed" in text and "`--lr`" in text
    assert main(["sweep-table", str(tmp_path / "o"), "--json"]) == 0
    files = json.loads(capsys.readouterr().out)
    assert (files["n_rows"], files["n_failed"]) == (2, 1)


@pytest.mark.parametrize(
    ("body", "flag"),
    [
        ('command = "run"\n[fixed]\nt-end = 1.0\nmu0 = "1,1"\n[axes]\nomega0 = ["0.1,-0.1", "30,-30"]\n', "--omega0"),
        ('command = "check"\n[fixed]\nquick = true\nonly = "nonexistent"\n', "--only"),
        ('command = "run"\n[fixed]\nt-end = 1\nheads = 10000\n', "--heads"),
    ],
    ids=["overflowing-omega0", "unknown-check", "heads-10000"],
)
def test_bad_start_in_a_spec_is_exit_2(body, flag, tmp_path, capsys):
    """A bad value inside a spec (an overflowing omega0, only = "nonexistent", heads = 10000) passed validation,
    failed at run time, was cached as failed and the sweep exited 1: refused up front, one line naming the flag,
    exit 2, nothing stored."""
    spec = tmp_path / "s.toml"
    spec.write_text(body)
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"`{flag}`" in err[0], err
    assert not (tmp_path / "o" / "points").exists()


def test_sweep_table_of_a_folder_without_results(tmp_path, capsys):
    rc = main(["sweep-table", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "no sweep results" in err[0]


def test_workers_with_a_remote_scheduler_is_refused(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('command = "run"\n[fixed]\nt-end = 1.0\n')
    rc = main(["sweep", str(spec), "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "`--workers`" in err[0]


def test_every_sweep_command_validates_before_running():
    """A new command in SWEEP_COMMANDS must be dry-runnable: it validates before starting its Progress."""
    from reduced_dynamics.sweep.commands import _available_commands, validate

    for name in _available_commands():
        inv = validate(name, {})  # defaults: the dry run must stop at the command's Progress, not run it
        assert inv.argv[0] == name and inv.key
