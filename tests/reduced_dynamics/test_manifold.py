"""Closed-form landmarks vs direct numerical minimisation of L̃."""

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

from reduced_dynamics import approx_loss
from reduced_dynamics.manifold import eta_star, inf_loss, manifold_loss, mu_gamma, single_head_optimum

PROBLEMS = [(5, 40, 0.1), (3, 20, 0.5), (10, 100, 0.0), (1, 5, 2.0)]


@pytest.mark.parametrize("d,L,s2", PROBLEMS)
def test_single_head_optimum_by_numerical_minimisation(d, L, s2):
    """BFGS from a generic start finds the THEORY §5 H = 1 minimiser (to 1e-6)."""
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
