"""The gradient flow of the exact finite-L risk: energy identity, agreement with the corrected
flow at large L, early stops and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from reduced_dynamics import Setting
from reduced_dynamics.dynamics.corrected_loss import integrate_corrected_flow
from reduced_dynamics.exact.evaluator import exact_risk
from reduced_dynamics.exact.flow import ExactFlowResult, integrate_exact_flow

PAPER = Setting(d=5, L=40, sigma2=0.1)


def test_risk_decreases_at_the_rate_minus_squared_gradient():
    omega0, mu0 = [0.3], [0.5]
    # along a gradient flow dR/dt = -|∇R|²: compare a centred difference of the recorded risk
    times = np.array([0.0, 0.3, 0.31])
    res = integrate_exact_flow(omega0, mu0, PAPER, t_end=0.31, times=times, rtol=1e-9, atol=1e-11)
    assert isinstance(res, ExactFlowResult)
    assert res.success and res.status == 0
    assert np.all(np.diff(res.risk) < 0)
    slope = (res.risk[2] - res.risk[1]) / 0.01
    mid = 0.5 * (res.omega[1] + res.omega[2]), 0.5 * (res.mu[1] + res.mu[2])
    g = exact_risk(mid[0], mid[1], PAPER, grad=True)
    g2 = float(np.sum(g.grad_omega**2) + np.sum(g.grad_mu**2))
    assert slope == pytest.approx(-g2, rel=2e-3)
    assert res.risk[0] == pytest.approx(exact_risk(omega0, mu0, PAPER).risk, abs=1e-15)


def test_at_large_L_the_exact_flow_follows_the_corrected_flow():
    # at small |ω| the two risks differ by O(1/L²) (about 1e-6 here), and so do their flows over a unit time;
    # measured: 1.2e-6 in ω and 5.6e-7 in μ at t = 0.5 (the state moves by 0.04)
    s = Setting(d=5, L=4000, sigma2=0.1)
    times = np.array([0.0, 0.5])
    exact = integrate_exact_flow([0.2, -0.2], [2.0, -2.0], s, t_end=0.5, times=times, rtol=1e-6, atol=1e-9)
    corr = integrate_corrected_flow([0.2, -0.2], [2.0, -2.0], times, s)
    np.testing.assert_allclose(exact.omega, corr.omega, atol=1e-5)
    np.testing.assert_allclose(exact.mu, corr.mu, atol=1e-5)
    assert np.max(np.abs(exact.omega[-1] - exact.omega[0])) > 1e-2  # the flow moved


def test_budget_exhaustion_returns_the_path_so_far():
    res = integrate_exact_flow([0.3], [0.5], PAPER, t_end=100.0, n_eval=20, max_evaluations=12)
    assert res.status == 2 and not res.success
    assert 1 <= res.t.size < 20
    assert res.omega.shape == (res.t.size, 1) and res.risk.shape == (res.t.size,)
    assert res.n_gradient_evaluations == 12


def test_log_spaced_default_times():
    res = integrate_exact_flow([0.3], [0.5], PAPER, t_end=1.0, n_eval=4, t_first=0.01, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(res.t, [0.0, 0.01, 0.1, 1.0])


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"omega0": [5.0]}, "`omega0`"),
        ({"mu0": [1.0, 2.0]}, "`omega0` and `mu0`"),
        ({"t_end": -1.0}, "`t_end`"),
        ({"t_end": 1e13}, "`t_end`"),
        ({"method": "RK45"}, "`method`"),
        ({"rtol": 1.0}, "`rtol`"),
        ({"n_eval": 0}, "`n_eval`"),
        ({"times": [0.0, 2.0, 1.0]}, "`times`"),
        ({"t_first": 5.0}, "`t_first`"),
        ({"setting": Setting(d=5, L=1, sigma2=0.1)}, "`setting.L`"),
    ],
)
def test_bad_input_names_the_parameter(kw, name):
    args = {"omega0": [0.3], "mu0": [0.5], "setting": PAPER, "t_end": 1.0}
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        integrate_exact_flow(args.pop("omega0"), args.pop("mu0"), args.pop("setting"), **args)
