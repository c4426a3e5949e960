"""Multi-task approximate loss: sympy derivation vs closed form vs numpy, gradients, reduction to L̃, limit loss."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from reduced_dynamics import Setting
from reduced_dynamics.dynamics.loss import approx_loss
from reduced_dynamics.multitask.derive import (
    closed_form_mt_loss,
    derive_mt_loss,
    generated_mt_functions,
    reduction_to_single_task,
)
from reduced_dynamics.multitask.loss import (
    effective_weights,
    limit_loss_per_task,
    mt_gradient,
    mt_loss,
    mt_loss_per_task,
    support_mask,
)

PAPER = Setting.paper_multitask()
NESTED = Setting(d=5, L=30, sigma2=0.2, tasks=((0, 1, 2, 3, 4), (1, 2)))
DISJOINT = Setting(d=4, L=50, sigma2=0.05, tasks=((0, 1), (2,), (3,)))
SETTINGS = [PAPER, NESTED, DISJOINT]


@pytest.mark.parametrize(
    "setting, H",
    [(PAPER, 1), (NESTED, 1), (DISJOINT, 2), (PAPER, 2)],
    ids=["overlap1", "nested1", "disjoint2", "overlap2"],
)
def test_derived_equals_closed_form(setting, H):
    diff = derive_mt_loss(H, setting) - closed_form_mt_loss(H, setting)
    assert sp.simplify(sp.powsimp(sp.expand(diff), force=True)) == 0


@pytest.mark.parametrize("H", [1, 2, 3])
def test_reduction_to_single_task_loss(H):
    assert reduction_to_single_task(H, 4) == 0


def test_reduction_numerically_equals_package_loss():
    """One task on all features, equal per-feature weights: mt_loss == approx_loss (the package's L̃)."""
    s = Setting(d=5, L=40, sigma2=0.1)
    rng = np.random.default_rng(3)
    w, m = 0.2 * rng.standard_normal(3), 2 * rng.standard_normal(3)
    got = mt_loss(np.repeat(w[:, None], 5, axis=1), m[:, None], s)
    assert got == pytest.approx(float(approx_loss(w, m, s)), rel=1e-13)


@pytest.mark.parametrize(
    "setting, H",
    [(PAPER, 1), (NESTED, 1), (DISJOINT, 1), (PAPER, 2)],
    ids=["overlap1", "nested1", "disjoint1", "overlap2"],
)
def test_numpy_loss_and_gradient_match_generated_sympy(setting, H):
    gen = generated_mt_functions(H, setting)
    rng = np.random.default_rng(H)
    for _ in range(3):
        om = 0.3 * rng.standard_normal((H, setting.d))
        mu = 2.0 * rng.standard_normal((H, setting.n_tasks))
        assert mt_loss(om, mu, setting) == pytest.approx(gen.loss(om, mu), rel=1e-12)
        g = mt_gradient(om, mu, setting)
        np.testing.assert_allclose(
            np.concatenate([g.omega.ravel(), g.mu.ravel()]), gen.gradient(om, mu), rtol=1e-10, atol=1e-12
        )


@settings(max_examples=25, deadline=None)
@given(
    H=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    scale=st.floats(0.01, 0.5),
)
def test_gradient_matches_central_differences(H, seed, scale):
    rng = np.random.default_rng(seed)
    s = PAPER
    om = scale * rng.standard_normal((H, s.d))
    mu = 3 * rng.standard_normal((H, s.n_tasks))
    g = mt_gradient(om, mu, s)
    e = 1e-6
    i, j = rng.integers(H), rng.integers(s.d)
    op, omn = om.copy(), om.copy()
    op[i, j] += e
    omn[i, j] -= e
    fd = (mt_loss(op, mu, s) - mt_loss(omn, mu, s)) / (2 * e)
    assert fd == pytest.approx(g.omega[i, j], rel=1e-5, abs=1e-7)
    n = rng.integers(s.n_tasks)
    mp, mn = mu.copy(), mu.copy()
    mp[i, n] += e
    mn[i, n] -= e
    fd = (mt_loss(om, mp, s) - mt_loss(om, mn, s)) / (2 * e)
    assert fd == pytest.approx(g.mu[i, n], rel=1e-5, abs=1e-7)


def test_batched_loss_equals_loop():
    rng = np.random.default_rng(0)
    om, mu = 0.2 * rng.standard_normal((4, 3, 6)), rng.standard_normal((4, 3, 2))
    batched = mt_loss_per_task(om, mu, PAPER)
    assert batched.shape == (4, 2)
    for b in range(4):
        np.testing.assert_allclose(batched[b], mt_loss_per_task(om[b], mu[b], PAPER), rtol=1e-14)


def test_limit_loss_is_the_small_omega_limit_at_fixed_A():
    """Along (γΩ, M/γ) with column sums of M zero, L̃_n -> limit loss at A = MᵀΩ, error O(γ²)."""
    rng = np.random.default_rng(1)
    Om = rng.standard_normal((3, 6))
    M = rng.standard_normal((3, 2))
    M -= M.mean(axis=0)
    A = effective_weights(Om, M, PAPER)
    lim = limit_loss_per_task(A, PAPER)
    errs = [np.abs(mt_loss_per_task(g * Om, M / g, PAPER) - lim).max() for g in (0.02, 0.01)]
    assert errs[0] < 1e-2 and 3.5 < errs[0] / errs[1] < 4.5


def test_zero_state_and_per_task_optimum():
    s = PAPER
    np.testing.assert_allclose(mt_loss_per_task(np.zeros((2, 6)), np.zeros((2, 2)), s), 1 + s.sigma2)
    eta = 1 / (1 + s.c * 4)
    A = support_mask(s) * eta
    np.testing.assert_allclose(limit_loss_per_task(A, s), 1 + s.sigma2 - eta, rtol=1e-14)


@pytest.mark.parametrize(
    "omega, mu, match",
    [
        (np.zeros((2, 5)), np.zeros((2, 2)), "`omega`"),
        (np.zeros((2, 6)), np.zeros((2, 3)), "`mu`"),
        (np.zeros((2, 6)), np.zeros((3, 2)), "`omega` and `mu`"),
        (np.full((1, 6), np.nan), np.zeros((1, 2)), "`omega`"),
        (np.full((2, 6), 20.0), np.ones((2, 2)), "`omega` is too large"),
    ],
)
def test_bad_state_raises_naming_parameter(omega, mu, match):
    with pytest.raises(ValueError, match=match):
        mt_loss(omega, mu, PAPER)
