"""The exact finite-L risk evaluator against independent routes: closed forms, Monte Carlo,
finite differences, the corrected loss at large L, and a finer quadrature."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reduced_dynamics import Setting
from reduced_dynamics.dynamics.corrected_loss import corrected_loss
from reduced_dynamics.estimation.predictors import MultiHead
from reduced_dynamics.estimation.risk import estimate_risk
from reduced_dynamics.exact.evaluator import ExactRisk, exact_risk, omega_max

PAPER = Setting(d=5, L=40, sigma2=0.1)


# ------------------------------------------------------------------ closed form at omega = 0


@pytest.mark.parametrize(
    ("d", "L", "sigma2", "mu"),
    [
        (5, 40, 0.1, [1.0]),
        (5, 2, 0.1, [0.7, -0.2]),
        (3, 2560, 0.5, [1.0, 2.0, -0.5]),
        (1, 7, 0.0, [2.0]),
        (50, 100, 1.0, [0.3, 0.3]),
    ],
)
def test_uniform_softmax_matches_closed_form(d, L, sigma2, mu):
    # ω = 0: ŷ = (Σμ) ȳ, and E(y_q - c ȳ)² = 1 + σ² + c² (1 + σ²)/L (y_q ⟂ ȳ, E ȳ² = (1+σ²)/L)
    s = Setting(d=d, L=L, sigma2=sigma2)
    res = exact_risk(np.zeros(len(mu)), mu, s)
    c = sum(mu)
    expected = 1 + sigma2 + c * c * (1 + sigma2) / L
    assert res.risk == pytest.approx(expected, abs=1e-12)
    assert res.error_estimate < 1e-9


# ------------------------------------------------------------------ Monte Carlo (3 standard errors)

# The same 12 states as AGREE_STATES in benchmarks/bench_exact.py, which reruns them with more prompts and
# prints (MC - exact)/SE. Kept as a literal here, not imported: the test must read (and fail) on its own, and
# a validation set is not library API. Change both together.
MC_STATES = [
    # (d, L, sigma2, omega, mu)
    (5, 40, 0.1, [0.5], [1.5]),
    (5, 2, 0.1, [-0.65], [-1.2]),
    (5, 640, 0.1, [0.37], [2.0]),
    (5, 40, 0.1, [0.3, -0.3], [1.5, -1.5]),
    (5, 2, 0.1, [0.65, -0.65], [0.7, -0.7]),
    (5, 200, 0.1, [0.1, -0.1], [4.4, -4.4]),
    (5, 2560, 0.1, [0.65, -0.2], [0.8, -0.5]),
    (5, 10, 0.1, [0.6, -0.2, 0.1], [1.0, -2.0, 0.5]),
    (5, 160, 0.1, [0.2, -0.2, 0.0], [2.0, -2.0, 0.3]),
    (5, 3, 0.1, [0.65, -0.4, 0.3], [0.5, -0.6, 0.4]),
    (2, 20, 0.5, [0.5, -0.5], [1.0, -1.0]),
    (20, 100, 0.0, [0.2], [3.0]),
]


@pytest.mark.parametrize(("d", "L", "sigma2", "omega", "mu"), MC_STATES)
def test_agrees_with_rao_blackwellised_monte_carlo(d, L, sigma2, omega, mu):
    s = Setting(d=d, L=L, sigma2=sigma2)
    exact = exact_risk(omega, mu, s)
    n = max(4000, int(8e6 // L))
    mc = estimate_risk(MultiHead(omega, mu), s, n_prompts=n, seed=11 + L, conditional=True)
    assert abs(exact.risk - mc.risk) < 3 * mc.stderr, (exact.risk, mc.risk, mc.stderr)
    assert exact.error_estimate < 1e-8


# ------------------------------------------------------------------ gradient


@pytest.mark.parametrize(
    ("L", "omega", "mu"),
    [
        (40, [0.5], [1.5]),
        (40, [0.3, -0.25], [1.5, -1.7]),
        (6, [0.6, -0.2, 0.1], [1.0, -2.0, 0.5]),
        (3, [0.4, -0.4], [1.0, -1.0]),
        (1000, [0.05, -0.6], [3.0, -0.4]),
    ],
)
def test_gradient_matches_central_differences(L, omega, mu):
    s = Setting(d=5, L=L, sigma2=0.1)
    omega, mu = np.array(omega), np.array(mu)
    res = exact_risk(omega, mu, s, grad=True)
    h = 1e-5
    for i, e in enumerate(np.eye(omega.size)):
        fd_w = (exact_risk(omega + h * e, mu, s).risk - exact_risk(omega - h * e, mu, s).risk) / (2 * h)
        fd_m = (exact_risk(omega, mu + h * e, s).risk - exact_risk(omega, mu - h * e, s).risk) / (2 * h)
        assert res.grad_omega[i] == pytest.approx(fd_w, abs=1e-8)
        assert res.grad_mu[i] == pytest.approx(fd_m, abs=1e-8)
    assert res.grad_error_estimate < 1e-6


def test_risk_is_the_quadratic_form_in_mu():
    res = exact_risk([0.3, -0.2], [1.0, -1.0], PAPER, grad=True)
    b, A = res.linear_coef, res.quadratic_coef
    np.testing.assert_allclose(A, A.T, rtol=0, atol=0)
    for mu in ([0.0, 0.0], [2.0, 0.5], [-1.0, 3.0]):
        other = exact_risk([0.3, -0.2], mu, PAPER)
        mu = np.array(mu)
        assert other.risk == pytest.approx(1.1 - 2 * mu @ b + mu @ A @ mu, abs=1e-13)
    assert res.grad_mu == pytest.approx(-2 * b + 2 * A @ np.array([1.0, -1.0]), abs=1e-14)


# ------------------------------------------------------------------ symmetries


@settings(max_examples=6)
@given(
    w=st.lists(st.floats(-0.6, 0.6), min_size=2, max_size=2),
    m=st.lists(st.floats(-3, 3), min_size=2, max_size=2),
    L=st.sampled_from([2, 5, 40]),
)
def test_joint_sign_flip_and_head_permutation_leave_the_risk_unchanged(w, m, L):
    # g -> -g: T_h(-ω) = -T_h(ω), Q unchanged, so (ω, μ) -> (-ω, -μ) keeps the risk; heads are exchangeable
    s = Setting(d=4, L=L, sigma2=0.2)
    base = exact_risk(w, m, s).risk
    assert exact_risk([-x for x in w], [-x for x in m], s).risk == pytest.approx(base, abs=1e-11)
    assert exact_risk(w[::-1], m[::-1], s).risk == pytest.approx(base, abs=1e-11)


# ------------------------------------------------------------------ precision


@pytest.mark.parametrize(
    ("d", "L", "omega", "mu"),
    [
        (5, 40, [0.3, -0.3], [1.5, -1.5]),
        (5, 2, [0.65, -0.65], [0.7, -0.7]),
        (5, 2560, [0.5], [1.2]),
        (5, 3, [1.0], [1.0]),
        # same-sign heads: the 2-D Laplace integrand needs the finer step (1.5e-9 off without it)
        (100, 17, [0.218, 0.306], [1.0, 1.0]),
        (5, 200, [0.65, 0.65], [1.0, 1.0]),
    ],
)
def test_self_convergence_below_1e_10_and_within_the_error_estimate(d, L, omega, mu):
    s = Setting(d=d, L=L, sigma2=0.1)
    default = exact_risk(omega, mu, s)
    fine = exact_risk(omega, mu, s, tol=1e-15)  # every step 0.76x: about 1.3x more nodes per dimension
    err = abs(default.risk - fine.risk)
    assert err < 1e-10
    assert err <= default.error_estimate


# ------------------------------------------------------------------ large L: the corrected loss


@pytest.mark.parametrize(("omega", "mu"), [([0.2], [1.2]), ([0.2, -0.2], [2.5, -2.5]), ([0.25, -0.1], [1.0, -2.0])])
def test_large_L_approaches_the_corrected_loss_like_inverse_L_squared(omega, mu):
    # only for small |ω|: the χ²-averages of the higher orders of the 1/L expansion stop existing as |ω|
    # grows, and then the remainder decays more slowly (measured: ratio 9.2 at ω = 0.4, 5.8 at (0.5, -0.1))
    gaps = []
    for L in (1000, 4000):
        s = Setting(d=5, L=L, sigma2=0.1)
        gaps.append(exact_risk(omega, mu, s).risk - corrected_loss(omega, mu, s))
    ratio = gaps[0] / gaps[1]
    assert 14 < ratio < 18  # (4000/1000)² = 16 up to O(1/L) corrections
    assert abs(gaps[1]) < 1e-5


def test_very_large_L_keeps_its_precision():
    s = Setting(d=5, L=10**6, sigma2=0.1)
    res = exact_risk([0.3, -0.3], [1.5, -1.5], s)
    assert abs(res.risk - corrected_loss([0.3, -0.3], [1.5, -1.5], s)) < 1e-9
    assert res.error_estimate < 1e-9


# ------------------------------------------------------------------ result and bad input


def test_result_fields():
    res = exact_risk([0.3], [1.0], PAPER)
    assert isinstance(res, ExactRisk)
    assert res.grad_omega is None and res.grad_mu is None
    assert res.linear_coef.shape == (1,) and res.quadratic_coef.shape == (1, 1)
    assert not res.linear_coef.flags.writeable
    assert res.setting == PAPER
    d = res.to_dict()
    assert set(d) >= {"risk", "error_estimate", "grad_omega", "grad_mu", "setting"}


@pytest.mark.parametrize(
    ("omega", "mu", "setting", "kw", "name"),
    [
        ([0.1, 0.2], [1.0], PAPER, {}, "`omega` and `mu`"),
        ([[0.1]], [[1.0]], PAPER, {}, "`omega`"),
        ([float("nan")], [1.0], PAPER, {}, "`omega`"),
        ([0.1], [float("inf")], PAPER, {}, "`mu`"),
        ([5.0], [1.0], PAPER, {}, "`omega`"),
        ([0.1], [1e200], PAPER, {}, "`mu`"),
        ([0.1], [1e51], PAPER, {}, "`mu`"),
        ([0.1], [1.0], Setting(d=5, L=1, sigma2=0.1), {}, "`setting.L`"),
        ([0.1], [1.0], Setting(d=2, L=5, sigma2=0.1, Sigma=np.diag([1.0, 2.0])), {}, "`setting.Sigma`"),
        ([0.1], [1.0], PAPER, {"tol": 0.5}, "`tol`"),
        ([0.1], [1.0], PAPER, {"tol": -1.0}, "`tol`"),
        ([0.1] * 17, [1.0] * 17, PAPER, {}, "`omega`"),
    ],
)
def test_bad_input_names_the_parameter(omega, mu, setting, kw, name):
    with pytest.raises(ValueError, match=name.replace("(", r"\(")):
        exact_risk(omega, mu, setting, **kw)


def test_omega_bound_is_the_documented_one():
    bound = omega_max(PAPER)
    exact_risk([0.99 * bound], [1.0], PAPER)
    with pytest.raises(ValueError, match=f"{bound:.6g}"):
        exact_risk([1.01 * bound], [1.0], PAPER)
    assert math.isfinite(bound) and bound > 0.65
