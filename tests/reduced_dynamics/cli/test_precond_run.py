"""`reduced-dynamics run --sigma ...`: the preconditioned flow's JSON, files, and bad input (exit 2, one line)."""

import json

import numpy as np
import pytest

from reduced_dynamics.cli import main
from reduced_dynamics.cli._setting import covariance_from_eigs
from reduced_dynamics.precond.flow import precond_limit
from reduced_dynamics.precond.metrics import scale_free_distance
from reduced_dynamics.setting import Setting

EIGS = "0.5,1.375,2.25,3.125,4"


def test_json_reports_w_and_distance(capsys, tmp_path):
    rc = main(
        ["run", "--sigma-eigs", EIGS, "--sigma-seed", "0", "--init", "symmetric", "--t-end", "1e3", "--json"]
        + ["--out", str(tmp_path)]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["success"] is True
    Sig = covariance_from_eigs([0.5, 1.375, 2.25, 3.125, 4.0], seed=0)
    W = np.array(out["W"])
    assert W.shape == (5, 5) and len(out["omega"]) == len(out["mu"]) == 2
    # the reported distance is the distance of the reported W (independent recomputation)
    assert out["distance_sigma_inv"] == pytest.approx(scale_free_distance(W, np.linalg.inv(Sig)), abs=1e-12)
    lim = precond_limit(Setting(d=5, L=40, sigma2=0.1, Sigma=Sig))
    assert out["limit"]["distance_sigma_inv"] == pytest.approx(lim.distance_sigma_inv, rel=1e-12)
    assert out["distance_limit"] < 2e-3
    assert out["sign_matched"] is True
    data = np.load(out["files"]["trajectory"])
    np.testing.assert_allclose(data["W"][-1], W)
    np.testing.assert_allclose(data["Sigma"], Sig)


def test_text_output(capsys):
    rc = main(["run", "--sigma-eigs", EIGS, "--init", "symmetric", "--t-end", "100", "--quiet"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "distance of W to Σ⁻¹" in text and "η_eff" in text


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--t-end", "-1"], "--t-end"),
        (["--t-end", "1e13"], "--t-end"),
        (["--omega0", "0.1,-0.1"], "--omega0"),
        (["--method", "Euler"], "--method"),
        (["--method", "batch-Radau"], "--method"),
        (["--rtol", "0.5"], "--rtol"),
        (["--no-plot"], "--no-plot"),  # only the isotropic run draws a portrait: refused by the flag table
        (["--objective", "corrected"], "--objective"),
        (["--sigma-seed", "-1"], "--sigma-seed"),
    ],
)
def test_bad_input_exit_2_one_line(capsys, extra, flag):
    rc = main(["run", "--sigma-eigs", EIGS, "--quiet"] + extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and flag in err[0]


def _expected_flow(seed, t_end, **kw):
    """The CLI's start for Σ, recomputed: (ω, μ) of `--seed`, a shared W with i.i.d. N(0, 1/d) entries drawn
    from the stream (seed, 1); integrated by the engine with the CLI's defaults (LSODA, 400 output times)."""
    from reduced_dynamics import integrate, reduced_model
    from reduced_dynamics.models._heads import initial_state

    Sig = covariance_from_eigs([0.5, 1.375, 2.25, 3.125, 4.0], seed=0)
    model = reduced_model(Setting(Sigma=Sig), n_heads=2)
    w0, m0 = initial_state(2, scale=0.01, seed=seed)
    W0 = np.random.default_rng([seed, 1]).standard_normal((5, 5)) / np.sqrt(5)
    return integrate(model, model.state(w0, m0, W0), t_end=t_end, **kw), W0


def test_n_init_now_works_with_sigma(capsys):
    """`--n-init` (refused with Σ before 0.2) integrates the starts of seeds S..S+N-1: N × H (ω, μ), N × d × d W,
    each row the flow of its own start (to t = 20, where every state has moved by O(1): 1.6 in W; a third of the
    gradients of t = 100)."""
    rc = main(["run", "--sigma-eigs", EIGS, "--n-init", "3", "--seed", "1", "--t-end", "20", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["success"] == [True] * 3 and out["seeds"] == [1, 2, 3]
    assert np.shape(out["omega"]) == (3, 2) and np.shape(out["W"]) == np.shape(out["W0"]) == (3, 5, 5)
    for i in range(3):
        flow, W0 = _expected_flow(1 + i, 20.0)
        assert np.max(np.abs(flow.W[-1] - W0)) > 0.5
        np.testing.assert_array_equal(out["W0"][i], W0)
        np.testing.assert_allclose(out["omega"][i], flow.omega[-1], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(out["W"][i], flow.W[-1], rtol=1e-12, atol=1e-15)


def test_method_rk45_now_works_with_sigma(capsys):
    """`--method` with Σ is any method of the engine (was LSODA, Radau or BDF only)."""
    rc = main(["run", "--sigma-eigs", EIGS, "--method", "RK45", "--t-end", "20", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["success"] is True and out["method"] == out["config"]["method"] == "RK45"
    flow, _ = _expected_flow(0, 20.0, method="RK45")
    np.testing.assert_allclose(out["W"], flow.W[-1], rtol=1e-12, atol=1e-15)
    lsoda, _ = _expected_flow(0, 20.0)  # the same flow, to the solvers' tolerances
    np.testing.assert_allclose(out["W"], lsoda.W[-1], rtol=0, atol=1e-5)


def test_sigma_flow_stops_at_a_stationary_point_with_status_1(capsys):
    """From seed 0 both heads take one sign and the Σ flow reaches the one-sign minimum: it now stops there with
    status 1 (the old Σ driver had no stationarity event and ran on to --t-end); a success, exit 0."""
    rc = main(["run", "--sigma-eigs", EIGS, "--sigma-seed", "0", "--t-end", "1e4", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["success"] is True and out["status"] == 1
    assert out["grad_norm"] < 1.001e-10 and 0 < out["t"] < 1e4  # stopped where |∇L| crossed 1e-10
