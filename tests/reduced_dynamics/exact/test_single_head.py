"""Tests of the exact single-head optimum and its closed-form limit (reduced_dynamics.exact.single_head)."""

import numpy as np
import pytest
from scipy.optimize import minimize

from reduced_dynamics.crosscheck.monte_carlo import CovariateSample
from reduced_dynamics.crosscheck.single_head_mc import single_head_profile
from reduced_dynamics.dynamics.corrected_loss import corrected_loss
from reduced_dynamics.exact.single_head import (
    OMEGA_CORRECTED_SECOND_ORDER,
    corrected_loss_error_exponent,
    exact_single_head_optimum,
    exact_single_head_profile,
    single_head_limit,
)
from reduced_dynamics.setting import Setting

PAPER = Setting(d=5, L=40, sigma2=0.1)


@pytest.mark.parametrize("d, sigma2", [(1, 0.0), (5, 0.1), (20, 1.0), (50, 10.0)])
def test_limit_is_the_stationary_point_of_F(d, sigma2):
    lim = single_head_limit(Setting(d=d, L=40, sigma2=sigma2))
    v = lim.omega**2

    def F(v):
        q = 1 - 2 * v
        return (1 + sigma2) * q ** (-d / 2) / v + q ** (-d / 2 - 1)

    h = 1e-6 * v
    assert abs(F(v + h) - F(v - h)) / (2 * h) < 1e-6 * F(v) / v
    assert F(v) == pytest.approx(lim.F)
    assert F(0.9 * v) > F(v) < F(1.1 * v)
    assert 0 < v < 0.5


def test_limit_is_the_large_L_minimiser_of_the_corrected_loss():
    lim = single_head_limit(PAPER)
    errs = []
    for L in (10**4, 10**5):
        s = Setting(d=5, L=L, sigma2=0.1)
        r = minimize(
            lambda th, s=s: corrected_loss([th[0]], [th[1]], s),
            [0.4, 2.5],
            method="Nelder-Mead",
            options=dict(xatol=1e-10, fatol=1e-16, maxiter=4000),
        )
        errs.append(abs(r.x[0] - lim.omega))
    assert errs[1] < 1e-5 and 5 < errs[0] / errs[1] < 20  # rate 1/L for the corrected loss's own minimiser


def test_exact_profile_matches_monte_carlo_profile():
    sample = CovariateSample(40_000, PAPER, seed=3)
    for w in (0.3, 0.52):
        ex = exact_single_head_profile(w, PAPER)
        mc = single_head_profile(w, sample)
        # Monte Carlo SE of A and B from a second, independent sample is not cheap; use the
        # spread of the per-prompt quantities instead: A, B are means of bounded-variance terms.
        assert ex.A == pytest.approx(mc.A, rel=0.01)
        assert ex.B == pytest.approx(mc.B, rel=0.01)


def test_exact_optimum_at_paper_setting_is_a_minimum_of_the_exact_profile():
    r = exact_single_head_optimum(PAPER, omega_tol=1e-4)
    assert 0.45 < r.omega < 0.6  # far from L̃'s 1/√5 = 0.447 ...
    for dw in (-0.01, 0.01):
        assert exact_single_head_profile(r.omega + dw, PAPER).risk_opt > r.risk
    assert r.omega_limit == pytest.approx(single_head_limit(PAPER).omega)
    assert r.mu == pytest.approx(exact_single_head_profile(r.omega, PAPER).mu_opt)


def test_error_exponent_heuristic():
    assert corrected_loss_error_exponent(0.3) == 2.0
    assert corrected_loss_error_exponent(OMEGA_CORRECTED_SECOND_ORDER) == pytest.approx(2.0)
    assert corrected_loss_error_exponent(0.5) == pytest.approx(1.5)
    assert np.all(np.diff(corrected_loss_error_exponent(np.linspace(0.41, 0.7, 10))) < 0)


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda: corrected_loss_error_exponent(0.8), "`omega`"),
        (lambda: exact_single_head_profile(0.0, PAPER), "`omega`"),
        (lambda: exact_single_head_optimum(PAPER, omega_tol=1.0), "`omega_tol`"),
        (lambda: exact_single_head_optimum(PAPER, bracket=(1.0, 0.1)), "`bracket`"),
    ],
)
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


@pytest.mark.parametrize(
    "setting",
    [Setting(d=1000, L=40, sigma2=0.1), Setting(d=5, L=40, sigma2=1e12), Setting(d=5, L=40, sigma2=1e4)],
    ids=["d1000", "sigma2-1e12", "sigma2-1e4"],
)
def test_optimum_where_the_search_used_to_fail(setting):
    """`single-head --d 1000` (the optimum ≈ 0.037 lies below the old lower end 0.05) and `--sigma2 1e12` (the
    risk 1 + σ² − A²/B rounds to 1 + σ² for every ω, so the search wandered to an edge) were RuntimeError
    tracebacks. The search now starts at min(0.05, 0.25/√d) and maximises A²/B: the optimum is checked against
    an independent scan of the exact profile on a grid around it (no point has a larger A²/B), and its μ is
    A/B there."""
    r = exact_single_head_optimum(setting)
    assert 0 < r.omega and np.isfinite(r.risk)
    gain = lambda w: (lambda p: p.A**2 / p.B)(exact_single_head_profile(w, setting))  # noqa: E731
    g0 = gain(r.omega)
    for f in (0.8, 0.9, 0.97, 1.03, 1.1, 1.25):
        assert gain(f * r.omega) <= g0 * (1 + 1e-12), f
    p = exact_single_head_profile(r.omega, setting)
    assert r.mu == pytest.approx(p.A / p.B, rel=1e-12)


@pytest.mark.parametrize(("bracket", "edge"), [((0.05, 0.3), "upper"), ((0.8, 1.2), "lower")])
def test_a_given_bracket_without_the_optimum_is_named(bracket, edge):
    """The optimum at the paper's setting is ω ≈ 0.518: a bracket on one side of it is a ValueError naming
    `bracket` and the edge (it was a RuntimeError, or for the upper edge a misleading "`L` too short")."""
    with pytest.raises(ValueError, match=f"{edge} edge of `bracket`"):
        exact_single_head_optimum(PAPER, bracket=bracket)
