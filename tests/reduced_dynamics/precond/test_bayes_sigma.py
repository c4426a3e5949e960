"""The proportional-limit Bayes ratio under Σ: isotropic reduction, finite-size Monte Carlo, high-precision
cross-checks of the verdict on the isotropic bound."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs_check.closed_forms import bayes_risk_limit, gd_risk_limit, risk_ratio_bound, risk_ratio_limit
from reduced_dynamics import BayesRidge, Setting, estimate_risks
from reduced_dynamics.precond.bayes import (
    bayes_ratio_sigma,
    bayes_risk_sigma_finite,
    bayes_risk_sigma_limit,
    dpgd_risk_sigma_limit,
)
from reduced_dynamics.precond.exact import dpgd_risk, optimal_dpgd, precond_optimal_eta

N_SE = 3.0


def _setting(sigma2, xi):
    """A setting with d/L = xi exactly (L = 1000·d/ξ rounded is avoided: d = ξ·L for integers)."""
    from fractions import Fraction

    f = Fraction(xi).limit_denominator(10_000)
    return Setting(d=f.numerator, L=f.denominator, sigma2=sigma2)


def _log_uniform(lo, hi):
    return st.floats(math.log10(lo), math.log10(hi)).map(lambda e: 10.0**e)


@given(sigma2=_log_uniform(1e-3, 1e3), xi=st.sampled_from([0.01, 0.125, 0.5, 1.0, 2.0, 10.0]))
def test_isotropic_spectrum_reduces_to_theorem_1c(sigma2, xi):
    s = _setting(sigma2, xi)
    r = bayes_ratio_sigma([1.0], s)
    assert r.bayes_risk == pytest.approx(bayes_risk_limit(sigma2=sigma2, xi=xi), rel=1e-12)
    assert r.gd_risk == pytest.approx(gd_risk_limit(sigma2=sigma2, xi=xi), rel=1e-12)
    assert r.ratio == pytest.approx(risk_ratio_limit(sigma2=sigma2, xi=xi), rel=1e-12)
    assert r.bound == pytest.approx(risk_ratio_bound(sigma2=sigma2, xi=xi), rel=1e-12)
    assert r.ratio_sigma_inv == pytest.approx(r.ratio, rel=1e-12)
    assert r.bound_holds


@given(
    eigs=st.lists(_log_uniform(1e-3, 1e3), min_size=1, max_size=6),
    c=_log_uniform(1e-3, 1e3),
    sigma2=_log_uniform(1e-2, 1e2),
)
def test_ratio_is_invariant_under_joint_scaling_and_optimum_beats_sigma_inverse(eigs, c, sigma2):
    s = Setting(d=1, L=4, sigma2=sigma2)
    a = bayes_ratio_sigma(eigs, s)
    b = bayes_ratio_sigma(np.array(eigs) * c, s.replace(sigma2=sigma2 * c))
    assert b.ratio == pytest.approx(a.ratio, rel=1e-9)
    assert b.bayes_risk == pytest.approx(c * a.bayes_risk, rel=1e-9)
    assert 1.0 < a.ratio <= a.ratio_sigma_inv * (1 + 1e-12)
    assert a.ratio <= a.ratio_identity * (1 + 1e-12)
    assert a.bayes_risk < a.gd_risk


def test_bayes_limit_matches_finite_monte_carlo_with_vanishing_finite_size_error():
    # two-atom spectrum {0.5, 4}, ξ = 1/4, σ² = 0.5; the finite-(d, L) Bayes risk approaches the
    # deterministic-equivalent limit like 1/d (measured: relative gap 3.1e-3, 1.6e-3 at d = 20, 40)
    e = np.array([0.5, 4.0])
    gaps = []
    for d in (20, 40):
        eig = np.repeat(e, d // 2)
        Q, _ = np.linalg.qr(np.random.default_rng(d).standard_normal((d, d)))
        s = Setting(d=d, L=4 * d, sigma2=0.5, Sigma=(Q * eig) @ Q.T)
        est = bayes_risk_sigma_finite(s, n_prompts=300, seed=1)
        lim = bayes_risk_sigma_limit(e, s)
        gaps.append((est.risk - lim, est.stderr))
    (g20, se20), (g40, se40) = gaps
    assert g20 > N_SE * se20 and g40 > N_SE * se40  # a real finite-size effect, resolved
    assert 1.4 < g20 / g40 < 2.8  # ≈ 2: O(1/d)
    assert abs(g40) / lim < 2e-3


def test_finite_bayes_risk_matches_engine_bayes_ridge_under_sigma():
    S = np.diag(np.linspace(0.5, 4.0, 5))
    s = Setting(d=5, L=20, sigma2=0.1, Sigma=S)
    a = bayes_risk_sigma_finite(s, n_prompts=20_000, seed=2)
    b = estimate_risks({"b": BayesRidge()}, s, n_prompts=20_000, seed=3, conditional=True)["b"]
    assert abs(a.risk - b.risk) <= N_SE * math.hypot(a.stderr, b.stderr)


@pytest.mark.parametrize("kind", ["optimal", "sigma_inv", "identity"])
def test_gd_limit_is_the_limit_of_the_exact_finite_L_risk(kind):
    # d = ξL with the spectrum repeated: the exact optimal-step risk converges to the limit at O(1/L)
    e = np.array([0.5, 1.0, 4.0])
    errs = []
    for k in (8, 16, 32):
        d = 3 * k
        L = 4 * d
        S = np.diag(np.repeat(e, k))
        s = Setting(d=d, L=L, sigma2=0.3, Sigma=S)
        if kind == "optimal":
            exact = optimal_dpgd(s).risk
        else:
            P = np.linalg.inv(S) if kind == "sigma_inv" else np.eye(d)
            exact = dpgd_risk(P, precond_optimal_eta(P, s), s)
        errs.append(exact - dpgd_risk_sigma_limit(e, s, preconditioner=kind))
    assert abs(errs[2]) < 1e-2
    assert errs[0] / errs[1] == pytest.approx(2.0, rel=0.1)
    assert errs[1] / errs[2] == pytest.approx(2.0, rel=0.05)


# ----------------------------------------------------------------- the verdict on the isotropic bound


def _rho_mp(eigs, sigma2, xi, dps=60, optimal=True):
    """ρ = (r − 1)/(U − 1) the naive way, in mpmath: Bayes fixed point by findroot, G and U by their definitions."""
    with mpmath.workdps(dps):
        e = [mpmath.mpf(float(x)) for x in eigs]
        sbar = sum(e) / len(e)
        e = [t / sbar for t in e]
        s2, x = mpmath.mpf(sigma2) / sbar, mpmath.mpf(xi)
        B = mpmath.findroot(lambda b: b - s2 - sum(t * x * b / (t + x * b) for t in e) / len(e), s2 + 1)
        k = x * (1 + s2)
        G = s2 + (sum(t * k / (t + k) for t in e) / len(e) if optimal else k / (1 + k))
        eta = 1 / (1 + (1 + s2) * x)
        U = 1 + x * eta / (s2 * (1 + x * s2))
        return float((G / B - 1) / (U - 1))


@pytest.mark.parametrize(
    "eigs, sigma2, xi",
    [
        (np.linspace(0.5, 4.0, 5), 0.1, 0.125),
        ([1e-3, 1.0], 10.0, 1.0),
        ([1e-3] * 2 + [1.0] * 8, 100.0, 0.125),
        ([0.01, 1.0, 50.0], 1.0, 0.3),
    ],
)
def test_rho_matches_high_precision_naive_formula(eigs, sigma2, xi):
    r = bayes_ratio_sigma(eigs, _setting(sigma2, xi))
    assert r.rho == pytest.approx(_rho_mp(eigs, sigma2, xi), rel=1e-9)
    assert r.rho_sigma_inv == pytest.approx(_rho_mp(eigs, sigma2, xi, optimal=False), rel=1e-9)


def test_isotropic_bound_holds_at_the_paper_point_and_fails_for_spread_spectra_at_high_noise():
    paper = bayes_ratio_sigma(np.linspace(0.5, 4.0, 5), _setting(0.1 * 2.25, 0.125))  # σ²/s̄ = 0.1
    assert paper.bound_holds and paper.rho < 0.9
    # counterexamples (60-digit naive check above): two-atom spectra, large noise-to-signal ratio
    eigs = [1e-6] * 9 + [1.0]  # 90 % of the directions nearly without variance
    sbar = float(np.mean(eigs))
    bad = bayes_ratio_sigma(eigs, _setting(10.0 * sbar, 1.0))  # σ²/s̄ = 10, ξ = 1
    assert not bad.bound_holds and bad.ratio > bad.bound
    assert bad.rho == pytest.approx(_rho_mp(eigs, 10.0 * sbar, 1.0), rel=1e-9)
    assert bad.rho > 1.4


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: bayes_ratio_sigma([], s), "`eigs`"),
        (lambda s: bayes_ratio_sigma([1.0, -1.0], s), "`eigs`"),
        (lambda s: bayes_ratio_sigma([[1.0]], s), "`eigs`"),
        (lambda s: bayes_ratio_sigma([1.0, 2.0], s, weights=[1.0]), "`weights`"),
        (lambda s: bayes_ratio_sigma([1.0], s.replace(sigma2=0.0)), "`sigma2`"),
        (lambda s: bayes_ratio_sigma([1.0], Setting(d=5, L=[10, 20])), "`setting`"),
        (lambda s: dpgd_risk_sigma_limit([1.0], s, preconditioner="best"), "`preconditioner`"),
        (lambda s: bayes_risk_sigma_finite(s.replace(sigma2=0.0), n_prompts=10, seed=0), "`sigma2`"),
        (lambda s: bayes_risk_sigma_finite(s, n_prompts=1, seed=0), "`n_prompts`"),
    ],
)
def test_bad_input_names_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call(Setting(d=5, L=40, sigma2=0.1))


def test_ridge_at_sigma2_d_is_the_best_ridge_and_beats_preconditioned_gd_under_sigma():
    # the posterior mean does not depend on Σ: λ = σ²d beats other λ and the optimal preconditioned GD (paired)
    S = np.diag(np.linspace(0.5, 4.0, 5))
    s = Setting(d=5, L=10, sigma2=0.5, Sigma=S)
    opt = optimal_dpgd(s)
    from reduced_dynamics.precond.predictors import debiased_precond_gd

    preds = {
        "bayes": BayesRidge(),
        "half": BayesRidge(0.5 * 0.5 * 5),
        "double": BayesRidge(2.0 * 0.5 * 5),
        "dpgd": debiased_precond_gd(opt.P, opt.eta),
    }
    res = estimate_risks(preds, s, n_prompts=40_000, seed=4, conditional=True)
    for other in ("half", "double", "dpgd"):
        diff = res.difference("bayes", other)
        assert diff.risk < -N_SE * diff.stderr, other


# ----------------------------------------------------------------- the proven replacement of Theorem 1(c)

_spectra = st.lists(st.tuples(_log_uniform(1e-6, 1e6), _log_uniform(1e-4, 1.0)), min_size=1, max_size=6)


@given(atoms=_spectra, t2=_log_uniform(1e-3, 1e3), xi=st.sampled_from([0.01, 0.125, 0.5, 1.0, 4.0, 50.0]))
def test_ratio_is_at_most_the_isotropic_ratio_at_the_equivalent_aspect_ratio(atoms, t2, xi):
    # proven: with ξ' <= ξ the isotropic aspect ratio of equal Bayes risk, r_Σ <= r_iso(σ²/s̄, ξ') <= sup_{ξ'<=ξ} r_iso
    eigs, w = (np.array(a) for a in zip(*atoms))
    sbar = float(np.sum(w * eigs) / np.sum(w))
    r = bayes_ratio_sigma(eigs, _setting(t2 * sbar, xi), weights=w)
    assert r.xi_equivalent <= xi * (1 + 1e-12)
    assert r.ratio - 1 <= (r.ratio_equivalent - 1) * (1 + 1e-9) + 1e-15
    assert r.ratio_equivalent <= r.sup_ratio * (1 + 1e-12)
    # the equivalent isotropic problem has the same (normalised) Bayes risk: u = ξ'B/(1 + ξ'B), B = σ̃² + u
    B = r.bayes_risk / sbar
    u = B - t2
    assert u == pytest.approx(r.xi_equivalent * B / (1 + r.xi_equivalent * B), rel=1e-9, abs=1e-15)


@given(atoms=_spectra, t2=_log_uniform(1e-3, 1e3), frac=st.floats(0.01, 1.0))
def test_isotropic_bound_holds_for_every_spectrum_below_xi_u(atoms, t2, frac):
    # U(σ̃², ·) increases up to ξ_U = (σ̃²(1+σ̃²))^(-1/2): below it the isotropic bound holds for every Σ (proven)
    eigs, w = (np.array(a) for a in zip(*atoms))
    sbar = float(np.sum(w * eigs) / np.sum(w))
    xi_u = 1.0 / math.sqrt(t2 * (1 + t2))
    xi = max(1e-4, frac * xi_u)
    r = bayes_ratio_sigma(eigs, _setting(t2 * sbar, xi), weights=w)
    assert r.rho <= 1.0 + 1e-9 and r.bound_holds_all_spectra


@pytest.mark.parametrize("t2, xi", [(0.1, 0.125), (1.0, 10.0), (10.0, 1.0), (0.1, 100.0)])
def test_near_null_spectra_attain_the_supremum(t2, xi):
    # a fraction 1 − p of directions with (almost) no variance is the isotropic problem at ξ' = pξ:
    # the supremum over spectra is max_{ξ'<=ξ} r_iso(σ̃², ξ'), attained at p = sup_xi/ξ
    base = bayes_ratio_sigma([1.0], _setting(t2, xi))
    p = base.sup_xi / xi
    eigs, w = np.array([1e-9, 1.0 / p]), np.array([1.0 - p, p])
    sbar = float(np.sum(w * eigs))
    r = bayes_ratio_sigma(eigs, _setting(t2 * sbar, xi), weights=w)
    assert r.ratio - 1 == pytest.approx(base.sup_ratio - 1, rel=1e-5)
    assert r.sup_ratio == pytest.approx(base.sup_ratio, rel=1e-9)
    # whether the isotropic bound can fail here is decided by the supremum alone
    assert r.bound_holds == base.bound_holds_all_spectra


def test_the_isotropic_bound_fails_even_at_low_noise_for_large_xi():
    # σ²/s̄ = 1 (and 0.1): the bound holds for every Σ up to ξ ≈ 4.8 (≈ 48), fails beyond for near-null spectra
    for t2, xi_ok, xi_bad in ((1.0, 4.0, 10.0), (0.1, 40.0, 100.0)):
        assert bayes_ratio_sigma([1.0], _setting(t2, xi_ok)).bound_holds_all_spectra
        bad = bayes_ratio_sigma([1.0], _setting(t2, xi_bad))
        assert not bad.bound_holds_all_spectra and bad.sup_ratio > bad.bound
        # and an explicit spectrum exceeds U, checked in 60 digits by the naive formulas
        p = bad.sup_xi / xi_bad
        eigs = [1e-9] * int(round((1 - p) / p * 10)) + [1.0] * 10  # equal weights: fraction ≈ p at 1
        sbar = float(np.mean(eigs))
        r = bayes_ratio_sigma(eigs, _setting(t2 * sbar, xi_bad))
        assert not r.bound_holds
        assert _rho_mp(eigs, t2 * sbar, xi_bad) > 1.0
