"""Vectorised L̃, gradient and Hessian vs central finite differences; broadcasting; optimal μ; overflow; bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import minimize

from reduced_dynamics import LossOverflowError, approx_loss, approx_loss_grad, approx_loss_hessian
from reduced_dynamics.dynamics.loss import LossGradient, optimal_mu
from reduced_dynamics.dynamics.manifold import mu_gamma
from reduced_dynamics.setting import Setting

PAPER = Setting(d=5, L=40, sigma2=0.1)

states = st.integers(min_value=1, max_value=6).flatmap(
    lambda H: st.tuples(
        st.lists(st.floats(-1.0, 1.0), min_size=H, max_size=H),
        st.lists(st.floats(-3.0, 3.0), min_size=H, max_size=H),
    )
)
problems = st.builds(
    lambda d, L, s2: Setting(d=d, L=L, sigma2=s2), st.integers(1, 8), st.integers(1, 100), st.floats(0.0, 2.0)
)


def _fd_grad(f, x, h):
    E = np.eye(x.size)
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in E])


@given(state=states, setting=problems)
def test_gradient_matches_central_differences(state, setting):
    """∇L̃ equals the central difference (step 1e-5) within atol + rtol·|ref| = 1e-6 + 1e-6|ref|."""
    omega, mu = map(np.array, state)
    H = omega.size
    theta = np.concatenate([omega, mu])
    f = lambda th: approx_loss(th[:H], th[H:], setting)  # noqa: E731
    fd = _fd_grad(f, theta, 1e-5)
    an = approx_loss_grad(omega, mu, setting).theta
    scale = 1.0 + np.max(np.abs(an))
    assert np.max(np.abs(fd - an) / (1e-6 * scale + 1e-6 * np.abs(an))) <= 1.0


@given(state=states, setting=problems)
def test_hessian_matches_differences_of_gradient(state, setting):
    """Hessian equals the central difference of the analytic gradient and is symmetric."""
    omega, mu = map(np.array, state)
    H = omega.size
    theta = np.concatenate([omega, mu])
    g = lambda th: approx_loss_grad(th[:H], th[H:], setting).theta  # noqa: E731
    fd = np.array([(g(theta + 1e-5 * e) - g(theta - 1e-5 * e)) / 2e-5 for e in np.eye(2 * H)])
    an = approx_loss_hessian(omega, mu, setting)
    scale = 1.0 + np.max(np.abs(an))
    assert np.max(np.abs(fd - an)) <= 1e-6 * scale
    assert np.max(np.abs(an - an.T)) <= 1e-12 * scale


@pytest.mark.parametrize("H", [1, 2, 5])
def test_batch_equals_loop(H):
    """Batched evaluation (shape (B, H)) equals evaluating each state alone."""
    rng = np.random.default_rng(H)
    W, M = rng.normal(size=(7, H)) * 0.5, rng.normal(size=(7, H))
    lb = approx_loss(W, M, PAPER)
    g = approx_loss_grad(W, M, PAPER)
    hb = approx_loss_hessian(W, M, PAPER)
    for i in range(7):
        assert lb[i] == pytest.approx(approx_loss(W[i], M[i], PAPER), rel=1e-14)
        gi = approx_loss_grad(W[i], M[i], PAPER)
        np.testing.assert_allclose(g.omega[i], gi.omega, rtol=1e-13)
        np.testing.assert_allclose(g.mu[i], gi.mu, rtol=1e-13)
        np.testing.assert_allclose(hb[i], approx_loss_hessian(W[i], M[i], PAPER), rtol=1e-13)


shape_pairs = st.sampled_from(
    [((3,), (4, 3)), ((4, 3), (3,)), ((2, 1, 3), (5, 3)), ((1, 3), (6, 1, 3)), ((2, 3), (2, 3)), ((3,), (3,))]
)


@given(shapes=shape_pairs, seed=st.integers(0, 2**16))
def test_omega_and_mu_broadcast(shapes, seed):
    """omega and mu broadcast over leading axes: every function equals its value on explicitly broadcast copies,
    and returns the broadcast shape (loss (...), gradient (..., H), Hessian (..., 2H, 2H))."""
    sw, sm = shapes
    rng = np.random.default_rng(seed)
    w, m = rng.uniform(-0.8, 0.8, sw), rng.normal(size=sm)
    W, M = np.broadcast_arrays(w, m)
    batch, H = W.shape[:-1], W.shape[-1]
    loss = approx_loss(w, m, PAPER)
    g = approx_loss_grad(w, m, PAPER)
    hess = approx_loss_hessian(w, m, PAPER)
    assert np.shape(loss) == batch and g.omega.shape == g.mu.shape == W.shape
    assert hess.shape == batch + (2 * H, 2 * H)
    np.testing.assert_array_equal(loss, approx_loss(W.copy(), M.copy(), PAPER))
    g2 = approx_loss_grad(W.copy(), M.copy(), PAPER)
    np.testing.assert_array_equal(g.omega, g2.omega)
    np.testing.assert_array_equal(g.mu, g2.mu)
    np.testing.assert_array_equal(hess, approx_loss_hessian(W.copy(), M.copy(), PAPER))


def test_array_setting_broadcasts_against_batch():
    """An array-valued setting broadcasts against the leading axes: entry i equals the scalar setting i."""
    Ls = np.array([10, 40, 160])
    s = Setting(d=5, L=Ls[:, None], sigma2=[0.0, 0.5])  # shape (3, 2)
    w, m = np.array([0.3, -0.2]), np.array([1.0, -2.0])
    loss = approx_loss(w, m, s)
    g = approx_loss_grad(w, m, s)
    hess = approx_loss_hessian(w, m, s)
    assert loss.shape == (3, 2) and g.omega.shape == (3, 2, 2) and hess.shape == (3, 2, 4, 4)
    for i, L in enumerate(Ls):
        for j, s2 in enumerate([0.0, 0.5]):
            one = Setting(d=5, L=int(L), sigma2=s2)
            assert loss[i, j] == pytest.approx(approx_loss(w, m, one), rel=1e-15)
            np.testing.assert_allclose(g.mu[i, j], approx_loss_grad(w, m, one).mu, rtol=1e-15)
            np.testing.assert_allclose(hess[i, j], approx_loss_hessian(w, m, one), rtol=1e-15)


def test_gradient_result_is_frozen():
    g = approx_loss_grad([0.1, 0.2], [1.0, 2.0], PAPER)
    assert isinstance(g, LossGradient)
    assert not g.omega.flags.writeable and not g.mu.flags.writeable
    assert g.theta.shape == (4,)
    assert g.norm == pytest.approx(np.linalg.norm(g.theta), rel=1e-15)
    with pytest.raises(AttributeError):
        g.omega = None


def test_loss_at_origin_and_simple_point():
    """L̃(0, μ) = 1 + σ² + c(Σμ)²  (ω = 0 → exp(0) = 1): checked by hand."""
    c = 1.1 / 40
    assert approx_loss([0.0, 0.0], [1.0, 2.0], PAPER) == pytest.approx(1.1 + c * 9, rel=1e-14)
    assert isinstance(approx_loss([0.0, 0.0], [1.0, 2.0], PAPER), float)


# ------------------------------------------------------------------ optimal μ


@pytest.mark.parametrize("H", [1, 2, 3, 4])
@pytest.mark.parametrize("setting", [PAPER, Setting(d=3, L=20, sigma2=0.5), Setting(d=10, L=100, sigma2=0.0)])
def test_optimal_mu_by_numerical_minimisation(H, setting):
    """optimal_mu(ω) equals BFGS minimisation of L̃(ω, ·) from μ = 0 (generic ω: A is invertible, condition
    numbers up to ~4e5 here, so the argmin is compared to 1e-6 relative to max|μ|) and its loss is not above BFGS's."""
    rng = np.random.default_rng(10 * H + setting.d)
    for _ in range(3):
        w = rng.uniform(-0.6, 0.6, H)
        res = minimize(
            lambda m, w=w: approx_loss(w, m, setting),
            np.zeros(H),
            jac=lambda m, w=w: approx_loss_grad(w, m, setting).mu,
            method="BFGS",
            options={"gtol": 1e-13},
        )
        mu = optimal_mu(w, setting)
        np.testing.assert_allclose(mu, res.x, rtol=0, atol=1e-6 * np.max(np.abs(mu)))
        # float64 roundoff of L̃ is ~eps times the largest term c|μ|ᵀE|μ| (the terms cancel)
        roundoff = 1e-14 * (1.0 + setting.c * np.abs(mu) @ np.exp(setting.d * np.outer(w, w)) @ np.abs(mu))
        assert approx_loss(w, mu, setting) <= res.fun + roundoff
        # the gradient in μ vanishes there
        assert np.max(np.abs(approx_loss_grad(w, mu, setting).mu)) < 1e-10 * (1 + np.max(np.abs(mu)))


@pytest.mark.parametrize("gamma", [0.02, 0.1, 0.4])
def test_optimal_mu_two_heads_on_the_manifold_is_mu_gamma(gamma):
    """For ω = (γ, −γ) the minimiser over all μ ∈ R² is (μ_γ, −μ_γ) (closed form on S_γ)."""
    mu = optimal_mu([gamma, -gamma], PAPER)
    mg = mu_gamma(gamma, PAPER)
    np.testing.assert_allclose(mu, [mg, -mg], rtol=1e-10)


@pytest.mark.parametrize("p,n", [(2, 1), (1, 3), (2, 2), (3, 2)])
def test_optimal_mu_singular_case_is_least_norm(p, n):
    """H >= 3 on S_γ: heads of one sign share ω, A is singular. The result is a minimiser (loss = manifold value,
    ∇_μ L̃ = 0) and has least norm: the mass μ_γ is split equally, and adding a null vector of A (moving mass
    between two heads of the same sign) keeps the loss but increases the norm."""
    gamma = 0.1
    w = np.r_[[gamma] * p, [-gamma] * n]
    mu = optimal_mu(w, PAPER)
    mg = mu_gamma(gamma, PAPER)
    np.testing.assert_allclose(mu, np.r_[[mg / p] * p, [-mg / n] * n], rtol=1e-9)
    assert np.max(np.abs(approx_loss_grad(w, mu, PAPER).mu)) < 1e-9
    shift = np.zeros(p + n)
    if p >= 2:
        shift[0], shift[1] = 1.0, -1.0
    else:
        shift[p], shift[p + 1] = 1.0, -1.0
    for eps in (0.3, -1.0):
        other = mu + eps * shift
        assert approx_loss(w, other, PAPER) == pytest.approx(approx_loss(w, mu, PAPER), abs=1e-12)
        assert np.linalg.norm(other) > np.linalg.norm(mu)


def test_optimal_mu_least_norm_against_lstsq_at_origin():
    """ω = 0: A = c·11ᵀ, the minimisers are {μ : Σμ = 0}; the least-norm one is μ = 0."""
    np.testing.assert_array_equal(optimal_mu(np.zeros(3), PAPER), np.zeros(3))


def test_optimal_mu_batched_and_array_setting():
    """Batch (B, H) equals a loop; an array-valued setting broadcasts against the batch axes."""
    rng = np.random.default_rng(3)
    W = rng.uniform(-0.5, 0.5, (4, 3))
    batch = optimal_mu(W, PAPER)
    for i in range(4):
        np.testing.assert_allclose(batch[i], optimal_mu(W[i], PAPER), rtol=1e-12)
    s = Setting(d=5, L=[10, 40], sigma2=0.1)
    out = optimal_mu(W[:1], s)  # (1, 3) against (2,) -> (2, 3)
    assert out.shape == (2, 3)
    np.testing.assert_allclose(out[0], optimal_mu(W[0], Setting(d=5, L=10, sigma2=0.1)), rtol=1e-12)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("fn", [approx_loss, approx_loss_grad, approx_loss_hessian])
def test_overflow_is_reported_not_nan(fn):
    with pytest.raises(LossOverflowError, match="overflow"):
        fn([12.0, -1.0], [1.0, 1.0], PAPER)


def test_huge_mu_overflow_is_reported():
    with pytest.raises(OverflowError):
        approx_loss([10.0], [1e200], PAPER)


@pytest.mark.parametrize(
    "kwargs,param",
    [
        (dict(d=0, L=40, sigma2=0.1), "`d`"),
        (dict(d=5, L=0, sigma2=0.1), "`L`"),
        (dict(d=5, L=40, sigma2=-0.1), "`sigma2`"),
        (dict(d=5, L=40, sigma2=float("nan")), "`sigma2`"),
        (dict(d=5, L=40, sigma2=float("inf")), "`sigma2`"),
        (dict(d=2.5, L=40, sigma2=0.1), "`d`"),
    ],
)
def test_bad_problem_constants(kwargs, param):
    """Validation happens in Setting (the functions receive a validated setting)."""
    with pytest.raises(ValueError, match=param):
        approx_loss([0.1, 0.2], [0.1, 0.2], Setting(**kwargs))


def test_setting_must_be_a_setting():
    with pytest.raises(ValueError, match="`setting`"):
        approx_loss([0.1, 0.2], [0.1, 0.2], (5, 40, 0.1))


@pytest.mark.parametrize(
    "omega,mu,param",
    [
        ([0.1, 0.2], [0.1], "`omega` and `mu`"),
        ([[0.1, 0.2]] * 2, [[0.1, 0.2]] * 3, "`omega` and `mu`"),
        ([np.nan, 0.2], [0.1, 0.2], "`omega`"),
        ([0.1, 0.2], [0.1, np.inf], "`mu`"),
        ([], [], "`omega`"),
    ],
)
def test_bad_state(omega, mu, param):
    with pytest.raises(ValueError, match=param):
        approx_loss_grad(omega, mu, PAPER)


def test_anisotropic_setting_is_refused():
    s = Setting(d=2, L=40, sigma2=0.1, Sigma=[[2.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="Sigma"):
        approx_loss([0.1], [1.0], s)
