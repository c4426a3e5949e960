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
    SingleHead,
    VanillaGD,
    Zero,
    conditional_loss,
)
from reduced_dynamics.estimation.prompts import Prompts, sample_prompts
from reduced_dynamics.setting import Setting

EXACT = 1e-12  # relative tolerance of exact identities

# ------------------------------------------------------------------ references


def ref_multi_head(p, omega, mu):
    out = np.empty(p.n)
    for i in range(p.n):
        s = p.X[i] @ p.x_q[i]
        out[i] = sum(m * (softmax(o * s) @ p.y[i]) for o, m in zip(omega, mu))
    return out


def ref_gd(p, eta, debiased):
    out = np.empty(p.n)
    for i in range(p.n):
        X = p.X[i] - (p.X[i].mean(axis=0) if debiased else 0.0)
        out[i] = eta / p.L * sum(p.y[i][l] * (X[l] @ p.x_q[i]) for l in range(p.L))
    return out


def ref_ridge(p, lam):
    """Ridge by least squares on the augmented system [X; sqrt(lam) I] β = [y; 0]."""
    out = np.empty(p.n)
    for i in range(p.n):
        A = np.vstack([p.X[i], np.sqrt(lam) * np.eye(p.d)])
        b = np.concatenate([p.y[i], np.zeros(p.d)])
        beta = np.linalg.lstsq(A, b, rcond=None)[0]
        out[i] = p.x_q[i] @ beta
    return out


def rel_err(a, b):
    return np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b)))


SETTING = Setting(d=4, L=13, sigma2=0.3)


@pytest.fixture(scope="module")
def prompts():
    return sample_prompts(25, SETTING, seed=11)


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
    batch = prompts if form == "prompts" else prompts.to_stats()
    got = MultiHead(omega, mu)(batch)
    assert got.shape == (prompts.n,)
    assert rel_err(got, ref_multi_head(prompts, omega, mu)) < EXACT


@pytest.mark.parametrize("debiased", [False, True])
@pytest.mark.parametrize("form", ["prompts", "stats"])
def test_gd_matches_per_prompt_reference(prompts, debiased, form):
    batch = prompts if form == "prompts" else prompts.to_stats()
    cls = DebiasedGD if debiased else VanillaGD
    ref = ref_gd(prompts, 0.8, debiased)
    assert rel_err(cls(0.8)(batch), ref) < EXACT


@pytest.mark.parametrize("lam", [None, "setting", 0.0, 2.5])
def test_ridge_matches_augmented_least_squares(prompts, lam):
    lam_eff = SETTING.sigma2 * SETTING.d if lam in (None, "setting") else lam
    ref = ref_ridge(prompts, lam_eff)
    pred = BayesRidge(SETTING if lam == "setting" else lam)
    assert rel_err(pred(prompts), ref) < 1e-10
    # the smoother-weights route gives the same prediction
    w = pred.weights(prompts)
    assert rel_err(np.einsum("nl,nl->n", w, prompts.y), ref) < 1e-10


def test_ridge_with_general_sigma_matches_reference():
    A = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, -0.2], [0.0, -0.2, 0.5]])
    p = sample_prompts(10, Setting(d=3, L=6, sigma2=0.2, Sigma=A), seed=3)
    assert rel_err(BayesRidge()(p), ref_ridge(p, 0.2 * 3)) < 1e-10


def test_single_head_is_h1_multi_head_and_optimum_from_manifold(prompts):
    opt = single_head_optimum(Setting(d=5, L=40, sigma2=0.1))
    omega, mu = opt.omega, opt.mu
    sh = SingleHead.optimum(Setting(d=5, L=40, sigma2=0.1))
    assert (sh.omega, sh.mu) == (omega, mu)
    assert rel_err(sh(prompts), MultiHead([omega], [mu])(prompts)) < EXACT
    assert rel_err(sh(prompts), ref_multi_head(prompts, [omega], [mu])) < EXACT


@given(
    mu=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_softmax_at_zero_omega_is_mu_sum_times_mean_y(mu, seed):
    """ω = 0: every softmax is uniform, so ŷ = (Σ_h μ_h) · mean_l y_l."""
    st_ = sample_prompts(7, Setting(d=3, L=9, sigma2=0.1), seed=seed, stats_only=True)
    got = MultiHead(np.zeros(len(mu)), mu)(st_)
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
    st_ = sample_prompts(6, Setting(d=4, L=11, sigma2=0.2), seed=seed, stats_only=True)
    a = LinearAttention(omega, mu)(st_)
    b = VanillaGD(float(mu @ omega))(st_)
    per_head = sum(m * o / st_.L * np.einsum("nl,nl->n", st_.y, st_.scores) for o, m in zip(omega, mu))
    tol = 1e-12 * (1 + np.max(np.abs(per_head)))
    assert np.max(np.abs(a - b)) <= tol
    assert np.max(np.abs(a - per_head)) <= tol * len(omega)


@pytest.mark.parametrize("omega", [800.0, -800.0])
def test_softmax_is_stable_at_large_omega(prompts, omega):
    """Large ω: no overflow, and still equal to scipy's (stable) softmax per prompt."""
    got = MultiHead([omega, -omega / 2], [1.0, 0.5])(prompts)
    assert np.all(np.isfinite(got))
    assert rel_err(got, ref_multi_head(prompts, [omega, -omega / 2], [1.0, 0.5])) < 1e-10


@pytest.mark.parametrize("omega", [1e7, -1e7])
def test_softmax_at_huge_omega_is_hard_argmax(prompts, omega):
    """ω → ±∞: the softmax concentrates on argmax_l ω s_l."""
    got = MultiHead([omega], [1.0])(prompts)
    s = np.einsum("nld,nd->nl", prompts.X, prompts.x_q)
    idx = np.argmax(np.sign(omega) * s, axis=1)
    assert rel_err(got, prompts.y[np.arange(prompts.n), idx]) < EXACT


def test_zero_predictor(prompts):
    assert np.array_equal(Zero()(prompts), np.zeros(prompts.n))
    assert np.array_equal(Zero().weights(prompts.to_stats()), np.zeros((prompts.n, prompts.L)))


def test_conditional_loss_full_form_matches_monte_carlo_over_beta_and_noise():
    """E[(y_q − wᵀy)² | X, x_q] = |x_q − Xᵀw|²/d + σ²(1 + |w|²), checked by drawing β, ε."""
    d, L, sigma2 = 3, 5, 0.4
    p = sample_prompts(1, Setting(d=d, L=L, sigma2=sigma2), seed=5)
    w = DebiasedGD(0.9).weights(p)[0]
    exact = conditional_loss(p, w[None, :])[0]
    rng = np.random.default_rng(6)
    m = 400_000
    beta = rng.standard_normal((m, d)) / np.sqrt(d)
    y = beta @ p.X[0].T + np.sqrt(sigma2) * rng.standard_normal((m, L))
    yq = beta @ p.x_q[0] + np.sqrt(sigma2) * rng.standard_normal(m)
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
    setting = Setting(d=d, L=L, sigma2=sigma2)
    stats = Prompts.from_stats(s, np.array([r2]), setting=setting)
    w = DebiasedGD(0.7).weights(stats)
    stats_val = conditional_loss(stats, w)[0]
    full = conditional_loss(Prompts.from_arrays(X, np.zeros((m, L)), xq), np.repeat(w, m, 0), setting=setting)
    se = full.std(ddof=1) / np.sqrt(m)
    assert abs(full.mean() - stats_val) < 3 * se


@pytest.mark.parametrize(
    "call, param",
    [
        (lambda b: VanillaGD(float("nan"))(b), "eta"),
        (lambda b: DebiasedGD(float("inf"))(b), "eta"),
        (lambda b: MultiHead([1.0, 2.0], [1.0])(b), "omega"),
        (lambda b: MultiHead([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0]] * 3)(b), "omega"),
        (lambda b: MultiHead([float("nan")], [1.0])(b), "omega"),
        (lambda b: MultiHead(1.0, 1.0), "omega"),
        (lambda b: BayesRidge()(b.to_stats()), "prompts"),
        (lambda b: BayesRidge(-1.0), "lam"),
        (lambda b: MultiHead([1.0], [1.0])("not a batch"), "prompts"),
        (lambda b: SingleHead(1.0, float("inf")), "mu"),
        (lambda b: BayesRidge().weights(b.to_stats()), "prompts"),
        (lambda b: BayesRidge()(Prompts.from_arrays(b.X, b.y, b.x_q)), "lam"),  # no setting, no lam
        (lambda b: sample_prompts(0, SETTING, seed=0), "n_prompts"),
        (lambda b: sample_prompts(2, SETTING, seed=None), "seed"),
        (lambda b: sample_prompts(2, SETTING, seed=-1), "seed"),
        (lambda b: sample_prompts(2, (2, 3, 0.1), seed=0), "setting"),
        (
            lambda b: sample_prompts(2, Setting(d=2, L=3, sigma2=0.1, Sigma=np.eye(2)), seed=0, stats_only=True),
            "setting.Sigma",
        ),
        (
            lambda b: MultiHead([1.0], [1.0])(
                sample_prompts(2, Setting(d=2, L=3, sigma2=0.1), seed=0, stats_only=True, covariates_only=True)
            ),
            "prompts",
        ),
        # λ = 0 with L < d: XᵀX is singular (not always flagged by LAPACK in floating point)
        (lambda b: BayesRidge(0.0)(sample_prompts(3, Setting(d=5, L=3, sigma2=0.0), seed=0)), "lam"),
        (lambda b: BayesRidge(0.0).weights(sample_prompts(3, Setting(d=5, L=3, sigma2=0.1), seed=0)), "lam"),
        (lambda b: conditional_loss(b, np.zeros((b.n, b.L + 1))), "w"),
        (lambda b: conditional_loss("not a batch", np.zeros((1, 1))), "prompts"),
        (lambda b: conditional_loss(Prompts.from_arrays(b.X, b.y, b.x_q), np.zeros((b.n, b.L))), "setting"),
        (lambda b: conditional_loss(b, np.zeros((b.n, b.L)), setting=Setting(d=5, L=13, sigma2=0.3)), "setting"),
    ],
)
def test_bad_input_names_the_parameter(prompts, call, param):
    with pytest.raises(ValueError, match=f"`{param}`"):
        call(prompts)


# ------------------------------------------------------------ broadcasting


BROADCAST = {
    "VanillaGD": (lambda a: VanillaGD(a), lambda a: VanillaGD(float(a)), np.array([[0.3, 0.9], [1.2, -0.5]])),
    "DebiasedGD": (lambda a: DebiasedGD(a), lambda a: DebiasedGD(float(a)), np.array([0.2, 0.88, 1.4])),
    "BayesRidge": (lambda a: BayesRidge(a), lambda a: BayesRidge(float(a)), np.array([0.1, 1.2, 5.0])),
    "SingleHead": (lambda a: SingleHead(a, 1.3), lambda a: SingleHead(float(a), 1.3), np.array([-0.7, 0.0, 0.4])),
    "MultiHead": (
        lambda a: MultiHead(a, [2.0, -1.5]),
        lambda a: MultiHead(a, [2.0, -1.5]),
        np.array([[0.1, -0.1], [0.5, 0.3], [-1.0, 2.0]]),
    ),
    "LinearAttention": (
        lambda a: LinearAttention(a, [2.0, -1.5]),
        lambda a: LinearAttention(a, [2.0, -1.5]),
        np.array([[0.1, -0.1], [0.5, 0.3]]),
    ),
}


@pytest.mark.parametrize("name", sorted(BROADCAST))
def test_parameter_arrays_broadcast_like_a_loop_over_scalar_predictors(prompts, name):
    """A predictor with a parameter array of shape S gives S + (n,) predictions, = the scalar predictors one by one."""
    batched, scalar, values = BROADCAST[name]
    heads = name in ("MultiHead", "LinearAttention")
    shape = values.shape[:-1] if heads else values.shape
    pred = batched(values)
    assert pred.batch_shape == shape
    got, w = pred(prompts), pred.weights(prompts)
    assert got.shape == shape + (prompts.n,) and w.shape == shape + (prompts.n, prompts.L)
    loss = conditional_loss(prompts, w)
    assert loss.shape == shape + (prompts.n,)
    for idx in np.ndindex(shape):
        one = scalar(values[idx])
        assert rel_err(got[idx], one(prompts)) < EXACT
        assert rel_err(loss[idx], conditional_loss(prompts, one.weights(prompts))) < EXACT


def test_multi_head_omega_and_mu_broadcast_against_each_other(prompts):
    omega = np.array([[0.1, -0.1], [0.4, -0.2]])  # (2, H)
    mu = np.array([[[1.0, -1.0]], [[3.0, 0.5]], [[0.0, 2.0]]])  # (3, 1, H)
    got = MultiHead(omega, mu)(prompts)
    assert got.shape == (3, 2, prompts.n)
    for i in range(3):
        for j in range(2):
            assert rel_err(got[i, j], ref_multi_head(prompts, omega[j], mu[i, 0])) < EXACT


def test_predictors_compare_and_hash_by_value():
    assert MultiHead([0.1, -0.1], [1.0, -1.0]) == MultiHead((0.1, -0.1), (1.0, -1.0))
    assert hash(VanillaGD(np.array([0.5, 0.6]))) == hash(VanillaGD([0.5, 0.6]))
    assert DebiasedGD(0.5) != DebiasedGD(0.6) and DebiasedGD(0.5) != VanillaGD(0.5)
    assert BayesRidge(SETTING) == BayesRidge(SETTING.sigma2 * SETTING.d)
    with pytest.raises(ValueError):
        MultiHead([0.1], [1.0]).omega[0] = 2.0  # stored read-only
