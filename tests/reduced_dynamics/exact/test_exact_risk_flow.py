"""The gradient flow of the exact finite-L risk (``reduced_model(setting, objective="exact")``): energy identity,
agreement with the corrected flow at large L, bad input. Its stops (the evaluator's range, the budget) and its
output times: the engine's flow/test_status.py and flow/test_integrate.py."""

from __future__ import annotations

import numpy as np
import pytest

from reduced_dynamics import Setting, integrate, reduced_model
from reduced_dynamics.exact.evaluator import exact_risk

PAPER = Setting(d=5, L=40, sigma2=0.1)


def test_risk_decreases_at_the_rate_minus_squared_gradient():
    m = reduced_model(PAPER, n_heads=1, objective="exact")
    omega0, mu0 = [0.3], [0.5]
    # along a gradient flow dR/dt = -|∇R|²: compare a centred difference of the recorded risk
    times = np.array([0.0, 0.3, 0.31])
    res = integrate(m, m.state(omega0, mu0), times=times, rtol=1e-9, atol=1e-11, stationarity_tol=0)
    assert res.method == "BDF" and res.model is m
    assert res.success and res.status == 0
    assert np.all(np.diff(res.loss) < 0)
    slope = (res.loss[2] - res.loss[1]) / 0.01
    mid = 0.5 * (res.omega[1] + res.omega[2]), 0.5 * (res.mu[1] + res.mu[2])
    g = exact_risk(mid[0], mid[1], PAPER, grad=True)
    g2 = float(np.sum(g.grad_omega**2) + np.sum(g.grad_mu**2))
    assert slope == pytest.approx(-g2, rel=2e-3)
    assert res.loss[0] == pytest.approx(exact_risk(omega0, mu0, PAPER).risk, abs=1e-15)


def test_at_large_L_the_exact_risk_flow_follows_the_corrected_flow():
    # at small |ω| the two risks differ by O(1/L²) (about 1e-6 here), and so do their flows over a unit time;
    # measured: 1.2e-6 in ω and 5.6e-7 in μ at t = 0.5 (the state moves by 0.04)
    s = Setting(d=5, L=4000, sigma2=0.1)
    times = np.array([0.0, 0.5])
    ex = reduced_model(s, n_heads=2, objective="exact")
    co = reduced_model(s, n_heads=2, objective="corrected")
    exact = integrate(ex, ex.state([0.2, -0.2], [2.0, -2.0]), times=times, rtol=1e-6, atol=1e-9, stationarity_tol=0)
    corr = integrate(
        co, co.state([0.2, -0.2], [2.0, -2.0]), times=times, method="Radau", rtol=1e-9, atol=1e-12, stationarity_tol=0
    )
    assert exact.success and corr.success
    np.testing.assert_allclose(exact.omega, corr.omega, atol=1e-5)
    np.testing.assert_allclose(exact.mu, corr.mu, atol=1e-5)
    assert np.max(np.abs(exact.omega[-1] - exact.omega[0])) > 1e-2  # the flow moved


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"omega0": [5.0]}, "`y0`"),  # beyond the evaluator's range omega_max = 1.24
        ({"mu0": [1.0, 2.0]}, "`mu`"),
        ({"t_end": -1.0}, "`t_end`"),
        ({"t_end": 1e13}, "`t_end`"),
        ({"method": "Euler"}, "`method`"),
        ({"method": "batch-Radau"}, "`method`"),
        ({"rtol": 1.0}, "`rtol`"),
        ({"n_times": 0}, "`n_times`"),
        ({"times": [0.0, 2.0, 1.0]}, "`times`"),
        ({"t_first": -5.0}, "`t_first`"),
        ({"setting": Setting(d=5, L=1, sigma2=0.1)}, "`setting.L`"),
        ({"tol": 1.0}, "`tol`"),
        ({"fd_step": 1.0}, "`fd_step`"),
        ({"n_heads": 17}, "`n_heads`"),
    ],
)
def test_bad_input_names_the_parameter(kw, name):
    args = {"omega0": [0.3], "mu0": [0.5], "setting": PAPER, "t_end": 1.0}
    args.update(kw)
    layout = {k: args.pop(k) for k in ("tol", "fd_step") if k in args}
    n_heads = args.pop("n_heads", 1)
    with pytest.raises(ValueError, match=name):
        m = reduced_model(args.pop("setting"), n_heads=n_heads, objective="exact", **layout)
        integrate(m, m.state(args.pop("omega0"), args.pop("mu0")), **args)
