"""The `exact-risk` CLI command, in-process through reduced_dynamics.cli.main and once as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from reduced_dynamics import Setting
from reduced_dynamics.cli import main
from reduced_dynamics.estimation.predictors import MultiHead
from reduced_dynamics.estimation.risk import estimate_risk


def run_json(capsys, *argv):
    rc = main(["exact-risk", "--json", *argv])
    out, err = capsys.readouterr()
    assert rc == 0 and err == ""
    return json.loads(out)


def test_json_prints_risk_and_error_estimate_matching_monte_carlo(capsys):
    doc = run_json(capsys, "--omega", "0.3,-0.3", "--mu", "1.5,-1.5", "--L", "20")
    assert set(doc) >= {"risk", "error_estimate", "config", "seconds"}
    assert "grad_omega" not in doc
    assert 0 < doc["error_estimate"] < 1e-8
    assert doc["config"] == {
        "d": 5, "L": 20, "sigma2": 0.1, "omega": [0.3, -0.3], "mu": [1.5, -1.5], "grad": False, "tol": 1e-12,
    }  # fmt: skip
    mc = estimate_risk(MultiHead([0.3, -0.3], [1.5, -1.5]), Setting(d=5, L=20, sigma2=0.1), n_prompts=100_000,
                       seed=5, conditional=True)  # fmt: skip
    assert abs(doc["risk"] - mc.risk) < 3 * mc.stderr


def test_grad_flag_and_space_separated_lists(capsys):
    a = run_json(capsys, "--omega", "0.2", "-0.1", "--mu", "1", "-2", "--grad", "--d", "3", "--sigma2", "0.5")
    b = run_json(capsys, "--omega", "0.2,-0.1", "--mu", "1,-2", "--grad", "--d", "3", "--sigma2", "0.5")
    assert a["risk"] == b["risk"] and a["grad_omega"] == b["grad_omega"]
    assert len(a["grad_omega"]) == 2 and len(a["grad_mu"]) == 2
    assert a["grad_error_estimate"] < 1e-6


def test_default_state_is_the_manifold_point_of_risk(capsys):
    from reduced_dynamics.dynamics.manifold import mu_gamma

    doc = run_json(capsys, "--L", "10")
    m = float(mu_gamma(0.1, Setting(d=5, L=10, sigma2=0.1)))
    assert doc["config"]["omega"] == [0.1, -0.1] and doc["config"]["mu"] == [m, -m]


def test_text_output(capsys):
    assert main(["exact-risk", "--omega", "0", "--mu", "1"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "risk            1.1275" in out  # ω = 0: 1 + σ² + (1 + σ²)/L exactly
    assert "error_estimate" in out


def test_out_writes_the_named_file(capsys, tmp_path):
    doc = run_json(capsys, "--omega", "0.1", "--mu", "2", "--out", str(tmp_path))
    name = "exact_risk_d5_L40_sigma2-0.1_omega-0.1_mu-2.0_grad0_tol-1e-12.json"
    assert doc["file"].endswith(name)
    assert json.loads((tmp_path / name).read_text())["risk"] == doc["risk"]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--omega", "0.1,0.2", "--mu", "1"], "--omega"),
        (["--omega", "5", "--mu", "1"], "--omega"),
        (["--omega", "0.1", "--mu", "1e300"], "--mu"),
        (["--omega", "0.1,,0.2", "--mu", "1,2"], "--omega"),
        (["--omega", "0.1", "--mu", "nan"], "--mu"),
        (["--omega", "0.1", "--mu", "1", "--L", "1"], "--L"),
        (["--omega", "0.1", "--mu", "1", "--tol", "0.5"], "--tol"),
        (["--omega", *["0.1"] * 9, "--mu", *["1"] * 9], "--omega"),
        (["--mu", "1"], "--mu"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, flag, capsys):
    assert main(["exact-risk", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and flag in err


def test_subprocess_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "reduced_dynamics", "exact-risk", "--omega", "0", "--mu", "2", "--L", "10", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["risk"] == pytest.approx(1.1 + 4 * 1.1 / 10, abs=1e-12)
