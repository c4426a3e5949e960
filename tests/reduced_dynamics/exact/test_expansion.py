"""Tests of the exact small-γ expansion on the solution manifold (reduced_dynamics.exact.expansion).

Independent routes: the Gaussian power-sum moments against brute-force enumeration of index
assignments at small integer L; the softmax series against the softmax itself (pathwise, finite
differences in γ); the averaged coefficients against Monte Carlo of the pathwise coefficients;
the 1/L parts against the corrected loss; the γ⁰ term against proofs_check.closed_forms.gd_risk.
"""

import itertools
import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from proofs_check.closed_forms import gd_risk
from reduced_dynamics.dynamics.corrected_loss import corrected_manifold_coefficients
from reduced_dynamics.exact.expansion import (
    closed_form_coefficients,
    derive_manifold_expansion,
    dgd_risk,
    exact_manifold_coefficients,
    expansion_symbols,
    manifold_minimiser_estimate,
    pathwise_gamma_coefficients,
    power_sum_moment,
)
from reduced_dynamics.setting import Setting

PAPER = Setting(d=5, L=40, sigma2=0.1)


def _brute_moment(ks, L):
    """E Π_i Σ_l g_l^{k_i} by summing over all index assignments (independent of the set-partition recursion)."""

    def m(n):
        return 0 if n % 2 else math.prod(range(n - 1, 0, -2))

    tot = 0
    for assign in itertools.product(range(L), repeat=len(ks)):
        powers = [0] * L
        for k, l in zip(ks, assign):
            powers[l] += k
        tot += math.prod(m(p) for p in powers)
    return tot


@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.integers(1, 3))
def test_power_sum_moment_matches_enumeration(ks, L):
    expr = power_sum_moment(ks)
    assert int(expr.subs(expansion_symbols().L, L)) == _brute_moment(ks, L)


def test_power_sum_moment_known_values():
    Ls = expansion_symbols().L
    assert sp.expand(power_sum_moment([2, 2]) - Ls * (Ls + 2)) == 0  # E (χ²_L)²
    assert sp.expand(power_sum_moment([1, 1, 1, 1]) - 3 * Ls**2) == 0  # E (N(0, L))⁴
    assert power_sum_moment([3]) == 0


def test_derived_coefficients_equal_closed_forms():
    derived = derive_manifold_expansion(4).coefficients
    for got, typed in zip(derived, closed_form_coefficients()):
        assert sp.simplify(got - typed) == 0


@pytest.mark.parametrize("setting", [PAPER, Setting(d=3, L=7, sigma2=1.5), Setting(d=20, L=300, sigma2=0.01)])
def test_numeric_closed_forms_equal_symbolic(setting):
    S = expansion_symbols()
    subs = {S.L: setting.L, S.d: setting.d, S.sigma2: setting.sigma2}
    for eta in (0.3, setting.eta_star, 1.2):
        c = exact_manifold_coefficients(eta, setting)
        R0, A2, A4 = (float(e.subs({**subs, S.eta: eta})) for e in closed_form_coefficients())
        np.testing.assert_allclose([c.a0, c.a2, c.a4], [R0, A2, A4], rtol=1e-12)


@pytest.mark.parametrize("setting", [PAPER, Setting(d=2, L=3, sigma2=0.5)])
def test_gamma0_term_is_debiased_gd_risk(setting):
    """A₀ and dgd_risk are the library's one debiased-GD risk (gd_risk), value for value; the formula itself
    is checked against the sympy closed form above and against Monte Carlo in tests/proofs_check."""
    etas = np.array([0.2, setting.eta_star, 1.0, -3.0, 1e5])
    assert np.array_equal(dgd_risk(etas, setting), gd_risk(etas, setting, debiased=True))
    assert np.array_equal(exact_manifold_coefficients(etas, setting).a0, gd_risk(etas, setting, debiased=True))
    assert dgd_risk(None, setting) == gd_risk(setting.eta_star, setting, debiased=True)


def test_one_over_L_parts_are_the_corrected_loss_coefficients():
    """L·A₂ and L·A₄ tend to the corrected loss's a₂, a₄ at fixed η (rate 1/L)."""
    for eta in (0.5, 0.9):
        errs2, errs4 = [], []
        for L in (1e3, 1e4, 1e5):
            s = Setting(d=5, L=int(L), sigma2=0.1)
            ex = exact_manifold_coefficients(eta, s)
            co = corrected_manifold_coefficients(eta, s)
            errs2.append(abs(L * ex.a2 - co.a2) / co.a2)
            errs4.append(abs(L * ex.a4 - co.a4) / co.a4)
        for errs in (errs2, errs4):
            assert errs[-1] < 1e-3
            assert 8 < errs[0] / errs[1] < 12 and 8 < errs[1] / errs[2] < 12


@given(
    st.integers(1, 200),
    st.integers(2, 5000),
    st.floats(0.0, 100.0),
)
def test_a2_at_eta_star_is_negative_closed_form(d, L, sigma2):
    s = Setting(d=d, L=L, sigma2=sigma2)
    c = exact_manifold_coefficients(None, s)
    es = s.eta_star
    assert c.a2 == pytest.approx(-4 * es**2 * (L - 1) * (d + 2) / L**3, rel=1e-10)
    assert c.a2 < 0 < c.a4


def test_pathwise_series_matches_softmax_by_finite_differences():
    """The series step alone: per prompt, the conditional risk minus its series through γ⁶ is O(γ⁸)."""
    rng = np.random.default_rng(3)
    s = Setting(d=4, L=12, sigma2=0.3)
    g = rng.standard_normal((6, s.L))
    r2 = rng.chisquare(s.d, 6)
    eta = 0.8
    co = pathwise_gamma_coefficients(g, r2, eta, s, order=6)

    def loss(gam):
        r = np.sqrt(r2)[:, None]

        def sm(t):
            z = t * r * g
            z = z - z.max(1, keepdims=True)
            e = np.exp(z)
            return e / e.sum(1, keepdims=True)

        w = eta / (2 * gam) * (sm(gam) - sm(-gam))
        return (np.sqrt(r2) - (w * g).sum(1)) ** 2 / s.d + s.sigma2 + ((s.d - 1) / s.d + s.sigma2) * (w * w).sum(1)

    for gam in (0.02, 0.04):
        pred = sum(co[n] * gam ** (2 * n) for n in range(4))
        resid = np.abs(loss(gam) - pred)
        bound = 1e-13 + 1e3 * np.abs(co).max() * gam**8
        assert np.all(resid < bound)
    # and the series without its γ⁶ term misses by order γ⁶ (the check can fail)
    gam = 0.04
    pred4 = sum(co[n] * gam ** (2 * n) for n in range(3))
    np.testing.assert_allclose(loss(gam) - pred4, co[3] * gam**6, rtol=0.05, atol=1e-14)


def test_averaged_coefficients_match_monte_carlo_of_pathwise_coefficients():
    """The Gaussian-average step: Monte Carlo means of the pathwise coefficients within 4 SE."""
    s = Setting(d=3, L=6, sigma2=0.2)
    eta = 0.7
    rng = np.random.default_rng(11)
    n = 200_000
    a = pathwise_gamma_coefficients(rng.standard_normal((n, s.L)), rng.chisquare(s.d, n), eta, s, order=4)
    mean, se = a.mean(1), a.std(1) / np.sqrt(n)
    c = exact_manifold_coefficients(eta, s)
    z = (mean - np.array([c.a0, c.a2, c.a4])) / se
    assert np.all(np.abs(z) < 4), z
    # and the check can fail: the corrected loss's a₂/L is far outside the error bar at L = 6
    wrong = corrected_manifold_coefficients(eta, s).a2 / s.L
    assert abs(mean[1] - wrong) > 10 * se[1]


def test_order6_coefficient_one_over_L_part_matches_corrected_loss_series():
    """A₆'s 1/L part is the corrected loss's γ⁶ coefficient (1−η)η(d+2)(d+4)(d+6)/3 (series of (1−2γ²)^(−d/2−1))."""
    S = expansion_symbols()
    A6 = derive_manifold_expansion(6).coefficients[3]
    lead = sp.limit(A6 * S.L, S.L, sp.oo)
    assert sp.simplify(lead - (1 - S.eta) * S.eta * (S.d + 2) * (S.d + 4) * (S.d + 6) / 3) == 0


def test_minimiser_estimate_scales_like_inverse_sqrt_L():
    g = [manifold_minimiser_estimate(Setting(d=5, L=L, sigma2=0.1)).gamma for L in (1000, 4000)]
    assert g[0] / g[1] == pytest.approx(2.0, rel=0.01)
    m = manifold_minimiser_estimate(PAPER)
    assert m.depth < 0 and m.risk < dgd_risk(None, PAPER)


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda: exact_manifold_coefficients(np.inf, PAPER), "`eta`"),
        (lambda: derive_manifold_expansion(3), "`order`"),
        (lambda: derive_manifold_expansion(8), "`order`"),
        (lambda: power_sum_moment([0]), "`ks`"),
        (lambda: pathwise_gamma_coefficients(np.zeros((2, 5)), np.ones(2), 0.5, PAPER), "`g`"),
    ],
)
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()
