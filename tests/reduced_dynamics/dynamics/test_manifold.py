"""Closed-form landmarks vs direct numerical minimisation of L̃."""

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

from reduced_dynamics import approx_loss
from reduced_dynamics.dynamics.manifold import (
    drift_law_gamma,
    eta_star,
    flow_eta_gap,
    flow_manifold_gap,
    inf_loss,
    manifold_loss,
    mu_gamma,
    residual_sum_mu,
    single_head_optimum,
)
from reduced_dynamics.plots.portrait import gamma_nullcline

PROBLEMS = [(5, 40, 0.1), (3, 20, 0.5), (10, 100, 0.0), (1, 5, 2.0)]


@pytest.mark.parametrize("d,L,s2", PROBLEMS)
def test_single_head_optimum_by_numerical_minimisation(d, L, s2):
    """BFGS from a generic start finds the docs/theory.md#gradient-flow H = 1 minimiser (to 1e-6)."""
    f = lambda th: approx_loss(th[:1], th[1:], d=d, L=L, sigma2=s2)  # noqa: E731
    res = minimize(f, x0=[0.3, 0.5], method="BFGS", options={"gtol": 1e-12})
    w, m, loss = single_head_optimum(d, L, s2)
    assert abs(res.x[0]) == pytest.approx(w, abs=1e-6)
    assert abs(res.x[1]) == pytest.approx(m, abs=1e-6)
    assert res.fun == pytest.approx(loss, abs=1e-12)
    assert w == pytest.approx(1 / np.sqrt(d))


@pytest.mark.parametrize("d,L,s2", PROBLEMS)
@pytest.mark.parametrize("gamma", [0.05, 0.2, 0.5])
def test_mu_gamma_minimises_on_the_manifold(d, L, s2, gamma):
    """On ω = (γ, −γ), μ = (M, −M) the 1-D minimiser over M is μ_γ and the minimum is manifold_loss(γ)."""
    f = lambda M: approx_loss([gamma, -gamma], [M, -M], d=d, L=L, sigma2=s2)  # noqa: E731
    res = minimize_scalar(f, bracket=(0.0, 1.0), tol=1e-12)
    assert res.x == pytest.approx(mu_gamma(gamma, d=d, L=L, sigma2=s2), rel=1e-6)
    assert res.fun == pytest.approx(manifold_loss(gamma, d=d, L=L, sigma2=s2), abs=1e-12)


@pytest.mark.parametrize("d,L,s2", PROBLEMS)
def test_infimum_approached_as_gamma_to_zero(d, L, s2):
    """manifold_loss(γ) decreases to 1 + σ² − η* with excess ∝ γ⁴ (log–log slope 4)."""
    g = np.array([0.02, 0.04, 0.08])
    excess = manifold_loss(g, d=d, L=L, sigma2=s2) - inf_loss(d, L, s2)
    assert np.all(excess > 0) and np.all(np.diff(excess) > 0)
    slope = np.polyfit(np.log(g), np.log(excess), 1)[0]
    assert slope == pytest.approx(4.0, abs=0.05)
    assert 2 * 1e-4 * mu_gamma(1e-4, d=d, L=L, sigma2=s2) == pytest.approx(eta_star(d, L, s2), rel=1e-6)


@pytest.mark.parametrize("bad", [0.0, -0.1, float("nan")])
def test_mu_gamma_bad_gamma(bad):
    with pytest.raises(ValueError, match="`gamma`"):
        mu_gamma(bad, d=5, L=40, sigma2=0.1)


@pytest.mark.parametrize("d,L,s2", PROBLEMS)
def test_lag_law_from_the_gamma_nullcline(d, L, s2):
    """Independent route to the lag law: at fixed OV mass the flow sits on the γ̇ = 0 nullcline of the
    two-head plane, m = 1/(2γ(1 + cd cosh dγ²)), so η = 2γm = 1/(1 + cd cosh dγ²) and
    (η* − η)/flow_eta_gap(γ) = 1 + O(γ⁴); on S_γ (m = μ_γ) the same ratio is 1/3 + O(γ⁴)."""
    es = eta_star(d, L, s2)
    g = np.array([0.04, 0.02, 0.01]) / np.sqrt(d)
    lag = es - 2 * g * gamma_nullcline(g, d=d, L=L, sigma2=s2)
    on_s = es - 2 * g * mu_gamma(g, d=d, L=L, sigma2=s2)
    pred = flow_eta_gap(g, d=d, L=L, sigma2=s2)
    # relative corrections are O(dγ²)² ≤ (0.04²)² ~ 3e-6 times O(1) constants
    np.testing.assert_allclose(lag / pred, 1.0, rtol=1e-4)
    np.testing.assert_allclose(on_s / pred, 1.0 / 3.0, rtol=1e-4)


def test_drift_law_is_the_solution_of_the_reduced_ode():
    """γ(t) = (16 c d³ (pn/H) t)^(−1/6) solves dM/dt = (4/3)(pn/H) c d³ η γ⁵ with γ = η/(2M) exactly
    (checked by differentiating the law numerically, for p = 2, n = 1)."""
    d, L, s2, p, n, eta = 5, 40, 0.1, 2, 1, 0.8
    c = (1 + s2) / L
    t = np.geomspace(1e2, 1e6, 7)
    h = 1e-6 * t
    M = lambda tt: eta / (2 * drift_law_gamma(tt, d=d, L=L, sigma2=s2, n_positive=p, n_negative=n))  # noqa: E731
    dM = (M(t + h) - M(t - h)) / (2 * h)
    g = drift_law_gamma(t, d=d, L=L, sigma2=s2, n_positive=p, n_negative=n)
    np.testing.assert_allclose(dM, 4 / 3 * p * n / (p + n) * c * d**3 * eta * g**5, rtol=1e-7)


def test_large_gamma_is_finite_and_silent():
    """For dγ² beyond float64's sinh range the mass and loss take their limits (0 and 1 + σ²), no warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mu_gamma(20.0, d=5, L=40, sigma2=0.1) == 0.0
        assert manifold_loss(20.0, d=5, L=40, sigma2=0.1) == pytest.approx(1.1, abs=1e-15)


@pytest.mark.parametrize(
    "call,param",
    [
        (lambda: drift_law_gamma(0.0, d=5, L=40, sigma2=0.1), "`t`"),
        (lambda: drift_law_gamma(-1.0, d=5, L=40, sigma2=0.1), "`t`"),
        (lambda: flow_eta_gap(float("nan"), d=5, L=40, sigma2=0.1), "`gamma`"),
        (lambda: flow_manifold_gap(-0.1, d=5, L=40, sigma2=0.1), "`gamma`"),
        (lambda: residual_sum_mu(0.1, 0.8, d=5, n_positive=0, n_negative=1), "`n_positive`"),
        (lambda: residual_sum_mu(0.1, float("inf"), d=5, n_positive=2, n_negative=1), "`eta`"),
    ],
)
def test_drift_functions_bad_input(call, param):
    with pytest.raises(ValueError, match=param):
        call()
