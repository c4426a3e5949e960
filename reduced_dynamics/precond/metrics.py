"""Scale-free comparisons of matrices: how close is a learned block to ``Σ⁻¹`` up to scale and sign.

The KQ block of a trained head (or the shared matrix ``W`` of the preconditioned reduced model) is
only determined up to a scale that goes into ``γ`` and a sign that goes into ``ω_h``; these two
measures compare matrices with both removed.

``scale_free_distance(A, B) = min_c ||c A − B||_F / ||B||_F = sqrt(1 − cos²)``, where
``cos = <A, B>_F / (||A||_F ||B||_F)`` is the Frobenius cosine and ``abs_cosine(A, B) = |cos|``.
Both are invariant under ``A → c A`` for any ``c ≠ 0`` (sign included).

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics._validation import check_finite_array

__all__ = ["scale_free_distance", "abs_cosine"]


def _pair(A, B) -> tuple[np.ndarray, np.ndarray]:
    A = check_finite_array("A", A, min_ndim=2)
    B = check_finite_array("B", B, min_ndim=2)
    if A.shape[-1] != A.shape[-2] or B.shape[-1] != B.shape[-2] or A.shape[-1] != B.shape[-1]:
        raise ValueError(
            f"`A` and `B` must be square matrices of the same size (..., d, d), got {A.shape} and {B.shape}"
        )
    try:
        np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except ValueError:
        raise ValueError(
            f"`A` and `B` must have broadcastable leading (batch) axes, got {A.shape} and {B.shape}"
        ) from None
    return A, B


def _cosine(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Signed Frobenius cosine; 0 where ``A`` is the zero matrix. ``B`` must be non-zero."""
    # scale each matrix by its largest entry first: no overflow/underflow in the squared norms
    sa = np.max(np.abs(A), axis=(-2, -1), keepdims=True)
    sb = np.max(np.abs(B), axis=(-2, -1), keepdims=True)
    if np.any(sb == 0):
        raise ValueError("`B` must be a non-zero matrix (the distance is relative to ||B||_F)")
    a = A / np.where(sa == 0, 1.0, sa)
    b = B / sb
    inner = np.sum(a * b, axis=(-2, -1))
    na = np.sqrt(np.sum(a * a, axis=(-2, -1)))
    nb = np.sqrt(np.sum(b * b, axis=(-2, -1)))
    cos = np.divide(inner, na * nb, out=np.zeros(np.broadcast_shapes(inner.shape, na.shape)), where=na > 0)
    return np.clip(cos, -1.0, 1.0)


def _unit(A: np.ndarray) -> np.ndarray:
    """``A / ||A||_F`` computed without overflow; the zero matrix stays zero."""
    s = np.max(np.abs(A), axis=(-2, -1), keepdims=True)
    a = A / np.where(s == 0, 1.0, s)
    n = np.sqrt(np.sum(a * a, axis=(-2, -1), keepdims=True))
    return a / np.where(n == 0, 1.0, n)


def _out(x: np.ndarray):
    return float(x) if x.ndim == 0 else x


def abs_cosine(A, B):
    """Absolute Frobenius cosine ``|<A, B>_F| / (||A||_F ||B||_F)`` between square matrices.

    Parameters
    ----------
    A : array_like, shape (..., d, d)
        Matrices to compare (e.g. KQ blocks of the heads). A zero matrix has cosine 0.
    B : array_like, shape (..., d, d)
        Reference matrices (e.g. ``Σ⁻¹``); must be non-zero. Leading axes broadcast with ``A``'s.

    Returns
    -------
    float or ndarray, shape (...)
        In ``[0, 1]``; 1 exactly when ``A = c B`` for some ``c ≠ 0``. A float for two single matrices.

    Raises
    ------
    ValueError
        Non-finite input, non-square or mismatched shapes, or ``B = 0``.
    """
    A, B = _pair(A, B)
    return _out(np.abs(_cosine(A, B)))


def scale_free_distance(A, B):
    """Relative distance from ``B`` to the line through ``A``: ``min_c ||c A − B||_F / ||B||_F``.

    The minimiser is ``c* = <A, B>_F / ||A||_F²`` and the value is ``sqrt(1 − cos²)`` with ``cos``
    the Frobenius cosine (:func:`abs_cosine`). Invariant under rescaling ``A`` by any non-zero
    number (sign included), so the scale of a learned block (``γ``) and its sign (``ω_h``) do not
    matter.

    Parameters
    ----------
    A : array_like, shape (..., d, d)
        Matrices to compare; a zero matrix is at distance 1.
    B : array_like, shape (..., d, d)
        Reference matrices (e.g. ``Σ⁻¹``); must be non-zero. Leading axes broadcast with ``A``'s.

    Returns
    -------
    float or ndarray, shape (...)
        In ``[0, 1]``; 0 exactly when ``A`` is a non-zero multiple of ``B``.

    Raises
    ------
    ValueError
        Non-finite input, non-square or mismatched shapes, or ``B = 0``.
    """
    A, B = _pair(A, B)
    cos = _cosine(A, B)
    # the residual b̂ − cos·â directly (accurate for small distances, unlike sqrt(1 − cos²))
    a = _unit(A)
    b = _unit(B)
    r = b - cos[..., None, None] * a
    return _out(np.clip(np.sqrt(np.sum(r * r, axis=(-2, -1))), 0.0, 1.0))
