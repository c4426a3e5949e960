"""``run --activation``: the reduced flow of L̃_f from the command line; ``train --activation`` trains the model with f."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.activation_dynamics.flow import drift_gamma, integrate_act_flow
from reduced_dynamics.cli import main
from reduced_dynamics.dynamics.flow import initial_state


def test_run_activation_json_matches_the_library(capsys, tmp_path):
    rc = main(
        [
            "run",
            "--activation",
            "square",
            "--activation-c",
            "0.5",
            "--t-end",
            "1e4",
            "--json",
            "--quiet",
            "--out",
            str(tmp_path),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["success"] and out["activation"] == "square" and out["c_f"] == 1.0
    s = Setting(activation="square", activation_c=0.5)
    w0, m0 = initial_state(2, kind="random", scale=0.01, seed=0)
    r = integrate_act_flow(w0, m0, s, t_end=1e4)
    np.testing.assert_allclose(out["omega"], r.omega[-1], rtol=1e-12)
    assert out["eta_claim"] == pytest.approx(r.eta_claim) and out["gamma_drift_law"] == pytest.approx(
        drift_gamma(1e4, s)
    )
    assert out["sign_matched"] and out["zero_sum"] and out["homogeneous"]
    assert set(out["files"]) == {"trajectory", "summary"}
    assert json.loads(open(out["files"]["summary"]).read())["eta_star"] == pytest.approx(s.eta_star)


def test_run_activation_text_and_affine_has_no_drift_law(capsys):
    assert main(["run", "--activation", "affine", "--activation-c", "0.2", "--t-end", "100", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "f = affine" in text and "drift law nan" in text


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--activation", "relu"], "`--activation`"),
        (["--activation", "tanh", "--n-init", "2"], "`--n-init`"),
        (["--activation", "tanh", "--omega0", "0.1,-0.1"], "`--omega0` and `--mu0`"),
        (["--activation", "affine", "--activation-c", "-1"], "`--activation-c`"),
        (["--activation", "tanh", "--omega0", "9,-9", "--mu0", "1,-1"], "quadrature"),
        (["--activation", "tanh", "--d", "6", "--tasks", "1-4,3-6"], "`--tasks`"),
        (["--activation", "tanh", "--sigma-eigs", "1,2,3,4,5", "--sigma-seed", "0"], "`--sigma`"),
    ],
)
def test_bad_activation_input_one_line_exit_2(capsys, extra, message):
    assert main(["run", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_train_with_activation_goes_through_the_trainer(capsys):
    rc = main(
        [
            "train",
            "--activation",
            "tanh",
            "--d",
            "3",
            "--L",
            "10",
            "--steps",
            "20",
            "--batch",
            "8",
            "--n-eval",
            "200",
            "--json",
            "--quiet",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["config"]["setting"]["activation"] == "tanh"


def test_train_affine_normaliser_breakdown_exits_3_with_one_reason(capsys):
    rc = main(["train", "--activation", "affine", "--activation-c", "1", "--steps", "3000", "--quiet", "--json"])
    captured = capsys.readouterr()
    assert rc == 3 and "normaliser" in captured.out + captured.err


def test_risk_activation_json_paired_and_consistent(capsys):
    """risk --activation: the reduced model with f vs debiased GD on common prompts; the paired difference is the
    difference of the two estimates, L̃_f is the library's, and the reduced model equals act_mc_risk on the same
    prompts (same seed: the same statistics stream)."""
    from reduced_dynamics.activation_dynamics.loss import act_loss, act_mc_risk

    rc = main(
        [
            "risk",
            "--activation",
            "square",
            "--omega",
            "0.15,-0.15",
            "--mu",
            "1.7,-1.7",
            "--prompts",
            "4000",
            "--seed",
            "3",
            "--json",
            "--quiet",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    est, diff = out["estimates"], out["differences"]
    assert rc == 0
    assert diff["reduced_f-debiased_gd_star"]["risk"] == pytest.approx(
        est["reduced_f"]["risk"] - est["debiased_gd_star"]["risk"], abs=1e-12
    )
    s = Setting(activation="square")
    om, mu = np.array([0.15, -0.15]), np.array([1.7, -1.7])
    assert out["approx_loss"] == pytest.approx(act_loss(om, mu, s))
    assert est["reduced_f"]["risk"] == pytest.approx(act_mc_risk(om, mu, s, n_prompts=4000, seed=3).risk, rel=1e-12)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--omega", "0.1"], "`--omega` and `--mu`"),
        (["--d", "6", "--tasks", "1-4,3-6"], "`--tasks`"),
        (["--prompts", "1"], "`--prompts`"),
    ],
)
def test_risk_activation_bad_input_exit_2(capsys, extra, message):
    assert main(["risk", "--activation", "tanh", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
