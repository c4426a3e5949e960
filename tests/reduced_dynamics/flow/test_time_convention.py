"""The integrator's time convention (factor 2, docs/conventions.md): we descend L itself, θ̇ = −∇L; the authors'
code descends L/2, so their learning rate lr is our step lr/2, their time τ = lr × steps is twice ours, and the
drift constant 16 of our time reads 8 in theirs."""

import numpy as np
import pytest

from reduced_dynamics import gradient_descent, integrate, reduced_model
from reduced_dynamics.dynamics.loss import approx_loss_grad
from reduced_dynamics.dynamics.manifold import drift_law_gamma, mu_gamma
from reduced_dynamics.setting import Setting

S = Setting(d=5, L=40, sigma2=0.1)


def test_authors_gradient_descent_on_half_the_loss_is_ours_at_half_the_step():
    """θ ← θ − lr ∇(L̃/2) (the authors' update) after 50 steps equals our GD with eta = lr/2, iterate by iterate."""
    lr, n = 0.02, 50
    w, m = np.array([0.05, -0.03, 0.02]), np.array([0.04, -0.01, 0.03])
    model = reduced_model(S, n_heads=3)
    ours = gradient_descent(model, model.state(w, m), eta=lr / 2, n_steps=n, n_records=n + 1)
    for k in range(n + 1):
        np.testing.assert_allclose(ours.omega[k], w, rtol=1e-13, atol=1e-16)
        np.testing.assert_allclose(ours.mu[k], m, rtol=1e-13, atol=1e-16)
        g = approx_loss_grad(w, m, S)
        w, m = w - lr * g.omega / 2, m - lr * g.mu / 2
    assert ours.t[-1] == pytest.approx(lr * n / 2)  # our time is half of the authors' lr × steps


def test_drift_law_constant_is_8_in_the_authors_time():
    """Integrate the authors' flow dθ/dτ = −∇(L̃/2) directly (a different ODE, not a rescaled output: every block
    at rate 1/2) from a point on S_γ: in their time τ, γ(τ) follows (8 c d³ (pn/H) τ)^(−1/6); the constant 16 of
    our time is off there by 2^(1/6) − 1 = 12.2 %. Measured (p = n = 1): γ/law₈ − 1 = −5.6e-3, 1.2e-4, 3.7e-5 at
    τ = 2e3, 2e5, 2e6."""
    g0 = 0.3
    model = reduced_model(S, n_heads=2)
    y0 = model.state([g0, -g0], [mu_gamma(g0, S), -mu_gamma(g0, S)])
    taus = np.array([0.0, 2e3, 2e5, 2e6])
    path = integrate(
        model,
        y0,
        times=taus,
        rates={"omega": 0.5, "mu": 0.5},
        method="Radau",
        rtol=1e-9,
        atol=1e-12,
        stationarity_tol=0,
    )
    assert path.success and path.t.tolist() == taus.tolist()
    gamma = np.abs(path.omega[1:]).mean(axis=1)
    c, d = S.c, S.d
    rel8 = gamma / (8 * c * d**3 * 0.5 * taus[1:]) ** (-1 / 6) - 1
    rel16 = gamma / (16 * c * d**3 * 0.5 * taus[1:]) ** (-1 / 6) - 1
    assert np.all(np.abs(rel8[1:]) < 3e-4) and abs(rel8[-1]) < abs(rel8[0]) / 10
    np.testing.assert_allclose(rel16[1:], 2 ** (1 / 6) - 1, atol=1e-3)
    # the package's law in our time, evaluated at t = τ/2, is the same statement
    np.testing.assert_allclose(
        drift_law_gamma(taus[1:] / 2, S), (8 * c * d**3 * 0.5 * taus[1:]) ** (-1 / 6), rtol=1e-14
    )
    # and our own flow at t = τ/2 reaches the γ of the authors' flow at τ
    ours = integrate(model, y0, t_end=taus[-1] / 2, rtol=1e-10, atol=1e-13)
    assert ours.gamma[-1] == pytest.approx(gamma[-1], rel=1e-5)
