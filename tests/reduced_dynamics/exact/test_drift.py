"""Tests of the exact drift law and the manifold minimiser (reduced_dynamics.exact.drift).

Independent routes: paired Monte Carlo of the manifold excess against the exact evaluator and
against the expansion; the drift law's two regimes against their closed forms.
"""

import numpy as np
import pytest

from reduced_dynamics.exact.drift import (
    drift_time_scales,
    exact_drift_gamma,
    exact_drift_rate,
    exact_manifold_minimum,
    manifold_excess_exact,
    manifold_excess_mc,
    richardson_coefficients,
)
from reduced_dynamics.exact.expansion import exact_manifold_coefficients
from reduced_dynamics.setting import Setting

PAPER = Setting(d=5, L=40, sigma2=0.1)


def test_exact_excess_is_negative_near_gamma_min_and_matches_paired_monte_carlo():
    gam = [0.07, 0.12]
    ex = manifold_excess_exact(gam, PAPER)
    mc = manifold_excess_mc(gam, PAPER, n_prompts=500_000, seed=5)
    z = (mc.excess - ex.excess) / mc.stderr
    assert np.all(np.abs(z) < 3.5), z
    # the dip below debiased GD is resolved by the Monte Carlo alone (> 4 SE) ...
    assert mc.excess[0] + 4 * mc.stderr[0] < 0
    # ... and the risk rises again above it at γ = 0.12
    assert ex.excess[1] > 0 > ex.excess[0]


def test_richardson_extraction_matches_closed_forms():
    r = richardson_coefficients(PAPER)
    assert abs(r.a2_residual) < 1e-6
    assert abs(r.a4_residual) < 1e-4
    # the corrected loss's positive γ² coefficient would be far off (the check can fail)
    from reduced_dynamics.dynamics.corrected_loss import corrected_manifold_coefficients

    wrong = corrected_manifold_coefficients(PAPER.eta_star, PAPER).a2 / PAPER.L
    assert abs(r.a2 - wrong) > 0.5 * abs(r.a2)


def test_exact_minimum_is_a_strict_local_minimum_below_debiased_gd():
    m = exact_manifold_minimum(PAPER, gamma_tol=1e-3)
    assert m.depth < 0
    assert np.all(m.hessian_eigenvalues > 0)
    # the leading-order estimate is within 10 % at L = 40
    assert m.gamma == pytest.approx(m.gamma_estimate, rel=0.1)
    assert m.depth == pytest.approx(m.depth_estimate, rel=0.1)


def test_drift_law_regimes():
    s = Setting(d=5, L=200, sigma2=0.1)
    ts = drift_time_scales(s)
    # early: the t^(-1/6) law with the exact A4
    t = np.array([1e3, 1e4, 1e5])
    g = exact_drift_gamma(t, s, gamma0=0.5, t0=0.0)
    law = (ts.law_constant * 0.5 * t) ** (-1 / 6)
    np.testing.assert_allclose(g / law, 1, rtol=0.03)
    # late: exponential approach to γ_min at rate λ
    tl = ts.t_cross * np.array([30.0, 40.0])
    gl = exact_drift_gamma(tl, s, gamma0=0.5, t0=0.0)
    assert np.all(gl > ts.gamma_min)
    rate = -np.log((gl[1] - ts.gamma_min) / (gl[0] - ts.gamma_min)) / (tl[1] - tl[0])
    assert rate == pytest.approx(ts.relax_rate, rel=0.05)
    # the rate vanishes at γ_min and has the sign of -(2A2 + 4A4γ²)
    assert exact_drift_rate(ts.gamma_min, s) == pytest.approx(0, abs=1e-20)
    assert exact_drift_rate(2 * ts.gamma_min, s) < 0 < exact_drift_rate(ts.gamma_min / 2, s)


def test_time_scales_consistent_with_coefficients():
    ts = drift_time_scales(PAPER, n_positive=2, n_negative=1)
    c = exact_manifold_coefficients(None, PAPER)
    assert ts.a2 == c.a2 and ts.a4 == c.a4
    assert ts.gamma_min == pytest.approx(np.sqrt(-c.a2 / (2 * c.a4)))


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda: exact_drift_gamma(1.0, PAPER, gamma0=2.0), "`gamma0`"),
        (lambda: exact_drift_gamma(-1.0, PAPER, gamma0=0.1), "`t`"),
        (lambda: exact_drift_rate(0.1, PAPER, order=5), "`order`"),
        (lambda: manifold_excess_mc(0.1, PAPER, n_prompts=1, seed=0), "`n_prompts`"),
        (lambda: manifold_excess_exact(0.0, PAPER), "`gamma`"),
        (lambda: drift_time_scales(PAPER, n_positive=0), "`n_positive`"),
        (lambda: exact_manifold_minimum(PAPER, bracket=(0.5, 0.1)), "`bracket`"),
    ],
)
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


@pytest.mark.parametrize("eta", [0.0, -0.5])
def test_the_drift_law_refuses_a_step_that_is_not_positive(eta):
    """``exact_drift_gamma(eta=0)`` raised ZeroDivisionError and ``exact_drift_rate(eta=0)`` returned inf/NaN
    with a RuntimeWarning: the law divides by η², so η must be > 0 (a ValueError naming `eta`)."""
    from reduced_dynamics.exact.drift import exact_drift_gamma, exact_drift_rate

    s = Setting(d=5, L=40, sigma2=0.1)
    with pytest.raises(ValueError, match="`eta`"):
        exact_drift_rate(0.1, s, eta=eta)
    with pytest.raises(ValueError, match="`eta`"):
        exact_drift_gamma(10.0, s, gamma0=0.3, eta=eta)


# ---------------------------------------------------------------- API contract (issue 23)


def test_drift_law_eta_out_of_range_is_refused():
    """exact_drift_rate(eta=1e-320) divided by zero (a RuntimeWarning and inf); exact_drift_gamma raised
    ZeroDivisionError."""
    with pytest.raises(ValueError, match="`eta`"):
        exact_drift_rate(0.1, PAPER, eta=1e-320)
    with pytest.raises(ValueError, match="`eta`"):
        exact_drift_gamma([1.0], PAPER, gamma0=0.1, eta=1e-320)


def test_manifold_excess_mc_refuses_a_huge_eta_and_a_chunk_beyond_the_memory_budget():
    """eta = ±1e300 overflowed (RuntimeWarning, inf); L = 1e9 allocated until MemoryError."""
    import importlib

    api_fuzz = importlib.import_module("api_fuzz")
    for eta in (1e300, -1e300):
        with pytest.raises(ValueError, match="`eta`"):
            manifold_excess_mc(0.1, PAPER, n_prompts=10, seed=0, eta=eta)
    with api_fuzz._memory_limit():
        with pytest.raises(ValueError, match="`chunk`"):
            manifold_excess_mc(0.1, Setting(d=5, L=10**9, sigma2=0.1), n_prompts=10, seed=0, chunk=50)


def test_exact_manifold_minimum_at_the_edge_names_the_setting():
    """d = 2, L = 40 (a valid setting): RuntimeError 'the minimum is at the edge of the bracket'."""
    with pytest.raises(ValueError, match="`setting`.*give a `bracket`"):
        exact_manifold_minimum(Setting(d=2, L=40, sigma2=0.1), gamma_tol=1e-2, tol=1e-8, hessian=False)
