"""Preconditioned flow (the Σ model, ``reduced_model`` of a setting with ``Sigma``): conservation law, end state
vs the derived limit (Σ + λI)⁻¹, distances vs L. Its overflow stops: the engine's flow/test_status.py."""

import numpy as np
import pytest

from reduced_dynamics import integrate, reduced_model
from reduced_dynamics.dynamics.loss import LossOverflowError
from reduced_dynamics.precond.flow import normalise_precond_state, precond_initial_state, precond_limit
from reduced_dynamics.precond.loss import precond_loss
from reduced_dynamics.setting import Setting

#: the tolerances of the former driver of this flow (its own defaults), passed explicitly
TOL = dict(rtol=1e-9, atol=1e-12)


def _end_state(s, *, seed, t_end, n_heads=2, per_head=False, n_times=200, **start):
    """The flow from the model's seeded start (symmetric ± (ω, μ), random W by default) to t_end."""
    m = reduced_model(s, n_heads=n_heads, per_head=per_head)
    return integrate(m, m.initial_state(seed=seed, **start), t_end=t_end, n_times=n_times, **TOL)


def _sigma(d=5, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return Q @ np.diag(np.linspace(0.5, 4.0, d)) @ Q.T


def test_limit_minimises_the_limit_loss():
    """Γ* = (Σ + λI)⁻¹ against a numerical minimisation of the limit loss (independent route)."""
    from scipy.optimize import minimize

    Sig = _sigma()
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=Sig)
    lim = precond_limit(s)
    c = (np.trace(Sig) / 5 + 0.1) / 40

    def limit_loss(g):
        G = g.reshape(5, 5)
        P = np.eye(5) - Sig @ G
        return 0.1 + np.trace(P @ Sig @ P.T) / 5 + c * np.trace(Sig @ G.T @ Sig @ G)

    res = minimize(limit_loss, np.zeros(25), method="BFGS", options={"gtol": 1e-12})
    np.testing.assert_allclose(res.x.reshape(5, 5), lim.Gamma, atol=1e-6)
    assert res.fun == pytest.approx(lim.loss, abs=1e-12)


def test_limit_at_identity_is_debiased_gd_at_eta_star():
    s = Setting(d=5, L=40, sigma2=0.1)
    lim = precond_limit(s)
    np.testing.assert_allclose(lim.Gamma, s.eta_star * np.eye(5), atol=1e-15)
    assert lim.eta_eff == pytest.approx(s.eta_star, rel=1e-14)
    assert lim.loss == pytest.approx(1.1 - s.eta_star, rel=1e-14)
    assert lim.distance_sigma_inv == pytest.approx(0.0, abs=1e-15)


def test_flow_at_identity_keeps_the_isotropic_pattern():
    """Σ = I, W0 = I: W stays a multiple of I by symmetry; the heads sign-match and become ± symmetric.

    (The (ω, μ) path is not the isotropic model's: the scale of W is a dynamical variable here.)
    """
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=np.eye(5))
    m = reduced_model(s, n_heads=2)
    assert m.name == "precond"
    om0, mu0 = np.array([0.01, -0.012]), np.array([0.011, -0.009])
    r = integrate(m, m.state(om0, mu0, np.eye(5)), t_end=1e3, n_times=20, **TOL)
    f = r.final
    assert r.success and f.distance_identity < 1e-9
    assert f.sign_matched and f.zero_sum_ratio < 1e-6
    n = normalise_precond_state(f.omega, f.mu, f.W, s)  # the scale of W moved into ω
    assert n.omega[0] == pytest.approx(-n.omega[1], rel=1e-6)
    assert f.eta_eff == pytest.approx(s.eta_star, abs=2e-3)


def test_conservation_of_norm_difference():
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=_sigma())
    m = reduced_model(s, n_heads=2)
    start = precond_initial_state(2, s, seed=3)
    y0 = m.initial_state(seed=3)
    np.testing.assert_array_equal(y0, m.state(start.omega, start.mu, start.W))  # the same numbers
    r = integrate(m, y0, t_end=300.0, n_times=30, rtol=1e-10, atol=1e-13)
    assert r.success and r.W.shape == (30, 5, 5) and r.omega.shape == (30, 2)
    q = np.sum(r.W**2, axis=(1, 2)) - np.sum(r.omega**2, axis=1)
    np.testing.assert_allclose(q, q[0], rtol=1e-6)
    assert np.all(np.diff(r.loss) <= 1e-12)  # a gradient flow never increases the loss


@pytest.mark.parametrize("w_init", ["random", "identity"])
def test_end_state_goes_to_ridge_preconditioner(w_init):
    """From a random W (or from I), W ends at (Σ + λI)⁻¹ up to scale; distance to Σ⁻¹ is the limit's."""
    s = Setting(d=5, L=80, sigma2=0.1, Sigma=_sigma())
    r = _end_state(s, seed=1, t_end=1e3, w_init=w_init, n_times=20)
    n, lim = r.final, precond_limit(s)
    assert r.success
    assert n.limit["distance_sigma_inv"] == lim.distance_sigma_inv and n.limit["eta_eff"] == lim.eta_eff
    assert n.sign_matched and n.zero_sum_ratio < 1e-6
    assert n.distance_limit < 2e-3  # shrinks like γ⁴ along the drift
    assert n.distance_sigma_inv == pytest.approx(lim.distance_sigma_inv, abs=2e-3)
    assert n.distance_identity > 0.3
    assert n.eta_eff == pytest.approx(lim.eta_eff, abs=2e-3)


def test_distance_to_sigma_inverse_decreases_with_L():
    Sig = _sigma()
    dist = [precond_limit(Setting(d=5, L=L, sigma2=0.1, Sigma=Sig)).distance_sigma_inv for L in (20, 40, 80, 160, 320)]
    assert np.all(np.diff(dist) < 0)
    # O(1/L): L·distance tends to a constant
    Ld = np.array(dist) * np.array([20, 40, 80, 160, 320])
    assert abs(Ld[-1] / Ld[-2] - 1) < 0.05


def test_normalisation():
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=_sigma())
    Si = np.linalg.inv(s.Sigma)
    n = normalise_precond_state([0.1, -0.1], [2.0, -2.0], -3.0 * Si, s)
    np.testing.assert_allclose(n.W, Si, atol=1e-12)  # scale and sign moved into ω
    np.testing.assert_allclose(n.omega, [-0.3, 0.3], atol=1e-12)
    assert n.distance_sigma_inv == pytest.approx(0.0, abs=1e-12)
    assert not n.sign_matched
    assert precond_loss(n.omega, n.mu, n.W, s) == pytest.approx(precond_loss([0.1, -0.1], [2.0, -2.0], -3.0 * Si, s))


def test_overflow_start_and_bad_arguments():
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=np.eye(5))
    m1, m2 = reduced_model(s, n_heads=1), reduced_model(s, n_heads=2)
    with pytest.raises(LossOverflowError):
        integrate(m2, m2.state([20.0, -20.0], [1.0, -1.0], np.eye(5)), t_end=1.0)
    with pytest.raises(ValueError, match="`t_end`"):
        integrate(m1, m1.state([0.1], [0.1], np.eye(5)), t_end=-1.0)
    with pytest.raises(ValueError, match="`method`"):
        integrate(m1, m1.state([0.1], [0.1], np.eye(5)), method="Euler")
    with pytest.raises(ValueError, match="`W`"):
        m1.state([0.1], [0.1], np.eye(4))
    with pytest.raises(ValueError, match="`seed`"):
        m2.initial_state(seed=-1)
    with pytest.raises(ValueError, match="`kind`"):
        precond_initial_state(2, s, seed=0, kind="odd")
    with pytest.raises(ValueError, match="`kind`"):
        m2.initial_state(seed=0, kind="odd")
    with pytest.raises(ValueError, match="`per_head`"):
        reduced_model(s, n_heads=2, per_head="yes")
    big = reduced_model(Setting(d=41, L=40, sigma2=0.1, Sigma=np.eye(41)), n_heads=2)  # risks need no flow
    with pytest.raises(ValueError, match="`setting.d`"):
        big.initial_state(seed=0)
    with pytest.raises(ValueError, match="`setting.d`"):
        integrate(big, np.zeros(big.size))


@pytest.mark.parametrize("L", [20, 160])
def test_limit_equals_exact_optimum_of_debiased_preconditioned_gd(L):
    """Independent route: the finite-L optimum of debiased preconditioned GD from its exact risk (precond.exact)."""
    from reduced_dynamics.precond.exact import optimal_dpgd

    s = Setting(d=5, L=L, sigma2=0.1, Sigma=_sigma())
    np.testing.assert_allclose(precond_limit(s).Gamma, optimal_dpgd(s).effective, atol=1e-12)


def test_per_head_matrices_only_the_effective_preconditioner_converges():
    """KQ_h = ω_h W_h, H = 3: Γ = Σ_h μ_h ω_h W_h reaches (Σ + λI)⁻¹, but not every W_h does (documented deviation)."""
    from reduced_dynamics.precond.metrics import scale_free_distance

    s = Setting(d=5, L=80, sigma2=0.1, Sigma=_sigma())
    r = _end_state(s, seed=1, t_end=1e3, per_head=True, n_heads=3, n_times=10)
    f = r.final
    assert r.success and f.W.shape == (3, 5, 5) and r.W.shape == (10, 3, 5, 5)
    G = np.einsum("h,hij->ij", f.mu * f.omega, f.W)
    assert scale_free_distance(G, precond_limit(s).Gamma) < 2e-3
    assert np.max(f.distance_limit) > 0.1
