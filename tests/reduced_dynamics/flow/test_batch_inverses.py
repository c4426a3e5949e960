"""The iteration matrices of the batched Radau (reduced_dynamics.flow._batch._inverses): the real inverse of
``μ_real/h I − J`` and the complex one of ``μ_complex/h I − J`` as real block operators, checked against
numpy's LAPACK solves of the same (complex) systems, on both paths (vectorised elimination from 48 matrices,
LAPACK below), for symmetric J of either sign (saddles: indefinite iteration matrices), and the flags of a
non-finite J."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reduced_dynamics.flow import _batch


def _case(seed, n, M, spread):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, n, n)) * spread
    J = -(A + np.swapaxes(A, 1, 2))  # symmetric, either sign
    h = 10.0 ** rng.uniform(-4, 2, size=M)
    return J, h


def _check(J, h):
    M, n, _ = J.shape
    inv_r, (P2, PM2), bad = _batch._inverses(np.ascontiguousarray(np.moveaxis(J, 0, 2)), h)
    assert not bad.any()
    rng = np.random.default_rng(1)
    v = rng.standard_normal((M, n)) + 1j * rng.standard_normal((M, n))
    eye = np.eye(n)
    for m in range(M):
        Ar = _batch._MU_REAL / h[m] * eye - J[m]
        Ac = _batch._MU_COMPLEX / h[m] * eye - J[m]
        x_r = np.linalg.solve(Ar, v[m].real)
        x_c = np.linalg.solve(Ac, v[m])
        # the errors a backward-stable solve allows: cond · eps, relative to the solution
        tol_r = 1e3 * np.linalg.cond(Ar) * np.finfo(float).eps
        tol_c = 1e3 * np.linalg.cond(Ac) * np.finfo(float).eps
        np.testing.assert_allclose(inv_r[:, :, m] @ v[m].real, x_r, rtol=0, atol=tol_r * np.abs(x_r).max())
        pair = np.stack([v[m].real, v[m].imag], axis=1)  # (n, 2): (Re, Im) per component
        got = np.einsum("isjt,jt->is", P2[..., m], pair)
        np.testing.assert_allclose(got[:, 0] + 1j * got[:, 1], x_c, rtol=0, atol=tol_c * np.abs(x_c).max())
        # PM2 is P times μ_complex/h
        got = np.einsum("isjt,jt->is", PM2[..., m], pair)
        want = x_c * (_batch._MU_COMPLEX / h[m])
        np.testing.assert_allclose(got[:, 0] + 1j * got[:, 1], want, rtol=0, atol=tol_c * np.abs(want).max())


@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 8),
    M=st.sampled_from([1, 5, 47, 48, 64]),
    spread=st.sampled_from([1e-3, 1.0, 1e3]),
)
def test_inverses_solve_the_iteration_systems(seed, n, M, spread):
    _check(*_case(seed, n, M, spread))


@pytest.mark.parametrize("M", [3, 60])
def test_a_nonfinite_jacobian_is_flagged_and_the_others_are_right(M):
    J, h = _case(7, 4, M, 1.0)
    J[1, 0, 0] = np.nan
    inv_r, (P2, PM2), bad = _batch._inverses(np.ascontiguousarray(np.moveaxis(J, 0, 2)), h)
    assert bad[1] and not np.delete(bad, 1).any()
    keep = np.delete(np.arange(M), 1)
    _check(J[keep], h[keep])
