"""Scale-free distance and |cosine| between matrices, checked against least squares and by hand."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics.precond.metrics import abs_cosine, scale_free_distance


def _lstsq_distance(A, B):
    """Independent route: min_c ||cA - B|| by numpy least squares on the flattened matrices."""
    a = A.reshape(-1, 1)
    b = B.reshape(-1)
    c, *_ = np.linalg.lstsq(a, b, rcond=None)
    return np.linalg.norm(c[0] * a[:, 0] - b) / np.linalg.norm(b)


@given(
    d=st.integers(1, 6),
    seed=st.integers(0, 10_000),
    scale=st.floats(1e-3, 1e3),
)
def test_distance_matches_least_squares(d, seed, scale):
    rng = np.random.default_rng(seed)
    A = scale * rng.standard_normal((d, d))
    B = rng.standard_normal((d, d))
    assert scale_free_distance(A, B) == pytest.approx(_lstsq_distance(A, B), abs=1e-12)
    # |cos| by its definition
    cos = abs(np.sum(A * B)) / (np.linalg.norm(A) * np.linalg.norm(B))
    assert abs_cosine(A, B) == pytest.approx(cos, abs=1e-12)
    # distance^2 + cos^2 = 1
    assert scale_free_distance(A, B) ** 2 + abs_cosine(A, B) ** 2 == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("c", [2.5, -0.3, 1e-8, -1e8])
def test_scale_and_sign_invariance(c):
    rng = np.random.default_rng(1)
    A = rng.standard_normal((4, 4))
    B = rng.standard_normal((4, 4))
    assert scale_free_distance(c * A, B) == pytest.approx(scale_free_distance(A, B), abs=1e-12)
    assert abs_cosine(c * A, B) == pytest.approx(abs_cosine(A, B), abs=1e-12)
    assert scale_free_distance(c * B, B) == pytest.approx(0.0, abs=1e-12)
    assert abs_cosine(c * B, B) == pytest.approx(1.0, abs=1e-12)


def test_small_distance_accurate():
    # A = B + eps*E with E orthogonal to B: the distance is eps*||E||/||B|| to first order
    B = np.diag([1.0, 2.0, 3.0])
    E = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    eps = 1e-9
    dist = scale_free_distance(B + eps * E, B)
    expected = eps / np.sqrt(14.0)  # residual of B against the line through B + eps E, to O(eps^2)
    assert dist == pytest.approx(expected, rel=1e-6)


def test_orthogonal_and_zero():
    A = np.array([[1.0, 0.0], [0.0, -1.0]])
    B = np.eye(2)
    assert abs_cosine(A, B) == 0.0
    assert scale_free_distance(A, B) == pytest.approx(1.0)
    assert scale_free_distance(np.zeros((2, 2)), B) == pytest.approx(1.0, abs=1e-15)
    assert abs_cosine(np.zeros((2, 2)), B) == 0.0


def test_batched_broadcast():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((3, 2, 4, 4))
    B = rng.standard_normal((4, 4))
    dist = scale_free_distance(A, B)
    cos = abs_cosine(A, B)
    assert isinstance(dist, np.ndarray) and dist.shape == (3, 2)
    assert cos.shape == (3, 2)
    for i in range(3):
        for j in range(2):
            assert dist[i, j] == pytest.approx(_lstsq_distance(A[i, j], B), abs=1e-12)
    assert isinstance(scale_free_distance(A[0, 0], B), float)
    assert isinstance(abs_cosine(A[0, 0], B), float)


def test_huge_entries_no_overflow():
    B = np.diag([1.0, 2.0])
    assert scale_free_distance(1e200 * B, B) == pytest.approx(0.0, abs=1e-12)
    assert abs_cosine(1e-200 * B, B) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    "A, B, match",
    [
        (np.ones((2, 3)), np.ones((2, 3)), "square"),
        (np.ones((2, 2)), np.ones((3, 3)), "same size"),
        (np.ones(2), np.ones((2, 2)), "`A`"),
        (np.ones((2, 2)), np.zeros((2, 2)), "non-zero"),
        (np.array([[np.nan, 0.0], [0.0, 1.0]]), np.eye(2), "finite"),
        (np.ones((3, 2, 2)), np.ones((4, 2, 2)), "broadcastable"),
    ],
)
def test_bad_input(A, B, match):
    with pytest.raises(ValueError, match=match):
        scale_free_distance(A, B)
    with pytest.raises(ValueError, match=match):
        abs_cosine(A, B)
