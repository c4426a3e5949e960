"""Closed-form landmarks vs direct numerical minimisation of L̃; broadcasting over array settings."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import minimize, minimize_scalar

from reduced_dynamics import approx_loss
from reduced_dynamics.dynamics.manifold import (
    SingleHeadOptimum,
    drift_law_gamma,
    eta_star,
    flow_eta_gap,
    flow_manifold_gap,
    inf_loss,
    manifold_loss,
    mu_gamma,
    residual_sum_mu,
    single_head_optimum,
)
from reduced_dynamics.setting import Setting

PROBLEMS = [Setting(d=5, L=40, sigma2=0.1), Setting(d=3, L=20, sigma2=0.5), Setting(d=10, L=100, sigma2=0.0)]
PROBLEMS.append(Setting(d=1, L=5, sigma2=2.0))
PAPER = PROBLEMS[0]


@pytest.mark.parametrize("s", PROBLEMS)
def test_single_head_optimum_by_numerical_minimisation(s):
    """BFGS from a generic start finds the docs/theory.md#single-head H = 1 minimiser (to 1e-6)."""
    f = lambda th: approx_loss(th[:1], th[1:], s)  # noqa: E731
    res = minimize(f, x0=[0.3, 0.5], method="BFGS", options={"gtol": 1e-12})
    opt = single_head_optimum(s)
    assert isinstance(opt, SingleHeadOptimum)
    assert abs(res.x[0]) == pytest.approx(opt.omega, abs=1e-6)
    assert abs(res.x[1]) == pytest.approx(opt.mu, abs=1e-6)
    assert res.fun == pytest.approx(opt.loss, abs=1e-12)
    assert opt.omega == pytest.approx(1 / np.sqrt(s.d))
    assert opt.eta_eff == pytest.approx(opt.omega * opt.mu, rel=1e-15)


@pytest.mark.parametrize("s", PROBLEMS)
@pytest.mark.parametrize("gamma", [0.05, 0.2, 0.5])
def test_mu_gamma_minimises_on_the_manifold(s, gamma):
    """On ω = (γ, −γ), μ = (M, −M) the 1-D minimiser over M is μ_γ and the minimum is manifold_loss(γ)."""
    f = lambda M: approx_loss([gamma, -gamma], [M, -M], s)  # noqa: E731
    res = minimize_scalar(f, bracket=(0.0, 1.0), tol=1e-12)
    assert res.x == pytest.approx(mu_gamma(gamma, s), rel=1e-6)
    assert res.fun == pytest.approx(manifold_loss(gamma, s), abs=1e-12)


@pytest.mark.parametrize("s", PROBLEMS)
def test_infimum_approached_as_gamma_to_zero(s):
    """manifold_loss(γ) decreases to 1 + σ² − η* with excess ∝ γ⁴ (log–log slope 4)."""
    g = np.array([0.02, 0.04, 0.08])
    excess = manifold_loss(g, s) - inf_loss(s)
    assert np.all(excess > 0) and np.all(np.diff(excess) > 0)
    slope = np.polyfit(np.log(g), np.log(excess), 1)[0]
    assert slope == pytest.approx(4.0, abs=0.05)
    assert 2 * 1e-4 * mu_gamma(1e-4, s) == pytest.approx(eta_star(s), rel=1e-6)


def test_eta_star_by_hand_and_matches_setting():
    """η* = 1/(1 + 1.1·5/40) = 0.87912087... by hand; inf L̃ = 1.1 − η*; same as the Setting's properties."""
    assert eta_star(PAPER) == pytest.approx(1 / (1 + 1.1 * 5 / 40), rel=1e-15)
    assert inf_loss(PAPER) == pytest.approx(1.1 - 1 / (1 + 1.1 * 5 / 40), rel=1e-15)
    assert isinstance(eta_star(PAPER), float) and isinstance(inf_loss(PAPER), float)
    assert eta_star(PAPER) == PAPER.eta_star


CLOSED_FORMS = {
    "eta_star": lambda s: eta_star(s),
    "inf_loss": lambda s: inf_loss(s),
    "mu_gamma": lambda s: mu_gamma(0.13, s),
    "manifold_loss": lambda s: manifold_loss(0.13, s),
    "single_head_omega": lambda s: single_head_optimum(s).omega,
    "single_head_mu": lambda s: single_head_optimum(s).mu,
    "single_head_loss": lambda s: single_head_optimum(s).loss,
    "drift_law": lambda s: drift_law_gamma(1e3, s, n_positive=2, n_negative=1),
    "flow_eta_gap": lambda s: flow_eta_gap(0.13, s),
    "flow_manifold_gap": lambda s: flow_manifold_gap(0.13, s),
    "residual_sum_mu": lambda s: residual_sum_mu(0.13, 0.8, s, n_positive=2, n_negative=1),
}


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
def test_closed_forms_broadcast_over_array_settings(name):
    """An array-valued setting gives an array of the setting's shape whose entries are the scalar results."""
    f = CLOSED_FORMS[name]
    ds, Ls, s2s = np.array([[2], [5]]), np.array([10, 40, 160]), 0.3
    out = f(Setting(d=ds, L=Ls, sigma2=s2s))
    assert isinstance(out, np.ndarray) and out.shape == (2, 3)
    for i, d in enumerate(ds[:, 0]):
        for j, L in enumerate(Ls):
            one = f(Setting(d=int(d), L=int(L), sigma2=s2s))
            assert isinstance(one, float)
            assert out[i, j] == pytest.approx(one, rel=1e-14)


@given(
    gamma=st.lists(st.floats(0.01, 1.0), min_size=1, max_size=4),
    Ls=st.lists(st.integers(1, 500), min_size=1, max_size=3),
)
def test_gamma_broadcasts_against_setting(gamma, Ls):
    """mu_gamma(γ[:, None], Setting(L=Ls)) has shape (len γ, len L) and matches entry by entry."""
    g = np.array(gamma)[:, None]
    s = Setting(d=5, L=Ls, sigma2=0.1)
    out = mu_gamma(g, s)
    assert out.shape == (len(gamma), len(Ls))
    for i, gi in enumerate(gamma):
        for j, L in enumerate(Ls):
            assert out[i, j] == pytest.approx(mu_gamma(gi, Setting(d=5, L=L, sigma2=0.1)), rel=1e-14)


@pytest.mark.parametrize("bad", [0.0, -0.1, float("nan")])
def test_mu_gamma_bad_gamma(bad):
    with pytest.raises(ValueError, match="`gamma`"):
        mu_gamma(bad, PAPER)


def _gamma_nullcline(g, s):
    """m = 1/(2γ(1 + cd cosh dγ²)): the γ̇ = 0 nullcline of the two-head plane (written out here independently)."""
    return 1.0 / (2 * g * (1 + s.c * s.d * np.cosh(s.d * g * g)))


@pytest.mark.parametrize("s", PROBLEMS)
def test_lag_law_from_the_gamma_nullcline(s):
    """Independent route to the lag law: at fixed OV mass the flow sits on the γ̇ = 0 nullcline of the
    two-head plane, m = 1/(2γ(1 + cd cosh dγ²)), so η = 2γm = 1/(1 + cd cosh dγ²) and
    (η* − η)/flow_eta_gap(γ) = 1 + O(γ⁴); on S_γ (m = μ_γ) the same ratio is 1/3 + O(γ⁴)."""
    es = eta_star(s)
    g = np.array([0.04, 0.02, 0.01]) / np.sqrt(s.d)
    lag = es - 2 * g * _gamma_nullcline(g, s)
    on_s = es - 2 * g * mu_gamma(g, s)
    pred = flow_eta_gap(g, s)
    # relative corrections are O(dγ²)² ≤ (0.04²)² ~ 3e-6 times O(1) constants
    np.testing.assert_allclose(lag / pred, 1.0, rtol=1e-4)
    np.testing.assert_allclose(on_s / pred, 1.0 / 3.0, rtol=1e-4)


def test_drift_law_is_the_solution_of_the_reduced_ode():
    """γ(t) = (16 c d³ (pn/H) t)^(−1/6) solves dM/dt = (4/3)(pn/H) c d³ η γ⁵ with γ = η/(2M) exactly
    (checked by differentiating the law numerically, for p = 2, n = 1)."""
    d, p, n, eta = 5, 2, 1, 0.8
    c = (1 + 0.1) / 40
    t = np.geomspace(1e2, 1e6, 7)
    h = 1e-6 * t
    M = lambda tt: eta / (2 * drift_law_gamma(tt, PAPER, n_positive=p, n_negative=n))  # noqa: E731
    dM = (M(t + h) - M(t - h)) / (2 * h)
    g = drift_law_gamma(t, PAPER, n_positive=p, n_negative=n)
    np.testing.assert_allclose(dM, 4 / 3 * p * n / (p + n) * c * d**3 * eta * g**5, rtol=1e-7)


def test_large_gamma_is_finite_and_silent():
    """For dγ² beyond float64's sinh range the mass and loss take their limits (0 and 1 + σ²), no warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mu_gamma(20.0, PAPER) == 0.0
        assert manifold_loss(20.0, PAPER) == pytest.approx(1.1, abs=1e-15)


@pytest.mark.parametrize(
    "call,param",
    [
        (lambda: drift_law_gamma(0.0, PAPER), "`t`"),
        (lambda: drift_law_gamma(-1.0, PAPER), "`t`"),
        (lambda: drift_law_gamma(1.0, PAPER, n_positive=0), "`n_positive`"),
        (lambda: flow_eta_gap(float("nan"), PAPER), "`gamma`"),
        (lambda: flow_manifold_gap(-0.1, PAPER), "`gamma`"),
        (lambda: residual_sum_mu(0.1, 0.8, PAPER, n_positive=0, n_negative=1), "`n_positive`"),
        (lambda: residual_sum_mu(0.1, float("inf"), PAPER, n_positive=2, n_negative=1), "`eta`"),
        (lambda: eta_star((5, 40, 0.1)), "`setting`"),
    ],
)
def test_drift_functions_bad_input(call, param):
    with pytest.raises(ValueError, match=param):
        call()


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (flow_eta_gap, (1e100,)),
        (flow_manifold_gap, (1e100,)),
        (manifold_loss, (np.array([0.1, 0.2, 0.3]),)),
        (mu_gamma, (1e-320,)),
        (drift_law_gamma, (np.array([1.0, 2.0, 3.0]),)),
    ],
)
def test_closed_forms_raise_named_errors_instead_of_inf_or_broadcast_errors(fn, args):
    """Issue 9: overflow gave inf with a RuntimeWarning; mismatched shapes gave numpy's unnamed broadcast error."""
    s = Setting(d=5, L=[10, 20], sigma2=0.1)
    with pytest.raises(ValueError, match="`gamma`|`t`"):
        fn(*args, s)


def test_residual_sum_mu_names_mismatched_shapes():
    with pytest.raises(ValueError, match="`gamma`, `eta`"):
        residual_sum_mu([0.1, 0.2], [0.8, 0.8, 0.8], PAPER, n_positive=2, n_negative=1)
