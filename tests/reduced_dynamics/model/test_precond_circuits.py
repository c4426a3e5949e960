"""Circuits under x ~ N(0, Σ) (issue 11): extraction of (ω, μ, W), cosines with Σ⁻¹ and I, the paired risk check."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reduced_dynamics.cli._setting import covariance_from_eigs
from reduced_dynamics.model.attention import make_model
from reduced_dynamics.model.circuits import (
    extract_precond_circuits,
    precond_circuits_from_arrays,
    precond_cross_check,
)
from reduced_dynamics.model.training import TrainConfig, train
from reduced_dynamics.setting import Setting


def _cos(A, B):
    """|Frobenius cosine| written out (independent of precond.metrics)."""
    return abs(float(np.sum(A * B))) / math.sqrt(float(np.sum(A * A)) * float(np.sum(B * B)))


def _arrays(blocks, mu):
    H, d = len(blocks), blocks[0].shape[0]
    KQ = np.zeros((H, d + 1, d + 1))
    KQ[:, :d, :d] = blocks
    ov = np.zeros((H, d + 1))
    ov[:, d] = mu
    return KQ, ov


@settings(max_examples=25)
@given(
    st.integers(2, 6),
    st.lists(st.floats(0.3, 3.0), min_size=2, max_size=4),
    st.integers(0, 10_000),
)
def test_exact_rank_one_blocks_are_recovered(d, scales, seed):
    """Blocks ω_h W₀ (W₀ random, not symmetric; signs alternating): W = W₀ d / tr W₀, ω_h = ω_h⁰ tr W₀ / d,
    rank-one residual 0; cosines equal the written-out formula."""
    rng = np.random.default_rng(seed)
    W0 = rng.standard_normal((d, d)) + 2.0 * np.eye(d)
    if abs(np.trace(W0)) < 0.5:
        W0 += np.eye(d)
    om0 = np.array(scales) * (-1.0) ** np.arange(len(scales))
    S = covariance_from_eigs(np.linspace(0.5, 4.0, d), seed=seed)
    KQ, ov = _arrays([w * W0 for w in om0], mu=np.sign(om0))  # sign matching; |ω μ| within 10x: every head live
    c = precond_circuits_from_arrays(KQ, ov, Setting(d=d, L=40, Sigma=S))
    tr = np.trace(W0)
    np.testing.assert_allclose(c.W, W0 * (d / tr), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(c.omega, om0 * tr / d, rtol=1e-9, atol=1e-12)
    assert c.rank1_residual < 1e-9 and not c.dummy.any()
    Si = np.linalg.inv(S)
    for h in range(len(om0)):
        assert c.cosine_sigma_inv[h] == pytest.approx(_cos(KQ[h, :d, :d], Si), abs=1e-12)
        assert c.cosine_identity[h] == pytest.approx(_cos(KQ[h, :d, :d], np.eye(d)), abs=1e-12)
        assert c.distance_sigma_inv[h] == pytest.approx(math.sqrt(1 - _cos(KQ[h, :d, :d], Si) ** 2), abs=1e-7)
    assert c.eta_eff == pytest.approx(float(ov[:, d] @ c.omega))
    np.testing.assert_allclose(c.P_eff, c.eta_eff * c.W)


def test_sigma_inverse_blocks_and_the_identity_control():
    """Blocks ±γΣ⁻¹: cosine 1 with Σ⁻¹, the control cosine with I is < 1, W = Σ⁻¹ d / tr Σ⁻¹; isotropic: equal."""
    d = 5
    S = covariance_from_eigs(np.linspace(0.5, 4.0, d), seed=0)
    Si = np.linalg.inv(S)
    KQ, ov = _arrays([0.3 * Si, -0.3 * Si], mu=[0.8, -0.8])
    c = precond_circuits_from_arrays(KQ, ov, Setting(d=d, Sigma=S))
    np.testing.assert_allclose(c.cosine_sigma_inv, 1.0, atol=1e-12)
    np.testing.assert_allclose(c.cosine_identity, _cos(Si, np.eye(d)), atol=1e-12)
    assert c.cosine_identity.max() < 0.9
    np.testing.assert_allclose(c.W, Si * d / np.trace(Si), atol=1e-12)
    assert c.W_distance_sigma_inv < 1e-7 and c.W_distance_identity > 0.4
    iso = precond_circuits_from_arrays(KQ, ov, Setting(d=d))  # no Σ: Σ⁻¹ is I
    np.testing.assert_array_equal(iso.cosine_sigma_inv, iso.cosine_identity)


def test_a_dummy_head_does_not_set_W():
    """A head with a large block but μ = 0 is dummy and left out of the fit of W."""
    d = 3
    Si = np.diag([2.0, 1.0, 0.5])
    junk = np.array([[0.0, 5.0, 0.0], [-5.0, 0.0, 0.0], [0.0, 0.0, 1.0]]) * 10
    KQ, ov = _arrays([0.2 * Si, -0.2 * Si, junk], mu=[1.0, -1.0, 0.0])
    c = precond_circuits_from_arrays(KQ, ov, Setting(d=d, Sigma=np.linalg.inv(Si)))
    assert c.dummy.tolist() == [False, False, True]
    np.testing.assert_allclose(c.W, Si * d / np.trace(Si), atol=1e-12)
    assert c.rank1_residual < 1e-12


def test_per_head_directions_leave_a_residual():
    """Two heads with different directions: the rank-one residual is the least-squares one (SVD, written out)."""
    A, B = np.diag([1.0, 2.0]), np.array([[1.0, 1.0], [0.0, 1.0]])
    KQ, ov = _arrays([A, -B], mu=[1.0, -1.0])
    c = precond_circuits_from_arrays(KQ, ov, Setting(d=2))
    sv = np.linalg.svd(np.stack([A.ravel(), -B.ravel()]), compute_uv=False)
    assert c.rank1_residual == pytest.approx(sv[1] / np.linalg.norm(sv), rel=1e-9)
    np.testing.assert_allclose(c.P_eff, A + B)  # Σ_h μ_h B_h: the limit predictor's preconditioner
    assert c.P_eff_distance_identity == pytest.approx(math.sqrt(1 - _cos(A + B, np.eye(2)) ** 2), abs=1e-7)


@pytest.mark.parametrize(
    "KQ, ov, setting, match",
    [
        (np.zeros((2, 4, 4)), np.ones((2, 4)), Setting(d=3), "non-zero covariate block"),
        (np.ones((2, 4, 4)), np.ones((2, 4)), Setting(d=2), "`setting.d`"),
        (np.ones((2, 4, 3)), np.ones((2, 4)), Setting(d=3), "`KQ`"),
        (np.full((2, 4, 4), np.nan), np.ones((2, 4)), Setting(d=3), "`KQ`"),
        (np.ones((2, 4, 4)), np.ones((2, 4)), Setting(d=3, L=[5, 6]), "`setting`"),
    ],
)
def test_extraction_validates(KQ, ov, setting, match):
    with pytest.raises(ValueError, match=match):
        precond_circuits_from_arrays(KQ, ov, setting)


@pytest.fixture(scope="module")
def trained():
    """A small model trained under Σ (d = 5, L = 40, eigenvalues over [0.5, 4]; Adam lr 1e-2, 2000 steps)."""
    S = covariance_from_eigs(np.linspace(0.5, 4.0, 5), seed=0)
    s = Setting(d=5, L=40, sigma2=0.1, Sigma=S)
    r = train(TrainConfig(setting=s, seed=0, n_heads=2, steps=2000, lr=1e-2, batch=256))
    return r.config.model(), r.params, s


def test_trained_blocks_are_closer_to_sigma_inverse_than_to_identity(trained):
    model, params, s = trained
    c = extract_precond_circuits(model, params, s)
    assert not c.dummy.any()
    assert np.all(c.cosine_sigma_inv > c.cosine_identity) and np.all(c.cosine_sigma_inv > 0.95)
    assert c.W_distance_sigma_inv < 0.5 * c.W_distance_identity
    assert c.ov[:, :5].max() < 0.2 * np.abs(c.mu).min()  # the OV pattern: the response entry only
    assert abs(c.mu.sum()) < 0.2 * np.abs(c.mu).sum()  # zero-sum


def test_cross_check_pairs_and_matches_the_exact_risks(trained):
    """Monte Carlo risks of the four debiased preconditioned GD predictors within 4 SE of their exact risks;
    each paired difference is the difference of the two risks; the same seed gives the same numbers."""
    model, params, s = trained
    cc = precond_cross_check(model, params, s, n_prompts=20_000, seed=5, chunk=4096)
    assert cc.names == ("model", "dpgd_own", "dpgd_sigma_inv", "dpgd_optimal", "debiased_gd")
    for k, exact in cc.exact.items():
        r = cc.risks[k]
        assert abs(r.risk - exact) < 4 * r.stderr, (k, r, exact)
        d = cc.diffs[k]
        assert d.risk == pytest.approx(cc.risks["model"].risk - r.risk, abs=1e-12)
        assert d.stderr < math.hypot(cc.risks["model"].stderr, r.stderr)  # pairing helps
    assert cc.exact["dpgd_optimal"] <= min(cc.exact["dpgd_sigma_inv"], cc.exact["debiased_gd"])
    again = precond_cross_check(model, params, s, n_prompts=20_000, seed=5, chunk=4096)
    assert again.risks["model"].risk == cc.risks["model"].risk


def test_cross_check_validates(trained):
    model, params, s = trained
    with pytest.raises(ValueError, match="`setting.L`"):
        precond_cross_check(model, params, s.replace(L=1), n_prompts=10, seed=0)
    with pytest.raises(ValueError, match="`n_prompts`"):
        precond_cross_check(model, params, s, n_prompts=1, seed=0)
    with pytest.raises(ValueError, match="`setting.d`|the model"):
        other = make_model("separate", n_heads=2, d=3)
        precond_cross_check(other, other.init(seed=0), s, n_prompts=10, seed=0)
