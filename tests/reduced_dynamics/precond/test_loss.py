"""Preconditioned loss and gradient: isotropic reduction, sympy route, finite differences, Monte Carlo."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics.dynamics.corrected_loss import corrected_loss_terms
from reduced_dynamics.dynamics.loss import LossOverflowError, approx_loss, approx_loss_grad
from reduced_dynamics.estimation.risk import estimate_risks
from reduced_dynamics.precond.derive import generated_precond_functions
from reduced_dynamics.precond.loss import (
    PrecondReducedModel,
    precond_loss,
    precond_loss_grad,
    precond_risk_expansion,
)
from reduced_dynamics.setting import Setting


def _sigma(d, seed, lo=0.5, hi=4.0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return Q @ np.diag(np.linspace(lo, hi, d)) @ Q.T


def _flat(g):
    return np.concatenate([g.omega, g.mu, g.W.ravel()])


@given(H=st.integers(1, 4), seed=st.integers(0, 1000), identity_sigma=st.booleans())
def test_reduces_to_isotropic_loss_and_gradient(H, seed, identity_sigma):
    rng = np.random.default_rng(seed)
    om, mu = 0.3 * rng.standard_normal(H), 2 * rng.standard_normal(H)
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=np.eye(5) if identity_sigma else None)
    iso = Setting(d=5, L=40, sigma2=0.1)
    assert precond_loss(om, mu, np.eye(5), s) == pytest.approx(approx_loss(om, mu, iso), rel=1e-13, abs=1e-15)
    g, ga = precond_loss_grad(om, mu, np.eye(5), s), approx_loss_grad(om, mu, iso)
    np.testing.assert_allclose(g.omega, ga.omega, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g.mu, ga.mu, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("per_head, d", [(False, 2), (True, 1)])
@given(seed=st.integers(0, 1000))
def test_matches_lambdified_sympy_derivation(per_head, d, seed):
    rng = np.random.default_rng(seed)
    H = 2
    Sig = _sigma(d, seed)
    om, mu = 0.4 * rng.standard_normal(H), rng.standard_normal(H)
    W = 0.7 * rng.standard_normal((H, d, d) if per_head else (d, d))
    s = Setting(d=d, L=30, sigma2=0.2, Sigma=Sig)
    gen = generated_precond_functions(H, d, per_head=per_head)
    assert precond_loss(om, mu, W, s) == pytest.approx(gen.loss(om, mu, W, Sig, 30, 0.2), rel=1e-12)
    np.testing.assert_allclose(
        _flat(precond_loss_grad(om, mu, W, s)), gen.gradient(om, mu, W, Sig, 30, 0.2), atol=1e-11
    )


@pytest.mark.parametrize("per_head", [False, True])
@given(seed=st.integers(0, 1000), H=st.integers(1, 3))
def test_gradient_matches_central_differences(per_head, seed, H):
    rng = np.random.default_rng(seed)
    d = 5
    s = Setting(d=d, L=40, sigma2=0.1, Sigma=_sigma(d, seed))
    om, mu = 0.3 * rng.standard_normal(H), rng.standard_normal(H)
    W = rng.standard_normal((H, d, d) if per_head else (d, d)) / np.sqrt(d)
    g = _flat(precond_loss_grad(om, mu, W, s))
    theta = np.concatenate([om, mu, W.ravel()])

    def f(th):
        return precond_loss(th[:H], th[H : 2 * H], th[2 * H :].reshape(W.shape), s)

    h = 1e-6
    fd = np.array([(f(theta + h * e) - f(theta - h * e)) / (2 * h) for e in np.eye(theta.size)])
    # rounding of the loss values limits central differences to ~ 1e-16 |L̃| / h
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7 * max(1.0, abs(f(theta))))


def test_scale_invariance():
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=_sigma(5, 3))
    rng = np.random.default_rng(0)
    om, mu, W = 0.2 * rng.standard_normal(2), rng.standard_normal(2), rng.standard_normal((5, 5))
    assert precond_loss(om / 3.0, mu, 3.0 * W, s) == pytest.approx(precond_loss(om, mu, W, s), rel=1e-13)


def test_expansion_reduces_to_isotropic_corrected_loss():
    s = Setting(d=5, L=40, sigma2=0.1)
    om, mu = np.array([0.2, -0.25, 0.1]), np.array([1.5, -2.0, 0.4])
    e = precond_risk_expansion(om, mu, np.eye(5), s)
    ref = corrected_loss_terms(om, mu, s)
    assert e.R0 == pytest.approx(ref.R0, rel=1e-13)
    assert e.R1 == pytest.approx(ref.R1, rel=1e-12)
    # the approximate loss is R0 + R1_approx / L
    assert precond_loss(om, mu, np.eye(5), s) == pytest.approx(e.R0 + e.R1_approx / 40, rel=1e-13)


def test_monte_carlo_true_risk_under_sigma():
    """True risk of the reduced model under Σ (conditional MC) vs the 1/L expansion and L̃.

    At L = 640 the expansion's O(L⁻²) remainder is below the standard error, so the MC must agree
    with R0 + R1/L within 3 SE, and with L̃ within 3 SE plus the derived O(1/L) gap (R1_approx − R1)/L.
    The gap is itself resolved: L̃ alone is more than 3 SE off.
    """
    Sig = _sigma(5, 0)
    s = Setting(d=5, L=640, sigma2=0.1, Sigma=Sig)
    om, mu, W = np.array([0.2, -0.2]), np.array([2.0, -2.0]), np.linalg.inv(Sig)
    r = estimate_risks({"m": PrecondReducedModel(om, mu, W)}, s, n_prompts=12_000, seed=7, conditional=True)["m"]
    e = precond_risk_expansion(om, mu, W, s)
    approx = precond_loss(om, mu, W, s)
    assert abs(r.risk - e.risk) < 3 * r.stderr
    assert abs(r.risk - approx) < 3 * r.stderr + abs(e.approx_gap)
    assert abs(r.risk - approx) > 3 * r.stderr  # the O(1/L) error of L̃ is real at this precision


def test_predictor_equals_isotropic_multihead_at_identity():
    from reduced_dynamics.estimation.predictors import MultiHead
    from reduced_dynamics.estimation.prompts import sample_prompts

    s = Setting(d=5, L=20, sigma2=0.1)
    p = sample_prompts(50, s, seed=0)
    om, mu = np.array([0.3, -0.2]), np.array([1.0, -1.5])
    np.testing.assert_allclose(PrecondReducedModel(om, mu, np.eye(5))(p), MultiHead(om, mu)(p), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "om, mu, W, match",
    [
        ([0.1], [0.1, 0.2], np.eye(5), "same shape"),
        ([0.1, 0.2], [0.1, 0.2], np.eye(4), "`W` must have shape"),
        ([np.nan], [0.1], np.eye(5), "finite"),
        ([0.1], [0.1], np.full((5, 5), np.inf), "finite"),
    ],
)
def test_bad_input(om, mu, W, match):
    with pytest.raises(ValueError, match=match):
        precond_loss(om, mu, W, Setting(d=5, L=40, sigma2=0.1))


def test_overflow_is_reported_not_nan():
    s = Setting(d=5, L=40, sigma2=0.1)
    with pytest.raises(LossOverflowError, match="overflows"):
        precond_loss([20.0], [1.0], np.eye(5), s)
    with pytest.raises(LossOverflowError):
        precond_loss_grad([1.0, 1.0], [1e300, 1e300], np.eye(5), s)


def test_guards():
    with pytest.raises(ValueError, match="activation"):
        precond_loss([0.1], [0.1], np.eye(5), Setting(d=5, L=40, sigma2=0.1, activation="tanh"))
    with pytest.raises(ValueError, match="scalar"):
        precond_loss([0.1], [0.1], np.eye(5), Setting(d=5, L=[40, 80], sigma2=0.1))
