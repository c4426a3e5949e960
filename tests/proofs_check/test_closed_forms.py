"""Tests of proofs_check.closed_forms against independent implementations.

* exact GD risks vs Monte Carlo written here (conditional on X, and fully plain);
* optimal steps vs numerical minimisation, and their L → ∞ limits (log–log slopes);
* the limiting Bayes risk vs a quadrature over the Marchenko–Pastur density and
  vs the finite-L Monte Carlo (Richardson-extrapolated);
* the Rao–Blackwellised Bayes estimator vs a plain Monte Carlo of the ridge
  predictor's squared error, and vs a 1-D χ² integral for d = 1;
* properties (hypothesis) and bad input.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, optimize, stats

import proofs_check
import reduced_dynamics
from proofs_check import closed_forms as cf
from reduced_dynamics import sample_prompts
from reduced_dynamics.dynamics import manifold
from reduced_dynamics.setting import Setting

N_SE = 3.0  # tolerance in standard errors


def _log_uniform(lo, hi):
    return st.floats(min_value=math.log10(lo), max_value=math.log10(hi)).map(lambda e: 10.0**e)


# ---------------------------------------------------------------------------
# exact finite-(d, L) GD risk vs Monte Carlo
# ---------------------------------------------------------------------------

GD_CASES = [
    # d, L, sigma2, eta, debiased
    (5, 40, 0.1, 0.8, False),
    (5, 40, 0.1, 0.8, True),
    (3, 8, 0.5, 1.3, False),
    (3, 8, 0.5, 1.3, True),
    (10, 6, 0.0, 0.4, True),
    (1, 2, 2.0, -0.7, True),
    (8, 20, 1.0, 0.5, False),
]


def _gd_conditional_mc(d, L, sigma2, eta, debiased, n, seed):
    """Monte Carlo over X of E[(y_q − ŷ)² | X], integrated analytically over β, ε, x_q, ε_q.

    Given X, with M = CX (debiased) or X, ŷ = η wᵀx_q, w = (1/L) Mᵀ(Xβ + ε), so
    y_q − ŷ = (β − ηw)ᵀx_q + ε_q and
    E[· | X] = σ² + (1/d)‖I − (η/L)MᵀX‖_F² + σ²(η/L)²‖M‖_F².
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, L, d))
    M = X - X.mean(axis=1, keepdims=True) if debiased else X
    A = np.eye(d) - (eta / L) * np.matmul(np.swapaxes(M, 1, 2), X)
    vals = sigma2 + np.sum(A * A, axis=(1, 2)) / d + sigma2 * (eta / L) ** 2 * np.sum(M * M, axis=(1, 2))
    return vals.mean(), vals.std(ddof=1) / math.sqrt(n)


def _gd_plain_mc(d, L, sigma2, eta, debiased, n, seed, chunk=20000):
    """Plain Monte Carlo of (y_q − ŷ)² on prompts from reduced_dynamics.sample_prompts."""
    vals = []
    rng = np.random.default_rng(seed)
    for start in range(0, n, chunk):
        p = sample_prompts(min(chunk, n - start), Setting(d=d, L=L, sigma2=sigma2), seed=rng)
        M = p.X - p.X.mean(axis=1, keepdims=True) if debiased else p.X
        yhat = (eta / L) * np.einsum("nl,nld,nd->n", p.y, M, p.x_q)
        vals.append((p.y_q - yhat) ** 2)
    v = np.concatenate(vals)
    return v.mean(), v.std(ddof=1) / math.sqrt(v.size)


@pytest.mark.parametrize("d,L,sigma2,eta,debiased", GD_CASES)
def test_gd_risk_matches_conditional_monte_carlo(d, L, sigma2, eta, debiased):
    exact = cf.gd_risk(eta, Setting(d=d, L=L, sigma2=sigma2), debiased=debiased)
    mean, se = _gd_conditional_mc(d, L, sigma2, eta, debiased, n=40000, seed=11)
    assert se / exact < 3e-3  # the test is sharp
    assert abs(mean - exact) <= N_SE * se, f"|MC − exact| = {abs(mean - exact) / se:.2f} SE"


@pytest.mark.parametrize("d,L,sigma2,eta,debiased", [GD_CASES[1], GD_CASES[2], GD_CASES[4]])
def test_gd_risk_matches_plain_monte_carlo(d, L, sigma2, eta, debiased):
    exact = cf.gd_risk(eta, Setting(d=d, L=L, sigma2=sigma2), debiased=debiased)
    mean, se = _gd_plain_mc(d, L, sigma2, eta, debiased, n=120000, seed=12)
    assert se / exact < 1e-2
    assert abs(mean - exact) <= N_SE * se, f"|MC − exact| = {abs(mean - exact) / se:.2f} SE"


@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("d,L,sigma2", [(5, 40, 0.1), (3, 4, 1.0), (20, 10, 0.3)])
def test_gd_optimal_eta_is_the_numerical_argmin(d, L, sigma2, debiased):
    res = optimize.minimize_scalar(
        lambda e: cf.gd_risk(e, Setting(d=d, L=L, sigma2=sigma2), debiased=debiased), bracket=(0.0, 1.0), tol=1e-12
    )
    eta = cf.gd_optimal_eta(Setting(d=d, L=L, sigma2=sigma2), debiased=debiased)
    assert abs(res.x - eta) <= 1e-6 * (1 + abs(eta))
    assert cf.gd_optimal_risk(Setting(d=d, L=L, sigma2=sigma2), debiased=debiased) == pytest.approx(res.fun, rel=1e-12)


@pytest.mark.parametrize("d,L,sigma2", [(5, 40, 0.1), (1, 2, 0.0), (50, 7, 3.0), (2, 1000, 0.01)])
def test_debiased_optimal_step_equals_eta_star_exactly(d, L, sigma2):
    """Identity: argmin_η of the exact debiased risk = L/(L + (1+σ²)d) = η* at every finite L ≥ 2."""
    assert cf.gd_optimal_eta(Setting(d=d, L=L, sigma2=sigma2), debiased=True) == pytest.approx(
        manifold.eta_star(Setting(d=d, L=L, sigma2=sigma2)), rel=1e-14
    )


@pytest.mark.parametrize("d,sigma2", [(1, 0.1), (5, 0.1), (20, 2.0)])
def test_vanilla_optimal_step_tends_to_eta_star_at_rate_one_over_L(d, sigma2):
    """η_vanilla − η* = −η*²/(L + η*) → 0 like 1/L once L ≫ (1+σ²)d (η* → 1)."""
    Ls = np.array([2**k for k in range(12, 21)])
    eta = np.array([cf.gd_optimal_eta(Setting(d=d, L=int(L), sigma2=sigma2)) for L in Ls])
    es = np.array([manifold.eta_star(Setting(d=d, L=int(L), sigma2=sigma2)) for L in Ls])
    np.testing.assert_allclose(eta - es, -(es**2) / (Ls + es), rtol=1e-6)
    slope = np.polyfit(np.log(Ls), np.log(np.abs(eta - es)), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.05)


@pytest.mark.parametrize("xi", [0.125, 0.5, 1.0, 4.0])
@pytest.mark.parametrize("sigma2", [0.0, 0.1, 2.0])
def test_exact_debiased_risk_tends_to_gd_risk_limit(xi, sigma2):
    """Exact optimal debiased risk at d = ξL minus gd_risk_limit ~ L^-1 (slope −1), and equals η*/L."""
    Ls = np.array([8 * 2**k for k in range(0, 10)])
    lim = cf.gd_risk_limit(sigma2=sigma2, xi=xi)
    err = np.array(
        [cf.gd_optimal_risk(Setting(d=int(xi * L), L=int(L), sigma2=sigma2), debiased=True) - lim for L in Ls]
    )
    assert np.all(err > 0)
    slope = np.polyfit(np.log(Ls), np.log(err), 1)[0]
    assert slope == pytest.approx(-1.0, abs=1e-6)
    eta_lim = 1.0 / (1.0 + (1.0 + sigma2) * xi)
    np.testing.assert_allclose(err * Ls, eta_lim, rtol=1e-9)
    # vanilla GD shares the limit
    err_v = abs(cf.gd_optimal_risk(Setting(d=int(xi * Ls[-1]), L=int(Ls[-1]), sigma2=sigma2)) - lim)
    assert err_v < 10.0 / Ls[-1]


# ---------------------------------------------------------------------------
# Bayes risk
# ---------------------------------------------------------------------------


def _mp_quadrature_bayes(sigma2, xi):
    """σ² + σ²ξ ∫ dμ_MP(t)/(t + σ²ξ), integrating the Marchenko–Pastur density (scipy quad).

    μ_MP with ratio ξ (variance 1) has density √((b−t)(t−a))/(2πξt) on [a, b],
    a, b = (1 ∓ √ξ)², plus an atom of mass 1 − 1/ξ at 0 when ξ > 1.
    """
    a, b = (1 - math.sqrt(xi)) ** 2, (1 + math.sqrt(xi)) ** 2
    lam = sigma2 * xi
    dens = lambda t: math.sqrt(max((b - t) * (t - a), 0.0)) / (2 * math.pi * xi * t)  # noqa: E731
    mass, _ = integrate.quad(dens, a, b, limit=200)
    m, _ = integrate.quad(lambda t: dens(t) / (t + lam), a, b, limit=200)
    atom = max(0.0, 1.0 - 1.0 / xi)
    assert mass + atom == pytest.approx(1.0, abs=1e-7)
    m += atom / lam
    return sigma2 + sigma2 * xi * m


@pytest.mark.parametrize("sigma2,xi", [(0.1, 0.125), (0.1, 0.5), (1.0, 0.9), (0.5, 2.0), (0.01, 4.0), (3.0, 0.05)])
def test_bayes_risk_limit_matches_marchenko_pastur_quadrature(sigma2, xi):
    assert cf.bayes_risk_limit(sigma2=sigma2, xi=xi) == pytest.approx(_mp_quadrature_bayes(sigma2, xi), rel=1e-7)


@pytest.mark.parametrize(
    "sigma2,xi,Ls", [(0.5, 0.5, (16, 32, 64)), (0.25, 2.0, (8, 16, 32)), (0.1, 0.125, (32, 64, 128))]
)
def test_finite_bayes_risk_tends_to_limit(sigma2, xi, Ls):
    """MC Bayes risk at d = ξL: gap to the limit is O(1/L) (log–log slope −1 ± 0.35) and the
    Richardson extrapolation 2B(2L) − B(L) agrees with the limit within 3 SE."""
    lim = cf.bayes_risk_limit(sigma2=sigma2, xi=xi)
    res = [cf.bayes_risk_finite(Setting(d=int(xi * L), L=L, sigma2=sigma2), n_prompts=3000, seed=100 + L) for L in Ls]
    gaps = np.array([r.risk - lim for r in res])
    ses = np.array([r.stderr for r in res])
    assert np.all(gaps > N_SE * ses), "finite-L bias should be resolved"
    slope = np.polyfit(np.log(Ls), np.log(gaps), 1)[0]
    assert slope == pytest.approx(-1.0, abs=0.35)
    (b1, s1), (b2, s2) = (res[-2].risk, res[-2].stderr), (res[-1].risk, res[-1].stderr)
    rich = 2 * b2 - b1
    assert abs(rich - lim) <= N_SE * math.hypot(2 * s2, s1)


def _ridge_plain_mc(d, L, sigma2, n, seed):
    """Plain MC of (y_q − x_qᵀβ̂)², β̂ = (XᵀX + σ²d I)⁻¹ Xᵀy (docs/theory.md#predictors)."""
    p = sample_prompts(n, Setting(d=d, L=L, sigma2=sigma2), seed=seed)
    XtX = np.matmul(np.swapaxes(p.X, 1, 2), p.X) + sigma2 * d * np.eye(d)
    Xty = np.einsum("nld,nl->nd", p.X, p.y)
    bhat = np.linalg.solve(XtX, Xty[..., None])[..., 0]
    v = (p.y_q - np.einsum("nd,nd->n", bhat, p.x_q)) ** 2
    return v.mean(), v.std(ddof=1) / math.sqrt(n)


@pytest.mark.parametrize("d,L,sigma2", [(5, 40, 0.1), (4, 6, 0.5), (8, 4, 0.3), (1, 3, 1.0)])
def test_rao_blackwellised_bayes_matches_plain_ridge_monte_carlo(d, L, sigma2):
    est = cf.bayes_risk_finite(Setting(d=d, L=L, sigma2=sigma2), n_prompts=20000, seed=1)
    rb, se_rb = est.risk, est.stderr
    pl, se_pl = _ridge_plain_mc(d, L, sigma2, n=100000, seed=2)
    assert se_rb < se_pl  # Rao–Blackwellisation reduces variance
    assert abs(rb - pl) <= N_SE * math.hypot(se_rb, se_pl), f"{abs(rb - pl) / math.hypot(se_rb, se_pl):.2f} SE"


@pytest.mark.parametrize("L,sigma2", [(1, 0.5), (3, 0.1), (10, 2.0)])
def test_bayes_risk_finite_d1_matches_chi2_integral(L, sigma2):
    """d = 1: risk = σ² + E[σ²/(χ²_L + σ²)], a 1-D integral over the χ²_L density."""
    val, _ = integrate.quad(lambda t: sigma2 / (t + sigma2) * stats.chi2.pdf(t, L), 0, np.inf, limit=200)
    exact = sigma2 + val
    est = cf.bayes_risk_finite(Setting(d=1, L=L, sigma2=sigma2), n_prompts=50000, seed=3)
    mc, se = est.risk, est.stderr
    assert abs(mc - exact) <= N_SE * se


@pytest.mark.parametrize("d,L", [(5, 40), (8, 4), (6, 6)])
def test_bayes_risk_finite_noiseless_limit(d, L):
    """σ² = 0 returns max(0, d − L)/d; a tiny σ² is close to it."""
    e0 = cf.bayes_risk_finite(Setting(d=d, L=L, sigma2=0.0), n_prompts=10, seed=0)
    assert (e0.risk, e0.stderr) == (max(0, d - L) / d, 0.0)
    e = cf.bayes_risk_finite(Setting(d=d, L=L, sigma2=1e-10), n_prompts=200, seed=0)
    assert abs(e.risk - e0.risk) < 1e-6 + N_SE * e.stderr
    assert cf.bayes_risk_limit(sigma2=0.0, xi=d / L) == pytest.approx(max(0.0, 1 - L / d), abs=1e-15)


def test_bayes_risk_finite_is_seeded():
    a = cf.bayes_risk_finite(Setting(d=3, L=7, sigma2=0.2), n_prompts=500, seed=5)
    b = cf.bayes_risk_finite(Setting(d=3, L=7, sigma2=0.2), n_prompts=500, seed=5, batch_size=37)
    assert a.risk == pytest.approx(b.risk, rel=1e-13)


def test_risk_ratio_finite_delta_method():
    d, L, sigma2 = 4, 16, 0.3
    est = cf.risk_ratio_finite(Setting(d=d, L=L, sigma2=sigma2), n_prompts=2000, seed=9)
    bayes = cf.bayes_risk_finite(Setting(d=d, L=L, sigma2=sigma2), n_prompts=2000, seed=9)
    b, se_b = bayes.risk, bayes.stderr
    g = cf.gd_optimal_risk(Setting(d=d, L=L, sigma2=sigma2), debiased=True)
    assert est.ratio == pytest.approx(g / b, rel=1e-14)
    assert est.stderr == pytest.approx(g * se_b / b**2, rel=1e-12)
    assert est.gd_risk == g and est.bayes.risk == b


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------

SIGMA2 = _log_uniform(1e-3, 1e3)
XI = _log_uniform(1e-3, 1e3)


@given(sigma2=SIGMA2, xi=XI)
def test_property_ratio_below_bound_under_theorem_condition(sigma2, xi):
    """Theorem 1(c): σ² > 0, σ² + 1/ξ > 1  ⇒  gd_risk_limit/bayes_risk_limit ≤ 1 + σ⁻²{(1+ξσ²)(1+σ²+1/ξ)}⁻¹."""
    if sigma2 + 1.0 / xi > 1.0:
        assert cf.risk_ratio_limit(sigma2=sigma2, xi=xi) <= cf.risk_ratio_bound(sigma2=sigma2, xi=xi)


@given(sigma2=st.one_of(st.just(0.0), _log_uniform(1e-6, 1e6)), xi=_log_uniform(1e-6, 1e6))
def test_property_gd_risk_at_least_bayes_risk(sigma2, xi):
    """Bayes optimality: gd_risk_limit(σ², ξ) ≥ bayes_risk_limit(σ², ξ) ≥ σ²; so ratio ≥ 1 when σ² > 0."""
    g, b = cf.gd_risk_limit(sigma2=sigma2, xi=xi), cf.bayes_risk_limit(sigma2=sigma2, xi=xi)
    assert g >= b >= sigma2
    if sigma2 > 0:
        assert cf.risk_ratio_limit(sigma2=sigma2, xi=xi) >= 1.0


@given(sigma2=_log_uniform(1e-6, 1e6), xi=_log_uniform(1e-6, 1e6))
def test_property_float64_matches_mpmath(sigma2, xi):
    """float64 closed forms = 50-digit mpmath closed forms to 1e-13 (relative), where float64 is well-conditioned."""
    for f64, fmp in [
        (cf.gd_risk_limit, cf.gd_risk_limit_mp),
        (cf.bayes_risk_limit, cf.bayes_risk_limit_mp),
        (cf.risk_ratio_bound, cf.risk_ratio_bound_mp),
        (cf.risk_ratio_limit, cf.risk_ratio_limit_mp),
    ]:
        ref = fmp(sigma2=sigma2, xi=xi)
        assert abs(f64(sigma2=sigma2, xi=xi) / float(ref) - 1.0) <= 1e-13


@given(d=st.integers(1, 60), L=st.integers(2, 200), sigma2=st.floats(0, 10), eta=st.floats(-3, 3))
def test_property_debiasing_costs_one_sample(d, L, sigma2, eta):
    """R_debiased(η; d, L) = R_vanilla(η(L−1)/L; d, L−1): XᵀCX is Wishart with L−1 degrees of freedom,
    and the optimal debiased risk is below the debiased risk at any η."""
    deb = cf.gd_risk(eta, Setting(d=d, L=L, sigma2=sigma2), debiased=True)
    van = cf.gd_risk(eta * (L - 1) / L, Setting(d=d, L=L - 1, sigma2=sigma2)) if L > 1 else None
    assert deb == pytest.approx(van, rel=1e-12, abs=1e-12)
    assert cf.gd_optimal_risk(Setting(d=d, L=L, sigma2=sigma2), debiased=True) <= deb + 1e-12


def test_array_inputs_broadcast():
    s = np.array([0.1, 1.0])[:, None]
    x = np.array([0.5, 2.0, 8.0])[None, :]
    out = cf.bayes_risk_limit(sigma2=s, xi=x)
    assert out.shape == (2, 3)
    assert out[1, 2] == pytest.approx(cf.bayes_risk_limit(sigma2=1.0, xi=8.0), rel=1e-15)


def test_landmarks_are_defined_once():
    """eta_star, mu_gamma, single_head_optimum, drift_law_gamma live in reduced_dynamics only; any name that
    proofs_check and reduced_dynamics both export is the same object."""
    for name in ("eta_star", "inf_loss", "mu_gamma", "single_head_optimum", "drift_law_gamma"):
        assert name not in proofs_check.__all__ and name not in cf.__all__
        assert getattr(reduced_dynamics, name) is getattr(manifold, name)
    for name in set(proofs_check.__all__) & set(getattr(reduced_dynamics, "__all__", ())):
        assert getattr(proofs_check, name) is getattr(reduced_dynamics, name), name


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

BAD = [
    # (label, call, parameter named in the message)
    ("gd_risk-eta", lambda: cf.gd_risk(float("nan"), Setting(d=3, L=5, sigma2=0.1)), "eta"),
    ("gd_risk-eta-array", lambda: cf.gd_risk([0.5, np.inf], Setting(d=3, L=5, sigma2=0.1)), "eta"),
    ("gd_risk-d", lambda: cf.gd_risk(0.5, Setting(d=0, L=5, sigma2=0.1)), "d"),
    ("gd_risk-L", lambda: cf.gd_risk(0.5, Setting(d=3, L=2.5, sigma2=0.1)), "L"),
    ("gd_risk-sigma2", lambda: cf.gd_risk(0.5, Setting(d=3, L=5, sigma2=-0.1)), "sigma2"),
    ("gd_optimal_eta-L-array", lambda: cf.gd_optimal_eta(Setting(d=3, L=[4, 1], sigma2=0.1), debiased=True), "L"),
    ("gd_risk-setting", lambda: cf.gd_risk(0.5, (3, 5, 0.1)), "setting"),
    ("gd_risk-Sigma", lambda: cf.gd_risk(0.5, Setting(d=2, L=5, sigma2=0.1, Sigma=[[2, 0], [0, 1]])), "setting.Sigma"),
    ("gd_optimal_eta-L", lambda: cf.gd_optimal_eta(Setting(d=3, L=1, sigma2=0.1), debiased=True), "L"),
    ("gd_optimal_risk-L", lambda: cf.gd_optimal_risk(Setting(d=3, L=0, sigma2=0.1)), "L"),
    ("gd_risk_limit-xi", lambda: cf.gd_risk_limit(sigma2=0.1, xi=0.0), "xi"),
    ("gd_risk_limit-sigma2", lambda: cf.gd_risk_limit(sigma2=-1.0, xi=0.5), "sigma2"),
    ("gd_risk_limit-broadcast", lambda: cf.gd_risk_limit(sigma2=[0.1, 0.2], xi=[1.0, 2.0, 3.0]), "sigma2"),
    ("bayes_risk_limit-xi", lambda: cf.bayes_risk_limit(sigma2=0.1, xi=-2.0), "xi"),
    ("bayes_risk_limit-xi-inf", lambda: cf.bayes_risk_limit(sigma2=0.1, xi=float("inf")), "xi"),
    ("bayes_risk_limit-sigma2", lambda: cf.bayes_risk_limit(sigma2=float("nan"), xi=1.0), "sigma2"),
    ("risk_ratio_bound-sigma2", lambda: cf.risk_ratio_bound(sigma2=0.0, xi=1.0), "sigma2"),
    ("risk_ratio_limit-sigma2", lambda: cf.risk_ratio_limit(sigma2=0.0, xi=0.5), "sigma2"),
    ("risk_ratio_bound_mp-xi", lambda: cf.risk_ratio_bound_mp(sigma2=0.1, xi=0.0), "xi"),
    ("bayes_risk_limit_mp-sigma2", lambda: cf.bayes_risk_limit_mp(sigma2=-0.1, xi=1.0), "sigma2"),
    ("gd_risk_limit_mp-dps", lambda: cf.gd_risk_limit_mp(sigma2=0.1, xi=1.0, dps=5), "dps"),
    (
        "bayes_risk_finite-n",
        lambda: cf.bayes_risk_finite(Setting(d=3, L=5, sigma2=0.1), n_prompts=0, seed=0),
        "n_prompts",
    ),
    (
        "bayes_risk_finite-seed",
        lambda: cf.bayes_risk_finite(Setting(d=3, L=5, sigma2=0.1), n_prompts=10, seed=None),
        "seed",
    ),
    ("bayes_risk_finite-d", lambda: cf.bayes_risk_finite(Setting(d=-1, L=5, sigma2=0.1), n_prompts=10, seed=0), "d"),
    ("bayes_risk_finite-scalar", lambda: cf.bayes_risk_finite(Setting(L=[5, 6]), n_prompts=10, seed=0), "setting"),
    ("risk_ratio_finite-L", lambda: cf.risk_ratio_finite(Setting(d=3, L=1, sigma2=0.1), n_prompts=10, seed=0), "L"),
    (
        "risk_ratio_finite-sigma2",
        lambda: cf.risk_ratio_finite(Setting(d=3, L=5, sigma2=0.0), n_prompts=10, seed=0),
        "sigma2",
    ),
]


@pytest.mark.parametrize("call,name", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_raises_value_error_naming_parameter(call, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        call()


def test_mp_functions_return_requested_precision():
    v = cf.bayes_risk_limit_mp(sigma2=0.1, xi=0.5, dps=60)
    with mpmath.workdps(80):
        ref = cf.bayes_risk_limit_mp(sigma2=0.1, xi=0.5, dps=80)
        assert abs(v - ref) < mpmath.mpf(10) ** -58


# ---------------------------------------------------------------------------
# broadcasting: every closed form equals a loop of scalar calls
# ---------------------------------------------------------------------------

ETAS = np.array([-0.5, 0.0, 0.3, 0.88, 1.7])
GRID_D = np.array([1, 5, 20])[:, None, None]
GRID_L = np.array([2, 40, 1000])[None, :, None]
GRID_S2 = np.array([0.0, 0.1, 3.0])[None, None, :]


@pytest.mark.parametrize("debiased", [False, True])
def test_gd_risk_broadcasts_over_eta_and_setting_like_a_loop(debiased):
    setting = Setting(d=GRID_D, L=GRID_L, sigma2=GRID_S2)
    eta = ETAS.reshape(-1, 1, 1, 1)
    out = cf.gd_risk(eta, setting, debiased=debiased)
    assert out.shape == (ETAS.size, 3, 3, 3)
    for idx in np.ndindex(out.shape):
        k, i, j, m = idx
        s = Setting(d=int(GRID_D[i, 0, 0]), L=int(GRID_L[0, j, 0]), sigma2=float(GRID_S2[0, 0, m]))
        ref = cf.gd_risk(float(ETAS[k]), s, debiased=debiased)
        assert isinstance(ref, float)
        assert out[idx] == pytest.approx(ref, rel=1e-15, abs=1e-15)
    # eta array with a scalar setting
    scalar = Setting(d=5, L=40, sigma2=0.1)
    np.testing.assert_allclose(
        cf.gd_risk(ETAS, scalar, debiased=debiased),
        [cf.gd_risk(float(e), scalar, debiased=debiased) for e in ETAS],
        rtol=1e-15,
        atol=1e-15,
    )


@pytest.mark.parametrize("func", [cf.gd_optimal_eta, cf.gd_optimal_risk])
@pytest.mark.parametrize("debiased", [False, True])
def test_gd_optimum_broadcasts_over_setting_like_a_loop(func, debiased):
    setting = Setting(d=GRID_D, L=GRID_L, sigma2=GRID_S2)
    out = func(setting, debiased=debiased)
    assert out.shape == setting.shape == (3, 3, 3)
    for i, j, m in np.ndindex(out.shape):
        s = Setting(d=int(GRID_D[i, 0, 0]), L=int(GRID_L[0, j, 0]), sigma2=float(GRID_S2[0, 0, m]))
        ref = func(s, debiased=debiased)
        assert isinstance(ref, float)
        assert out[i, j, m] == pytest.approx(ref, rel=1e-15)


LIMIT_FUNCS = [
    cf.gd_risk_limit,
    cf.bayes_risk_limit,
    cf.risk_ratio_limit,
    cf.risk_ratio_bound,
    cf.risk_ratio_excess,
    cf.bound_slack,
    cf.bound_relative_slack,
]


@pytest.mark.parametrize("func", LIMIT_FUNCS, ids=lambda f: f.__name__)
def test_limit_functions_broadcast_like_a_loop(func):
    s = np.array([1e-3, 0.1, 2.0, 1e3])[:, None]
    x = np.array([1e-3, 0.125, 1.0, 8.0, 1e3])[None, :]
    out = func(sigma2=s, xi=x)
    assert out.shape == (4, 5)
    for i, j in np.ndindex(out.shape):
        ref = func(sigma2=float(s[i, 0]), xi=float(x[0, j]))
        assert isinstance(ref, float)
        assert out[i, j] == ref  # elementwise arithmetic: bit for bit


@pytest.mark.parametrize(
    "func", [cf.gd_risk_limit_mp, cf.bayes_risk_limit_mp, cf.risk_ratio_limit_mp, cf.risk_ratio_bound_mp]
)
def test_mp_functions_broadcast_like_a_loop(func):
    s, x = np.array([0.1, 2.0])[:, None], np.array([0.5, 4.0, 9.0])
    out = func(sigma2=s, xi=x, dps=30)
    assert out.shape == (2, 3) and out.dtype == object
    for i, j in np.ndindex(out.shape):
        ref = func(sigma2=float(s[i, 0]), xi=float(x[j]), dps=30)
        assert isinstance(ref, mpmath.mpf) and out[i, j] == ref


def test_limit_functions_require_keywords():
    with pytest.raises(TypeError):
        cf.bayes_risk_limit(0.1, 0.125)  # type: ignore[misc]


def test_risk_ratio_excess_is_exact_where_the_ratio_rounds_to_one():
    """On the log grid σ², ξ ∈ [1e-3, 1e3] (241²), risk_ratio_limit − 1 rounds to <= 0 at many points, while
    risk_ratio_excess stays > 0 and equals r − 1 from 200-digit mpmath to 1e-10 (relative)."""
    g = np.logspace(-3, 3, 241)
    S, X = np.meshgrid(g, g, indexing="ij")
    naive = np.asarray(cf.risk_ratio_limit(sigma2=S, xi=X)) - 1.0
    rounded = naive <= 0
    assert rounded.sum() >= 50  # the situation the function exists for (measured: 340 points)
    excess = np.asarray(cf.risk_ratio_excess(sigma2=S, xi=X))
    assert np.all(excess > 0)
    with mpmath.workdps(200):
        for sv, xv, ev in zip(S[rounded], X[rounded], excess[rounded], strict=True):
            ref = cf.risk_ratio_limit_mp(sigma2=float(sv), xi=float(xv), dps=200) - 1
            assert ref > 0
            assert abs(ev / float(ref) - 1.0) <= 1e-10, (sv, xv)
