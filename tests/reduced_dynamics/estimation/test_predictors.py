"""Batched predictors vs plain per-prompt references written here (independent routes)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import softmax

from reduced_dynamics.dynamics.manifold import single_head_optimum
from reduced_dynamics.estimation.predictors import (
    BayesRidge,
    DebiasedGD,
    LinearAttention,
    MultiHead,
    PromptStats,
    SingleHead,
    VanillaGD,
    Zero,
    bayes_ridge,
    conditional_loss,
    debiased_gd,
    linear_attention,
    multi_head,
    prompt_stats,
    sample_prompt_stats,
    single_head,
    vanilla_gd,
)
from reduced_dynamics.estimation.prompts import sample_prompts

EXACT = 1e-12  # relative tolerance of exact identities

# ------------------------------------------------------------------ references


def ref_multi_head(p, omega, mu):
    out = np.empty(p.n)
    for i in range(p.n):
        s = p.X[i] @ p.xq[i]
        out[i] = sum(m * (softmax(o * s) @ p.y[i]) for o, m in zip(omega, mu))
    return out


def ref_gd(p, eta, debiased):
    out = np.empty(p.n)
    for i in range(p.n):
        X = p.X[i] - (p.X[i].mean(axis=0) if debiased else 0.0)
        out[i] = eta / p.L * sum(p.y[i][l] * (X[l] @ p.xq[i]) for l in range(p.L))
    return out


def ref_ridge(p, lam):
    """Ridge by least squares on the augmented system [X; sqrt(lam) I] β = [y; 0]."""
    out = np.empty(p.n)
    for i in range(p.n):
        A = np.vstack([p.X[i], np.sqrt(lam) * np.eye(p.d)])
        b = np.concatenate([p.y[i], np.zeros(p.d)])
        beta = np.linalg.lstsq(A, b, rcond=None)[0]
        out[i] = p.xq[i] @ beta
    return out


def rel_err(a, b):
    return np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b)))


@pytest.fixture(scope="module")
def prompts():
    return sample_prompts(25, d=4, L=13, sigma2=0.3, seed=11)


HEADS = {
    1: ([0.7], [1.3]),
    2: ([0.1, -0.1], [4.0, -4.0]),
    3: ([0.5, -0.8, 0.0], [1.0, -2.0, 0.5]),
    5: ([3.0, -2.0, 0.2, 1.0, -0.4], [0.3, -0.1, 2.0, 0.7, -1.5]),
}


@pytest.mark.parametrize("H", sorted(HEADS))
@pytest.mark.parametrize("form", ["prompts", "stats"])
def test_multi_head_matches_per_prompt_reference(prompts, H, form):
    omega, mu = HEADS[H]
    batch = prompts if form == "prompts" else prompt_stats(prompts)
    got = multi_head(batch, omega, mu)
    assert got.shape == (prompts.n,)
    assert rel_err(got, ref_multi_head(prompts, omega, mu)) < EXACT
    assert rel_err(MultiHead(omega, mu)(batch), got) < EXACT


@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("form", ["prompts", "stats"])
def test_gd_matches_per_prompt_reference(prompts, debiased, form):
    batch = prompts if form == "prompts" else prompt_stats(prompts)
    fn, cls = (debiased_gd, DebiasedGD) if debiased else (vanilla_gd, VanillaGD)
    ref = ref_gd(prompts, 0.8, debiased)
    assert rel_err(fn(batch, 0.8), ref) < EXACT
    assert rel_err(cls(0.8)(batch), ref) < EXACT


@pytest.mark.parametrize("lam", [None, 0.0, 2.5])
def test_ridge_matches_augmented_least_squares(prompts, lam):
    lam_eff = prompts.sigma2 * prompts.d if lam is None else lam
    ref = ref_ridge(prompts, lam_eff)
    assert rel_err(bayes_ridge(prompts, lam=lam), ref) < 1e-10
    pred = BayesRidge(lam)
    assert rel_err(pred(prompts), ref) < 1e-10
    # the smoother-weights route gives the same prediction
    w = pred.weights(prompts)
    assert rel_err(np.einsum("nl,nl->n", w, prompts.y), ref) < 1e-10


def test_ridge_with_general_sigma_matches_reference():
    A = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, -0.2], [0.0, -0.2, 0.5]])
    p = sample_prompts(10, d=3, L=6, sigma2=0.2, seed=3, Sigma=A)
    assert rel_err(bayes_ridge(p), ref_ridge(p, 0.2 * 3)) < 1e-10


def test_single_head_is_h1_multi_head_and_optimum_from_manifold(prompts):
    omega, mu, _ = single_head_optimum(5, 40, 0.1)
    sh = SingleHead.optimum(5, 40, 0.1)
    assert (sh.omega, sh.mu) == (omega, mu)
    assert rel_err(single_head(prompts, omega, mu), multi_head(prompts, [omega], [mu])) < EXACT
    assert rel_err(sh(prompts), ref_multi_head(prompts, [omega], [mu])) < EXACT


@given(
    mu=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_softmax_at_zero_omega_is_mu_sum_times_mean_y(mu, seed):
    """ω = 0: every softmax is uniform, so ŷ = (Σ_h μ_h) · mean_l y_l."""
    st_ = sample_prompt_stats(7, d=3, L=9, sigma2=0.1, seed=seed)
    got = multi_head(st_, np.zeros(len(mu)), mu)
    want = sum(mu) * st_.y.mean(axis=1)
    assert np.max(np.abs(got - want)) <= EXACT * (1 + np.max(np.abs(want))) * len(mu)


@given(
    omega=st.lists(st.floats(-3, 3, allow_nan=False), min_size=1, max_size=5),
    scale=st.floats(-2, 2, allow_nan=False),
    seed=st.integers(0, 2**16),
)
def test_linear_attention_equals_vanilla_gd_at_mu_dot_omega(omega, scale, seed):
    """Linear attention with 1/L normalisation = vanilla GD with η = μᵀω."""
    omega = np.array(omega)
    mu = scale * np.cos(np.arange(len(omega)) + 1.0)
    st_ = sample_prompt_stats(6, d=4, L=11, sigma2=0.2, seed=seed)
    a = linear_attention(st_, omega, mu)
    b = vanilla_gd(st_, float(mu @ omega))
    per_head = sum(m * o / st_.L * np.einsum("nl,nl->n", st_.y, st_.s) for o, m in zip(omega, mu))
    tol = 1e-12 * (1 + np.max(np.abs(per_head)))
    assert np.max(np.abs(a - b)) <= tol
    assert np.max(np.abs(a - per_head)) <= tol * len(omega)
    assert np.max(np.abs(LinearAttention(tuple(omega), tuple(mu))(st_) - a)) <= tol


@pytest.mark.parametrize("omega", [800.0, -800.0])
def test_softmax_is_stable_at_large_omega(prompts, omega):
    """Large ω: no overflow, and still equal to scipy's (stable) softmax per prompt."""
    got = multi_head(prompts, [omega, -omega / 2], [1.0, 0.5])
    assert np.all(np.isfinite(got))
    assert rel_err(got, ref_multi_head(prompts, [omega, -omega / 2], [1.0, 0.5])) < 1e-10


@pytest.mark.parametrize("omega", [1e7, -1e7])
def test_softmax_at_huge_omega_is_hard_argmax(prompts, omega):
    """ω → ±∞: the softmax concentrates on argmax_l ω s_l."""
    got = multi_head(prompts, [omega], [1.0])
    s = np.einsum("nld,nd->nl", prompts.X, prompts.xq)
    idx = np.argmax(np.sign(omega) * s, axis=1)
    assert rel_err(got, prompts.y[np.arange(prompts.n), idx]) < EXACT


def test_zero_predictor(prompts):
    assert np.array_equal(Zero()(prompts), np.zeros(prompts.n))
    assert np.array_equal(Zero().weights(prompts_stats := prompt_stats(prompts)), np.zeros_like(prompts_stats.s))


def test_conditional_loss_full_form_matches_monte_carlo_over_beta_and_noise():
    """E[(y_q − wᵀy)² | X, x_q] = |x_q − Xᵀw|²/d + σ²(1 + |w|²), checked by drawing β, ε."""
    d, L, sigma2 = 3, 5, 0.4
    p = sample_prompts(1, d=d, L=L, sigma2=sigma2, seed=5)
    w = DebiasedGD(0.9).weights(p)[0]
    exact = conditional_loss(p, w[None, :])[0]
    rng = np.random.default_rng(6)
    m = 400_000
    beta = rng.standard_normal((m, d)) / np.sqrt(d)
    y = beta @ p.X[0].T + np.sqrt(sigma2) * rng.standard_normal((m, L))
    yq = beta @ p.xq[0] + np.sqrt(sigma2) * rng.standard_normal(m)
    loss = (yq - y @ w) ** 2
    se = loss.std(ddof=1) / np.sqrt(m)
    assert abs(loss.mean() - exact) < 3 * se


def test_conditional_loss_stats_form_matches_full_form_averaged_over_frame():
    """Stats form = full form averaged over the components orthogonal to x_q."""
    d, L, sigma2 = 4, 6, 0.25
    rng = np.random.default_rng(8)
    m = 200_000
    a = rng.standard_normal(L)
    r2 = 3.0
    Z = rng.standard_normal((m, L, d - 1))
    X = np.concatenate([np.broadcast_to(a[:, None], (m, L, 1)), Z], axis=2)
    xq = np.zeros((m, d))
    xq[:, 0] = np.sqrt(r2)
    s = np.sqrt(r2) * a[None, :]
    w = DebiasedGD(0.7).weights(PromptStats(s, None, None, np.array([r2]), d, sigma2))
    stats_val = conditional_loss(PromptStats(s, None, None, np.array([r2]), d, sigma2), w)[0]
    from reduced_dynamics.estimation.prompts import Prompts

    full = conditional_loss(Prompts(X, np.zeros((m, L)), xq, np.zeros(m), np.zeros((m, d)), sigma2), np.repeat(w, m, 0))
    se = full.std(ddof=1) / np.sqrt(m)
    assert abs(full.mean() - stats_val) < 3 * se


@pytest.mark.parametrize(
    "call, param",
    [
        (lambda b: vanilla_gd(b, float("nan")), "eta"),
        (lambda b: debiased_gd(b, float("inf")), "eta"),
        (lambda b: multi_head(b, [1.0, 2.0], [1.0]), "omega"),
        (lambda b: multi_head(b, [[1.0]], [[1.0]]), "omega"),
        (lambda b: multi_head(b, [float("nan")], [1.0]), "omega"),
        (lambda b: bayes_ridge(prompt_stats(b)), "prompts"),
        (lambda b: bayes_ridge(b, lam=-1.0), "lam"),
        (lambda b: multi_head("not a batch", [1.0], [1.0]), "batch"),
        (lambda b: VanillaGD(float("nan")), "eta"),
        (lambda b: SingleHead(1.0, float("inf")), "mu"),
        (lambda b: BayesRidge().weights(prompt_stats(b)), "batch"),
        (lambda b: sample_prompt_stats(0, d=2, L=3, sigma2=0.1, seed=0), "n"),
        (lambda b: sample_prompt_stats(2, d=2, L=3, sigma2=-0.1, seed=0), "sigma2"),
        (lambda b: sample_prompt_stats(2, d=2, L=3, sigma2=0.1, seed=None), "seed"),
        (
            lambda b: multi_head(
                sample_prompt_stats(2, d=2, L=3, sigma2=0.1, seed=0, covariates_only=True), [1.0], [1.0]
            ),
            "batch",
        ),
        # λ = 0 with L < d: XᵀX is singular (not always flagged by LAPACK in floating point)
        (lambda b: bayes_ridge(sample_prompts(3, d=5, L=3, sigma2=0.0, seed=0)), "lam"),
        (lambda b: BayesRidge(0.0).weights(sample_prompts(3, d=5, L=3, sigma2=0.1, seed=0)), "lam"),
        (lambda b: conditional_loss(b, np.zeros((b.n, b.L + 1))), "w"),
        (lambda b: conditional_loss("not a batch", np.zeros((1, 1))), "batch"),
    ],
)
def test_bad_input_names_the_parameter(prompts, call, param):
    with pytest.raises(ValueError, match=f"`{param}`"):
        call(prompts)
