"""Preconditioned GD predictors vs per-prompt references written here, and their place in the engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics import DebiasedGD, Setting, VanillaGD, estimate_risks, sample_prompts
from reduced_dynamics.estimation.predictors import conditional_loss
from reduced_dynamics.precond.predictors import DebiasedPrecondGD, PrecondGD, debiased_precond_gd, precond_gd

SIGMA = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, -0.2], [0.0, -0.2, 0.5]])


def ref_precond(p, P, eta, debiased):
    """ŷ = η/L Σ_l y_l (x_l − x̄)ᵀ P x_q, one prompt and one example at a time."""
    out = np.empty(p.n)
    for i in range(p.n):
        X = p.X[i] - (p.X[i].mean(axis=0) if debiased else 0.0)
        out[i] = eta / p.L * sum(p.y[i][l] * (X[l] @ P @ p.x_q[i]) for l in range(p.L))
    return out


@given(seed=st.integers(0, 2**16), eta=st.floats(-3, 3), debiased=st.booleans())
def test_matches_per_prompt_reference(seed, eta, debiased):
    p = sample_prompts(6, Setting(d=3, L=7, sigma2=0.2, Sigma=SIGMA), seed=seed)
    P = np.random.default_rng(seed + 1).standard_normal((3, 3))
    pred = (debiased_precond_gd if debiased else precond_gd)(P, eta)
    want = ref_precond(p, P, eta, debiased)
    assert np.max(np.abs(pred(p) - want)) <= 1e-12 * (1 + np.max(np.abs(want)))


@pytest.mark.parametrize("debiased", [True, False])
def test_identity_preconditioner_equals_isotropic_predictor(debiased):
    p = sample_prompts(50, Setting(d=4, L=12, sigma2=0.1), seed=2)
    ours = (DebiasedPrecondGD if debiased else PrecondGD)(np.eye(4), 0.7)
    iso = (DebiasedGD if debiased else VanillaGD)(0.7)
    np.testing.assert_allclose(ours.weights(p), iso.weights(p), rtol=1e-12, atol=1e-14)


def test_engine_pairs_them_with_the_isotropic_predictors_on_common_prompts():
    # on isotropic data the engine must give identical per-prompt losses for P = I and DebiasedGD
    s = Setting(d=4, L=12, sigma2=0.1)
    res = estimate_risks(
        {"ours": debiased_precond_gd(np.eye(4), 0.8), "iso": DebiasedGD(0.8)},
        s,
        n_prompts=2000,
        seed=0,
        sampler="full",
        conditional=True,
    )
    d = res.difference("ours", "iso")
    assert abs(d.risk) < 1e-12 and d.stderr < 1e-12


def test_conditional_loss_is_the_average_over_beta_and_noise():
    # Rao–Blackwell: the conditional loss equals the mean of (y_q − ŷ)² over fresh β, ε at fixed covariates
    s = Setting(d=3, L=5, sigma2=0.3, Sigma=SIGMA)
    p = sample_prompts(1, s, seed=4)
    pred = debiased_precond_gd(np.linalg.inv(SIGMA), 0.9)
    w = pred.weights(p)[0]
    rng = np.random.default_rng(0)
    n = 200_000
    beta = rng.standard_normal((n, 3)) / np.sqrt(3)
    eps = np.sqrt(0.3) * rng.standard_normal((n, 6))
    y = beta @ p.X[0].T + eps[:, :5]
    yq = beta @ p.x_q[0] + eps[:, 5]
    loss = (yq - y @ w) ** 2
    exact = float(conditional_loss(p, pred.weights(p), setting=s)[0])
    assert abs(loss.mean() - exact) <= 3 * loss.std(ddof=1) / np.sqrt(n)


def test_value_semantics_and_names():
    a, b = debiased_precond_gd(np.eye(3), 0.5), debiased_precond_gd(np.eye(3), 0.5)
    assert a == b and hash(a) == hash(b)
    assert a != debiased_precond_gd(2 * np.eye(3), 0.5)
    assert a.name == "debiased_precond_gd" and precond_gd(np.eye(3), 0.5).name == "precond_gd"
    assert not a.uses_stats
    assert not a.P.flags.writeable


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: precond_gd(np.ones((2, 3)), 0.5), "`P`"),
        (lambda: precond_gd(np.ones(3), 0.5), "`P`"),
        (lambda: precond_gd(np.full((3, 3), np.inf), 0.5), "`P`"),
        (lambda: debiased_precond_gd(np.eye(3), np.nan), "`eta`"),
        (lambda: debiased_precond_gd(np.eye(3), 1e13), "`eta`"),
        (lambda: debiased_precond_gd(np.eye(3), 1j), "`eta`"),
    ],
)
def test_bad_parameters_name_the_parameter(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_prompts_are_refused():
    pred = debiased_precond_gd(np.eye(3), 0.5)
    stats = sample_prompts(4, Setting(d=3, L=5), seed=0, stats_only=True)
    with pytest.raises(ValueError, match="`prompts`"):
        pred(stats)
    with pytest.raises(ValueError, match="`P`"):
        pred(sample_prompts(4, Setting(d=4, L=5), seed=0))
    with pytest.raises(ValueError, match="overflow"):
        debiased_precond_gd(np.eye(3) * 1e300, 1e12).weights(sample_prompts(4, Setting(d=3, L=5), seed=0))
