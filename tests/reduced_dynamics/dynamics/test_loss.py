"""Vectorised L̃, gradient and Hessian vs central finite differences; overflow; bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics import LossOverflowError, approx_loss, approx_loss_grad, approx_loss_hessian

states = st.integers(min_value=1, max_value=6).flatmap(
    lambda H: st.tuples(
        st.lists(st.floats(-1.0, 1.0), min_size=H, max_size=H),
        st.lists(st.floats(-3.0, 3.0), min_size=H, max_size=H),
    )
)
problems = st.tuples(st.integers(1, 8), st.integers(1, 100), st.floats(0.0, 2.0))


def _fd_grad(f, x, h):
    E = np.eye(x.size)
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in E])


@given(state=states, problem=problems)
def test_gradient_matches_central_differences(state, problem):
    """∇L̃ equals the central difference (step 1e-5) within atol + rtol·|ref| = 1e-6 + 1e-6|ref|."""
    omega, mu = map(np.array, state)
    d, L, s2 = problem
    H = omega.size
    kw = dict(d=d, L=L, sigma2=s2)
    theta = np.concatenate([omega, mu])
    f = lambda th: approx_loss(th[:H], th[H:], **kw)  # noqa: E731
    fd = _fd_grad(f, theta, 1e-5)
    an = np.concatenate(approx_loss_grad(omega, mu, **kw))
    scale = 1.0 + np.max(np.abs(an))
    assert np.max(np.abs(fd - an) / (1e-6 * scale + 1e-6 * np.abs(an))) <= 1.0


@given(state=states, problem=problems)
def test_hessian_matches_differences_of_gradient(state, problem):
    """Hessian equals the central difference of the analytic gradient and is symmetric."""
    omega, mu = map(np.array, state)
    d, L, s2 = problem
    H = omega.size
    kw = dict(d=d, L=L, sigma2=s2)
    theta = np.concatenate([omega, mu])
    g = lambda th: np.concatenate(approx_loss_grad(th[:H], th[H:], **kw))  # noqa: E731
    fd = np.array([(g(theta + 1e-5 * e) - g(theta - 1e-5 * e)) / 2e-5 for e in np.eye(2 * H)])
    an = approx_loss_hessian(omega, mu, **kw)
    scale = 1.0 + np.max(np.abs(an))
    assert np.max(np.abs(fd - an)) <= 1e-6 * scale
    assert np.max(np.abs(an - an.T)) <= 1e-12 * scale


@pytest.mark.parametrize("H", [1, 2, 5])
def test_batch_equals_loop(H):
    """Batched evaluation (shape (B, H)) equals evaluating each state alone."""
    rng = np.random.default_rng(H)
    W, M = rng.normal(size=(7, H)) * 0.5, rng.normal(size=(7, H))
    kw = dict(d=5, L=40, sigma2=0.1)
    lb = approx_loss(W, M, **kw)
    gw, gm = approx_loss_grad(W, M, **kw)
    hb = approx_loss_hessian(W, M, **kw)
    for i in range(7):
        assert lb[i] == pytest.approx(approx_loss(W[i], M[i], **kw), rel=1e-14)
        np.testing.assert_allclose(gw[i], approx_loss_grad(W[i], M[i], **kw)[0], rtol=1e-13)
        np.testing.assert_allclose(gm[i], approx_loss_grad(W[i], M[i], **kw)[1], rtol=1e-13)
        np.testing.assert_allclose(hb[i], approx_loss_hessian(W[i], M[i], **kw), rtol=1e-13)


def test_loss_at_origin_and_simple_point():
    """L̃(0, μ) = 1 + σ² + c(Σμ)²  (ω = 0 → exp(0) = 1): checked by hand."""
    c = 1.1 / 40
    assert approx_loss([0.0, 0.0], [1.0, 2.0], d=5, L=40, sigma2=0.1) == pytest.approx(1.1 + c * 9, rel=1e-14)


@pytest.mark.parametrize("fn", [approx_loss, approx_loss_grad, approx_loss_hessian])
def test_overflow_is_reported_not_nan(fn):
    with pytest.raises(LossOverflowError, match="overflow"):
        fn([12.0, -1.0], [1.0, 1.0], d=5, L=40, sigma2=0.1)


def test_huge_mu_overflow_is_reported():
    with pytest.raises(OverflowError):
        approx_loss([10.0], [1e200], d=5, L=40, sigma2=0.1)


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
    with pytest.raises(ValueError, match=param):
        approx_loss([0.1, 0.2], [0.1, 0.2], **kwargs)


@pytest.mark.parametrize(
    "omega,mu,param",
    [
        ([0.1, 0.2], [0.1], "`omega` and `mu`"),
        ([np.nan, 0.2], [0.1, 0.2], "`omega`"),
        ([0.1, 0.2], [0.1, np.inf], "`mu`"),
        ([], [], "`omega`"),
    ],
)
def test_bad_state(omega, mu, param):
    with pytest.raises(ValueError, match=param):
        approx_loss_grad(omega, mu, d=5, L=40, sigma2=0.1)
