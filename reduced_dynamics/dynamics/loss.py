r"""Vectorised numerics of the approximate loss :math:`\tilde L(\omega, \mu)`.

The approximate (large-L) risk of the reduced H-head model is (docs/theory.md#reduced-model)

.. math::

    \tilde L(\omega, \mu) = 1 + \sigma^2 - 2\mu^\top\omega
        + \mu^\top\big(\omega\omega^\top + c\, e^{\circ d\,\omega\omega^\top}\big)\mu,
    \qquad c = (1 + \sigma^2)/L .

Every function accepts a single state (``omega`` of shape ``(H,)``) or a batch
(shape ``(..., H)``) and broadcasts over the leading axes. The formulas of the
gradient and Hessian are written out by hand here; :mod:`reduced_dynamics.derive.symbolic`
derives the same quantities with sympy and the tests compare the two routes and
central finite differences.

``exp(d ω_h ω_k)`` overflows float64 once ``d ω_h ω_k`` exceeds ~709. Every
function checks the exponent first and raises :class:`LossOverflowError` (an
``OverflowError``) with the offending value, never returning NaN or inf.
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics._validation import check_heads_pair, check_problem

__all__ = [
    "MAX_EXPONENT",
    "LossOverflowError",
    "max_exponent",
    "approx_loss",
    "approx_loss_grad",
    "approx_loss_hessian",
]

#: Largest allowed value of ``d * max_{h,k} ω_h ω_k``; beyond it exp() is too close to float64 overflow.
MAX_EXPONENT = 600.0


class LossOverflowError(OverflowError):
    """``exp(d ω ωᵀ)`` would overflow float64 (the state left the overflow-safe region)."""


def max_exponent(omega, d) -> np.ndarray:
    """Return ``d * max_h ω_h²``, the largest entry of ``d ω ωᵀ`` (per batch element).

    Parameters
    ----------
    omega : array_like, shape (..., H)
    d : int

    Returns
    -------
    ndarray, shape (...)
    """
    omega = np.asarray(omega, dtype=np.float64)
    return d * np.max(omega * omega, axis=-1)


def _prepare(omega, mu, d, L, sigma2):
    d, L, sigma2 = check_problem(d, L, sigma2)
    omega, mu = check_heads_pair(omega, mu)
    worst = float(np.max(max_exponent(omega, d)))
    if worst > MAX_EXPONENT:
        raise LossOverflowError(
            f"exp(d·ω_h·ω_k) overflows: d·max(ω²) = {worst:.4g} exceeds {MAX_EXPONENT:g} "
            f"(|ω| ≤ {np.sqrt(MAX_EXPONENT / d):.4g} at d = {d}); reduce |omega| or d"
        )
    c = (1.0 + sigma2) / L
    E = np.exp(d * omega[..., :, None] * omega[..., None, :])
    return omega, mu, d, c, sigma2, E


def _finite(name: str, *arrays):
    for a in arrays:
        if not np.all(np.isfinite(a)):
            raise LossOverflowError(
                f"{name} is not finite: |mu| or exp(d ω ωᵀ) too large for float64; reduce |mu| or |omega|"
            )


def approx_loss(omega, mu, *, d, L, sigma2):
    r"""Approximate loss :math:`\tilde L(\omega, \mu)` (docs/theory.md#reduced-model).

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        KQ scales and OV values of the H heads (a single state or a batch).
    d : int
        Covariate dimension, ``d >= 1``.
    L : int
        Prompt length, ``L >= 1``.
    sigma2 : float
        Noise variance, ``sigma2 >= 0``.

    Returns
    -------
    float or ndarray, shape (...)
        ``σ² + (1 − μᵀω)² + c μᵀ exp∘(d ωωᵀ) μ`` with ``c = (1+σ²)/L``.

    Raises
    ------
    ValueError
        Invalid ``d``, ``L``, ``sigma2`` or shapes / non-finite state.
    LossOverflowError
        ``d · max ω²`` exceeds :data:`MAX_EXPONENT`.

    Examples
    --------
    >>> from reduced_dynamics import approx_loss
    >>> round(approx_loss([0.0], [0.0], d=5, L=40, sigma2=0.1), 12)
    1.1
    """
    omega, mu, d, c, sigma2, E = _prepare(omega, mu, d, L, sigma2)
    with np.errstate(over="ignore", invalid="ignore"):
        u = np.sum(mu * omega, axis=-1)
        quad = np.einsum("...h,...hk,...k->...", mu, E, mu)
        out = sigma2 + (1.0 - u) ** 2 + c * quad
    _finite("approx_loss", out)
    return float(out) if np.ndim(out) == 0 else out


def approx_loss_grad(omega, mu, *, d, L, sigma2):
    r"""Gradient of :math:`\tilde L` with respect to ``omega`` and ``mu``.

    With :math:`u = \mu^\top\omega`, :math:`E = e^{\circ d\omega\omega^\top}` and
    :math:`g = E(\mu\circ\omega)`:

    .. math::

        \nabla_\omega \tilde L = 2\mu\circ\big(u - 1 + c\,d\,g\big), \qquad
        \nabla_\mu \tilde L = 2\big((u - 1)\,\omega + c\,E\mu\big).

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
    d, L, sigma2 : see :func:`approx_loss`

    Returns
    -------
    grad_omega, grad_mu : ndarray, shape (..., H)
    """
    omega, mu, d, c, _, E = _prepare(omega, mu, d, L, sigma2)
    with np.errstate(over="ignore", invalid="ignore"):
        u = np.sum(mu * omega, axis=-1)[..., None]
        g = np.einsum("...hk,...k->...h", E, mu * omega)
        Emu = np.einsum("...hk,...k->...h", E, mu)
        grad_omega = 2.0 * mu * (u - 1.0 + c * d * g)
        grad_mu = 2.0 * ((u - 1.0) * omega + c * Emu)
    _finite("approx_loss_grad", grad_omega, grad_mu)
    return grad_omega, grad_mu


def approx_loss_hessian(omega, mu, *, d, L, sigma2):
    r"""Hessian of :math:`\tilde L` in the stacked coordinates ``θ = (ω, μ)``.

    Blocks (indices i, j over heads; :math:`u, E, g` as in :func:`approx_loss_grad`):

    .. math::

        H_{\omega_i\omega_j} &= 2\mu_i\mu_j + 2cd\,\mu_i\mu_j E_{ij}(1 + d\,\omega_i\omega_j)
            + 2cd^2\,\delta_{ij}\,\mu_i \textstyle\sum_k E_{ik}\mu_k\omega_k^2 \\
        H_{\omega_j\mu_i} &= 2\delta_{ij}(u - 1 + cd\,g_j) + 2\omega_i\mu_j
            + 2cd\,\mu_j E_{ji}\omega_i \\
        H_{\mu_i\mu_j} &= 2\omega_i\omega_j + 2c E_{ij}

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
    d, L, sigma2 : see :func:`approx_loss`

    Returns
    -------
    ndarray, shape (..., 2H, 2H)
        Symmetric; rows/columns ordered ``(ω_1..ω_H, μ_1..μ_H)``.
    """
    omega, mu, d, c, _, E = _prepare(omega, mu, d, L, sigma2)
    H = omega.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):  # reported by _finite below
        u = np.sum(mu * omega, axis=-1)[..., None]
        g = np.einsum("...hk,...k->...h", E, mu * omega)
        s2 = np.einsum("...hk,...k->...h", E, mu * omega * omega)
        eye = np.eye(H)
        mm = mu[..., :, None] * mu[..., None, :]
        ww = omega[..., :, None] * omega[..., None, :]
        h_ww = 2.0 * mm + 2.0 * c * d * mm * E * (1.0 + d * ww) + 2.0 * c * d * d * eye * (mu * s2)[..., :, None]
        # h_wm[j, i] = d² L / dω_j dμ_i
        h_wm = (
            2.0 * eye * (u - 1.0 + c * d * g)[..., :, None]
            + 2.0 * mu[..., :, None] * omega[..., None, :]
            + 2.0 * c * d * mu[..., :, None] * E * omega[..., None, :]
        )
        h_mm = 2.0 * ww + 2.0 * c * E
        top = np.concatenate([h_ww, h_wm], axis=-1)
        bottom = np.concatenate([np.swapaxes(h_wm, -1, -2), h_mm], axis=-1)
        out = np.concatenate([top, bottom], axis=-2)
    _finite("approx_loss_hessian", out)
    return out
