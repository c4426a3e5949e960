"""Tests of proofs_check.bayes: the Theorem 1(c) ratio bound, its slack, and the checker."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs_check import bayes
from proofs_check import closed_forms as cf
from proofs_check.result import CheckResult
from reduced_dynamics.setting import Setting


def _log_uniform(lo, hi):
    return st.floats(min_value=math.log10(lo), max_value=math.log10(hi)).map(lambda e: 10.0**e)


SIGMA2 = _log_uniform(1e-4, 1e4)
XI = _log_uniform(1e-4, 1e4)


def test_symbolic_certificate_holds():
    cert = bayes.bound_certificate()
    identities = dict(cert.identities)
    assert len(identities) == 5 and all(identities.values()), identities
    assert cert.polynomial_coefficients_positive
    assert cert.all_hold
    assert cert.to_dict()["identities"] == identities


@given(sigma2=SIGMA2, xi=XI)
def test_property_bound_holds_without_the_condition(sigma2, xi):
    """1 < r < U for every σ² > 0, ξ > 0 (including σ² + 1/ξ ≤ 1), with r, U from 50-digit mpmath."""
    r = cf.risk_ratio_limit_mp(sigma2=sigma2, xi=xi, dps=120)
    U = cf.risk_ratio_bound_mp(sigma2=sigma2, xi=xi, dps=120)
    with mpmath.workdps(120):
        assert 1 < r < U


@given(xi=_log_uniform(1.0 + 1e-6, 1e4), frac=st.floats(1e-6, 1.0 - 1e-9))
def test_property_bound_holds_outside_theorem_condition(xi, frac):
    """Outside the condition (σ² = frac·(1 − 1/ξ) ≤ 1 − 1/ξ): the bound still holds: r ≤ U and 0 < (U − r)/(U − 1) < 1."""
    sigma2 = frac * (1.0 - 1.0 / xi)
    assert sigma2 + 1.0 / xi <= 1.0 + 1e-15
    rel = cf.bound_relative_slack(sigma2=sigma2, xi=xi)
    assert 0.0 < rel < 1.0
    assert cf.risk_ratio_limit(sigma2=sigma2, xi=xi) <= cf.risk_ratio_bound(sigma2=sigma2, xi=xi)


@given(sigma2=SIGMA2, xi=XI)
def test_property_stable_slack_formulas_match_naive_mpmath(sigma2, xi):
    """Identities: r − 1 = η*²/(GB + σ²/ξ), (U − r)/(U − 1) = ξ(GB + σ²η*)/(σ² + ξGB), and
    U − r = (U − 1)(1 − ρ) — float64 (cancellation-free) vs naive differences in mpmath, rel 1e-11."""
    ref_rel = bayes.bound_relative_slack_mp(sigma2=sigma2, xi=xi, dps=30)
    assert cf.bound_relative_slack(sigma2=sigma2, xi=xi) == pytest.approx(float(ref_rel), rel=1e-11)
    with mpmath.workdps(200):
        r = cf.risk_ratio_limit_mp(sigma2=sigma2, xi=xi, dps=200)
        U = cf.risk_ratio_bound_mp(sigma2=sigma2, xi=xi, dps=200)
        ref_excess, ref_slack = float(r - 1), float(U - r)
    assert cf.risk_ratio_excess(sigma2=sigma2, xi=xi) == pytest.approx(ref_excess, rel=1e-11)
    assert cf.bound_slack(sigma2=sigma2, xi=xi) == pytest.approx(ref_slack, rel=1e-11)


@given(sigma2=SIGMA2, xi=_log_uniform(1e-10, 1e-7))
def test_property_relative_slack_vanishes_like_one_plus_sigma2_times_xi(sigma2, xi):
    """Tightness as ξ → 0: 1 − ρ = (1+σ²)ξ − σ⁴ξ² + O(ξ²), so |(1−ρ)/((1+σ²)ξ) − 1| ≤ 2σ²ξ + 1e-12."""
    rel = float(bayes.bound_relative_slack_mp(sigma2=sigma2, xi=xi))
    assert abs(rel / ((1 + sigma2) * xi) - 1.0) <= 2 * sigma2 * xi + 1e-12


@pytest.mark.parametrize("sigma2", [1e-3, 1.0, 1e3])
def test_rho_decays_like_sigma4_over_one_plus_sigma2_cubed_xi_at_large_xi(sigma2):
    """ρ ξ (1+σ²)³/σ⁴ → 1 as ξ → ∞ (error O(1/ξ))."""
    vals = [float(bayes.bound_rho_mp(sigma2=sigma2, xi=xi)) * xi * (1 + sigma2) ** 3 / sigma2**2 for xi in (1e6, 1e9)]
    assert abs(vals[1] - 1) < abs(vals[0] - 1) + 1e-12
    assert abs(vals[1] - 1) < 1e-5


@pytest.mark.parametrize("xi", [0.25, 0.5, 0.75])
def test_rho_tends_to_one_minus_xi_as_noise_vanishes(xi):
    """σ² → 0 with ξ < 1: ρ → 1 − ξ (both r and U blow up like 1/σ²)."""
    assert float(bayes.bound_rho_mp(sigma2=1e-12, xi=xi)) == pytest.approx(1 - xi, rel=1e-9)


def test_finite_L_ratio_above_limiting_bound_at_paper_setting():
    """Theorem 1(c) is a limit: at the paper's d=5, L=40, σ²=0.1 the finite ratio exceeds U(σ², d/L)."""
    est = cf.risk_ratio_finite(Setting(d=5, L=40, sigma2=0.1), n_prompts=4000, seed=0)
    U = cf.risk_ratio_bound(sigma2=0.1, xi=5 / 40)
    assert est.ratio - U > 3 * est.stderr


@pytest.fixture(scope="module")
def quick_result():
    return bayes.check_bayes_ratio(quick=True)


def test_check_bayes_ratio_quick_passes(quick_result):
    res = quick_result
    assert isinstance(res, CheckResult)
    assert res.name == "bayes_ratio"
    assert res.passed, res.explanation
    assert res.data["violations_stable"] == 0
    assert res.data["violations_outside_condition"] == 0
    assert res.data["n_outside_condition"] > 0
    assert any(ch.isdigit() for ch in res.measured) and any(ch.isdigit() for ch in res.tolerance)
    assert res.data["elapsed_s"] < 10


def test_check_bayes_ratio_grids_for_plotting(quick_result):
    d = quick_result.data
    ns, nx = len(d["sigma2_grid"]), len(d["xi_grid"])
    for key in ("ratio", "bound", "slack", "relative_slack"):
        arr = np.asarray(d[key])
        assert arr.shape == (ns, nx)
        assert np.all(np.isfinite(arr))
    i, j = 3, 7
    s, x = d["sigma2_grid"][i], d["xi_grid"][j]
    ref = cf.gd_risk_limit(sigma2=s, xi=x) / cf.bayes_risk_limit(sigma2=s, xi=x)
    assert d["ratio"][i][j] == pytest.approx(ref, rel=1e-14)
    assert np.all(np.asarray(d["slack"]) > 0)


def test_check_bayes_ratio_finite_L_gap_shrinks(quick_result):
    for case in quick_result.data["finite_L"]["cases"].values():
        gaps = [row["gap"] for row in case["rows"]]
        assert gaps[-1] < gaps[0]
        assert case["loglog_slope"] == pytest.approx(-1.0, abs=0.3)


@pytest.mark.parametrize(
    "func",
    [cf.bound_slack, cf.bound_relative_slack, cf.risk_ratio_excess, bayes.bound_rho_mp, bayes.bound_relative_slack_mp],
)
@pytest.mark.parametrize(
    "sigma2,xi,name", [(0.0, 1.0, "sigma2"), (-1.0, 1.0, "sigma2"), (1.0, 0.0, "xi"), (1.0, float("nan"), "xi")]
)
def test_bad_input(func, sigma2, xi, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        func(sigma2=sigma2, xi=xi)


def test_check_bayes_ratio_data_is_frozen_and_json_ready(quick_result):
    import json

    d = quick_result.data
    with pytest.raises(TypeError):
        d["ratio"] = None
    assert isinstance(d["ratio"], tuple)
    assert json.loads(json.dumps(d))["violations_stable"] == 0
    assert d["certificate"]["all_hold"] is True
