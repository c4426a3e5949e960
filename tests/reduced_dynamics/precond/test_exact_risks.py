"""Exact finite-L risks of (debiased) preconditioned GD under Σ, and the optimal preconditioner.

Independent routes: the isotropic closed forms of proofs_check.closed_forms (Σ = I, P = I); the
Monte Carlo engine (conditional and plain losses, paired differences, within 3 SE); finite
differences of the closed-form risk at the claimed minimiser; a first-order perturbation expansion
of (Σ + κI)⁻¹ for the rate at which P* approaches Σ⁻¹.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs_check.closed_forms import gd_optimal_eta, gd_optimal_risk, gd_risk
from reduced_dynamics import Setting, estimate_risks
from reduced_dynamics.precond.exact import (
    dpgd_risk,
    optimal_dpgd,
    optimal_pgd,
    pgd_risk,
    precond_optimal_eta,
)
from reduced_dynamics.precond.metrics import scale_free_distance
from reduced_dynamics.precond.predictors import debiased_precond_gd, precond_gd

N_SE = 3.0


def spread_sigma(d=5, lo=0.5, hi=4.0, seed=0):
    """Eigenvalues evenly spread over [lo, hi] in a random orthogonal basis."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (Q * np.linspace(lo, hi, d)) @ Q.T


SIGMA = spread_sigma()


# ----------------------------------------------------------------- isotropic reduction


@given(
    d=st.integers(1, 30),
    L=st.integers(2, 500),
    sigma2=st.floats(0.0, 5.0),
    eta=st.floats(-3.0, 3.0),
    debiased=st.booleans(),
)
def test_identity_preconditioner_at_identity_sigma_is_gd_risk(d, L, sigma2, eta, debiased):
    s = Setting(d=d, L=L, sigma2=sigma2)
    f = dpgd_risk if debiased else pgd_risk
    assert math.isclose(f(np.eye(d), eta, s), gd_risk(eta, s, debiased=debiased), rel_tol=1e-12, abs_tol=1e-12)


def test_scaled_identity_sigma_matches_gd_risk_with_rescaled_variances():
    # Σ = cI: x = √c z, y = √c y' with y' isotropic data of noise σ²/c, and ŷ = √c · (ηc/L) Σ y'_l z_lᵀz_q,
    # so the risk is c · gd_risk(ηc) at noise σ²/c
    c, s2 = 2.5, 0.3
    s = Setting(d=4, L=30, sigma2=s2, Sigma=c * np.eye(4))
    iso = Setting(d=4, L=30, sigma2=s2 / c)
    for eta in (0.2, 0.9):
        assert math.isclose(dpgd_risk(np.eye(4), eta, s), c * gd_risk(eta * c, iso, debiased=True), rel_tol=1e-12)


def test_optimal_at_identity_sigma_is_eta_star_exactly():
    for L in (2, 10, 40, 1000):
        s = Setting(d=5, L=L, sigma2=0.1)
        opt = optimal_dpgd(s)
        np.testing.assert_allclose(opt.P, np.eye(5), atol=1e-14)
        assert math.isclose(opt.eta, s.eta_star, rel_tol=1e-14)
        assert math.isclose(opt.risk, gd_optimal_risk(s, debiased=True), rel_tol=1e-13)
        assert opt.distance_to_sigma_inv < 1e-14
        vo = optimal_pgd(s)
        assert math.isclose(vo.eta, gd_optimal_eta(s), rel_tol=1e-14)
        assert math.isclose(vo.risk, gd_optimal_risk(s), rel_tol=1e-13)


def test_broadcasts_over_batched_P_eta_and_array_settings():
    Ps = np.stack([np.eye(5), np.linalg.inv(SIGMA)])
    s = Setting(d=5, L=np.array([10, 40, 160]), sigma2=0.1, Sigma=SIGMA)
    out = dpgd_risk(Ps[:, None], 0.7, s)
    assert out.shape == (2, 3)
    for i in range(2):
        for j, L in enumerate((10, 40, 160)):
            assert out[i, j] == pytest.approx(dpgd_risk(Ps[i], 0.7, s.replace(L=L)), rel=1e-13)


# ----------------------------------------------------------------- Monte Carlo


def _cases(s):
    opt = optimal_dpgd(s)
    Si = np.linalg.inv(s.Sigma)
    P_rand = np.random.default_rng(5).standard_normal((s.d, s.d))
    return {
        "dpgd_opt": (debiased_precond_gd(opt.P, opt.eta), dpgd_risk(opt.P, opt.eta, s)),
        "dpgd_inv": (debiased_precond_gd(Si, opt.eta_sigma_inv), dpgd_risk(Si, opt.eta_sigma_inv, s)),
        "dpgd_I": (debiased_precond_gd(np.eye(s.d), opt.eta_identity), dpgd_risk(np.eye(s.d), opt.eta_identity, s)),
        "dpgd_rand": (debiased_precond_gd(P_rand, 0.2), dpgd_risk(P_rand, 0.2, s)),
        "pgd_inv": (precond_gd(Si, 0.6), pgd_risk(Si, 0.6, s)),
        "pgd_rand": (precond_gd(P_rand, -0.3), pgd_risk(P_rand, -0.3, s)),
    }


@pytest.mark.parametrize("conditional", [True, False])
@pytest.mark.parametrize("L", [6, 40])
def test_exact_risks_match_monte_carlo_within_3_se(L, conditional):
    s = Setting(d=5, L=L, sigma2=0.1, Sigma=SIGMA)
    cases = _cases(s)
    res = estimate_risks({k: p for k, (p, _) in cases.items()}, s, n_prompts=60_000, seed=11, conditional=conditional)
    for name, (_, exact) in cases.items():
        est = res[name]
        assert abs(est.risk - exact) <= N_SE * est.stderr, (name, est.risk, est.stderr, exact)
        assert est.stderr < 0.02 * exact  # the comparison is sharp (SE within 2 % of the risk), not vacuous


def test_paired_differences_match_exact_and_optimum_beats_sigma_inverse():
    s = Setting(d=5, L=8, sigma2=0.1, Sigma=SIGMA)
    cases = _cases(s)
    res = estimate_risks({k: p for k, (p, _) in cases.items()}, s, n_prompts=100_000, seed=3, conditional=True)
    for a, b in (("dpgd_opt", "dpgd_inv"), ("dpgd_opt", "dpgd_I"), ("dpgd_inv", "dpgd_I")):
        diff = res.difference(a, b)
        exact = cases[a][1] - cases[b][1]
        assert abs(diff.risk - exact) <= N_SE * diff.stderr, (a, b, diff, exact)
    # the optimum is strictly better than Σ⁻¹ at finite L, and the paired MC sees it
    diff = res.difference("dpgd_opt", "dpgd_inv")
    assert diff.risk < -N_SE * diff.stderr


# ----------------------------------------------------------------- optimality


def _risk_of_F(F, s):
    """dpgd risk as a function of the effective matrix ηP (η = 1)."""
    return dpgd_risk(F, 1.0, s)


@pytest.mark.parametrize("L", [3, 40, 400])
def test_optimum_is_a_stationary_point_by_finite_differences(L):
    s = Setting(d=5, L=L, sigma2=0.2, Sigma=SIGMA)
    opt = optimal_dpgd(s)
    F = opt.effective
    h = 1e-5
    grad = np.empty((5, 5))
    for i in range(5):
        for j in range(5):
            E = np.zeros((5, 5))
            E[i, j] = h
            grad[i, j] = (_risk_of_F(F + E, s) - _risk_of_F(F - E, s)) / (2 * h)
    assert np.abs(grad).max() < 1e-8
    assert math.isclose(dpgd_risk(opt.P, opt.eta, s), opt.risk, rel_tol=1e-12)


@given(seed=st.integers(0, 10_000), scale=st.floats(1e-3, 1.0))
def test_optimum_beats_every_perturbation(seed, scale):
    s = Setting(d=5, L=20, sigma2=0.1, Sigma=SIGMA)
    opt = optimal_dpgd(s)
    E = np.random.default_rng(seed).standard_normal((5, 5)) * scale
    assert _risk_of_F(opt.effective + E, s) > opt.risk


def test_optimal_eta_is_the_minimiser_in_eta():
    s = Setting(d=5, L=30, sigma2=0.1, Sigma=SIGMA)
    for P in (np.linalg.inv(SIGMA), np.eye(5), SIGMA):
        for debiased in (True, False):
            f = dpgd_risk if debiased else pgd_risk
            eta = precond_optimal_eta(P, s, debiased=debiased)
            h = 1e-6 * max(1.0, abs(eta))
            assert abs(f(P, eta + h, s) - f(P, eta - h, s)) / (2 * h) < 1e-7
    # P = Σ⁻¹: η = 1/(1 + (d/L)(1 + σ² d / tr Σ))
    expected = 1.0 / (1.0 + (5 / 30) * (1.0 + 0.1 * 5 / np.trace(SIGMA)))
    assert precond_optimal_eta(np.linalg.inv(SIGMA), s) == pytest.approx(expected, rel=1e-13)


def test_optimal_preconditioner_is_not_sigma_inverse_at_finite_L_and_tends_to_it_like_one_over_L():
    Sinv = np.linalg.inv(SIGMA)
    d, s2 = 5, 0.1
    # first-order expansion: (Σ + κI)⁻¹ = Σ⁻¹ − κΣ⁻² + O(κ²), κ = (tr Σ + σ²d)/L, so
    # L · distance → (tr Σ + σ²d) · min_c ||Σ⁻² − cΣ⁻¹||_F / ||Σ⁻¹||_F
    S2inv = Sinv @ Sinv
    coeff = (np.trace(SIGMA) + s2 * d) * scale_free_distance(Sinv, S2inv) * np.linalg.norm(S2inv) / np.linalg.norm(Sinv)
    prev = None
    for L in (10, 100, 1000, 10_000, 100_000):
        dist = optimal_dpgd(Setting(d=d, L=L, sigma2=s2, Sigma=SIGMA)).distance_to_sigma_inv
        assert dist > 0
        if prev is not None:
            assert dist < prev
        prev = dist
    assert L * dist == pytest.approx(coeff, rel=1e-3)
    # and the risk gap between Σ⁻¹ and the optimum closes faster (O(1/L²))
    gaps = []
    for L in (1000, 2000):
        o = optimal_dpgd(Setting(d=d, L=L, sigma2=s2, Sigma=SIGMA))
        gaps.append(o.risk_sigma_inv - o.risk)
    assert gaps[0] > 0 and gaps[1] > 0
    assert 3.5 < gaps[0] / gaps[1] < 4.5


def test_optimal_matches_eigen_formula():
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=SIGMA)
    opt = optimal_dpgd(s)
    kappa = (np.trace(SIGMA) + 0.1 * 5) / 40
    np.testing.assert_allclose(opt.effective, np.linalg.inv(SIGMA + kappa * np.eye(5)), rtol=1e-12, atol=1e-14)
    assert opt.kappa == pytest.approx(kappa, rel=1e-14)
    assert np.trace(opt.P @ SIGMA) == pytest.approx(5.0, rel=1e-13)
    assert opt.risk < opt.risk_sigma_inv < opt.risk_identity


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: dpgd_risk(np.eye(4), 0.5, s), "`P`"),
        (lambda s: dpgd_risk(np.full((5, 5), np.nan), 0.5, s), "`P`"),
        (lambda s: dpgd_risk(np.eye(5), np.inf, s), "`eta`"),
        (lambda s: pgd_risk(np.eye(5), 1e13, s), "`eta`"),
        (lambda s: dpgd_risk(np.eye(5) * 1e200, 0.5, s), "`P`"),
        (lambda s: precond_optimal_eta(np.zeros((5, 5)), s), "`P`"),
        (lambda s: precond_optimal_eta(np.eye(5), s, debiased="yes"), "`debiased`"),
        (lambda s: optimal_dpgd(s.replace(L=1)), "`L`"),
        (lambda s: optimal_dpgd(Setting(d=5, L=[10, 20])), "`setting`"),
        (lambda s: dpgd_risk(np.eye(5), 0.5, "paper"), "`setting`"),
        (lambda s: optimal_dpgd(Setting(d=2001, L=10)), "`setting.d` must be <= 2000"),
    ],
)
def test_bad_input_names_the_parameter(call, match):
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=SIGMA)
    with pytest.raises(ValueError, match=match):
        call(s)


@given(L=st.integers(2, 300), eta=st.floats(-2.0, 2.0), seed=st.integers(0, 1000), sigma2=st.floats(0.0, 3.0))
def test_debiasing_costs_exactly_one_sample_under_sigma(L, eta, seed, sigma2):
    # XᵀCX ~ W(L−1, Σ): debiased GD at (η, L) is vanilla GD at (η(L−1)/L, L−1), for every P and Σ
    P = np.random.default_rng(seed).standard_normal((5, 5))
    s = Setting(d=5, L=L, sigma2=sigma2, Sigma=SIGMA)
    lhs = dpgd_risk(P, eta, s)
    rhs = pgd_risk(P, eta * (L - 1) / L, s.replace(L=L - 1))
    assert lhs == pytest.approx(rhs, rel=1e-11, abs=1e-12)


@pytest.mark.parametrize("L", [5, 40, 160])
def test_exact_optimum_is_the_limit_of_the_reduced_flow_and_its_loss_gap_is_the_one_sample_term(L):
    # two independent derivations: the exact Wishart risk (here) and the reduced model's approximate loss
    # (precond.flow, helper A) give the same preconditioner (Σ + κ_L I)⁻¹; the exact minimum exceeds the
    # approximate one by tr(Σ²(Σ + κI)⁻¹)/(dL), the Σ version of the isotropic η*/L
    from reduced_dynamics.precond.flow import precond_limit

    s = Setting(d=5, L=L, sigma2=0.1, Sigma=SIGMA)
    opt, lim = optimal_dpgd(s), precond_limit(s)
    np.testing.assert_allclose(opt.effective, lim.Gamma, rtol=1e-12, atol=1e-14)
    assert opt.kappa == pytest.approx(lim.kappa, rel=1e-13)
    gap = np.trace(SIGMA @ SIGMA @ np.linalg.inv(SIGMA + opt.kappa * np.eye(5))) / (5 * L)
    assert opt.risk - lim.loss == pytest.approx(gap, rel=1e-10)
    iso = Setting(d=5, L=L, sigma2=0.1)
    assert optimal_dpgd(iso).risk - precond_limit(iso).loss == pytest.approx(iso.eta_star / L, rel=1e-12)
