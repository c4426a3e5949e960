"""``run --activation``: the reduced flow of L̃_f from the command line; ``train --activation`` trains the model with f."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reduced_dynamics import Setting, integrate, reduced_model
from reduced_dynamics.activation_dynamics.flow import drift_gamma, eta_claim
from reduced_dynamics.cli import main
from reduced_dynamics.models._heads import initial_state


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
    assert out["model"] == "activation" and out["activation_c"] == 0.5 and out["t"] == 1e4
    s = Setting(activation="square", activation_c=0.5)
    w0, m0 = initial_state(2, kind="random", scale=0.01, seed=0)
    # the engine with the options of the one run path: the model's default method (LSODA) and tolerances,
    # 400 output times (the old driver's own defaults, 1e-9/1e-12 and 60 times, are gone with it)
    model = reduced_model(s, n_heads=2)
    r = integrate(model, model.state(w0, m0), t_end=1e4, n_times=400)
    assert out["method"] == r.method == "LSODA" and (out["rtol"], out["atol"]) == (r.rtol, r.atol)
    np.testing.assert_allclose(out["omega"], r.omega[-1], rtol=1e-12)
    np.testing.assert_allclose(out["mu"], r.mu[-1], rtol=1e-12)
    assert out["eta_claim"] == pytest.approx(eta_claim(r.omega[-1], r.mu[-1], s), rel=1e-10)
    assert out["gamma_drift_law"] == pytest.approx(drift_gamma(1e4, s))
    assert out["sign_matched"] and out["zero_sum"] and out["homogeneous"]
    assert set(out["files"]) == {"trajectory", "summary"}
    assert json.loads(open(out["files"]["summary"]).read())["eta_star"] == pytest.approx(s.eta_star)


def test_run_activation_text_and_affine_has_no_drift_law(capsys):
    """The one run path's text names the activation model and prints the claimed and measured η; the activation
    and its C are in the JSON (the text of the old activation driver printed "f = affine" and "drift law nan");
    affine f has no drift law: null in the JSON, a drift of kind "none" in the limit."""
    argv = ["run", "--activation", "affine", "--activation-c", "0.2", "--t-end", "100", "--quiet"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "activation model" in text and "η claimed 2C_fγμ₊" in text and "measured μᵀT₁" in text
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["activation"] == "affine" and out["activation_c"] == 0.2
    assert out["gamma_drift_law"] is None and out["limit"]["drift"] == "none"


def test_run_affine_stops_at_a_stationary_point_with_status_1(capsys):
    """Affine L̃_f is flat along its solution manifold: the flow now stops there with status 1 (the old activation
    driver had no stationarity event and ran on to --t-end); a success, exit 0."""
    assert main(["run", "--activation", "affine", "--seed", "0", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["success"] is True and out["status"] == 1
    assert out["grad_norm"] < 1.001e-10 and 0 < out["t"] < 1e5  # stopped where |∇L| crossed 1e-10


def test_run_activation_n_init_is_a_batch(capsys):
    """`--n-init` (refused with an activation before 0.2) integrates the starts of seeds S..S+N-1 one after the
    other (the activation model has no Hessian for the batched Radau), each as its single run."""
    # 20 output times on both sides (the loss and |∇L| along the path cost a gradient per output time)
    argv = ["run", "--activation", "tanh", "--n-init", "2", "--seed", "4", "--t-end", "20", "--n-times", "20"]
    rc = main([*argv, "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["success"] == [True, True] and out["method"] == "LSODA"
    assert np.shape(out["omega"]) == (2, 2) and out["seeds"] == [4, 5]
    model = reduced_model(Setting(activation="tanh"), n_heads=2)
    for i in range(2):
        r = integrate(model, model.state(*initial_state(2, scale=0.01, seed=4 + i)), t_end=20.0, n_times=20)
        np.testing.assert_allclose(out["omega"][i], r.omega[-1], rtol=1e-12)
    assert main(["run", "--activation", "tanh", "--n-init", "60", "--method", "batch-Radau", "--t-end", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`--method`" in err[0] and "Hessian" in err[0]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--activation", "relu"], "`--activation`"),
        (["--activation", "tanh", "--omega0", "0.1,-0.1"], "`--omega0` and `--mu0`"),
        (["--activation", "affine", "--activation-c", "-1"], "`--activation-c`"),
        (["--activation", "tanh", "--omega0", "9,-9", "--mu0", "1,-1"], "quadrature"),
        (["--activation", "tanh", "--d", "6", "--tasks", "1-4,3-6"], "`--tasks`"),
        (["--activation", "tanh", "--sigma-eigs", "1,2,3,4,5", "--sigma-seed", "0"], "`--sigma/--sigma-eigs`"),
        (["--activation", "tanh", "--objective", "exact"], "`--objective`"),
        (["--activation", "tanh", "--no-plot"], "`--no-plot`"),  # refused by the flag table
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
            "--eval-prompts",
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


@pytest.mark.parametrize("c", ["1e3", "1e6"])
def test_train_affine_c_breaking_the_start_is_bad_input(c, tmp_path, capsys):
    """issue 23: --activation-c so large that the initial parameters already give a non-positive affine
    normaliser (no step ran: no learning rate to blame) is bad input, exit 2 naming --activation-c and its
    range, and nothing is written; it exited 3 ('try a smaller --lr') before."""
    out = tmp_path / "run"
    rc = main(["train", "--activation", "affine", "--activation-c", c, "--steps", "5", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "`--activation-c`" in err and "(0, 1e6]" in err
    assert "--lr" not in err
    assert not out.exists() or not any(out.iterdir())


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
    est, diff = out["estimators"], out["differences"]
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
