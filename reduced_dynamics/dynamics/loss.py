r"""Vectorised numerics of the approximate loss :math:`\tilde L(\omega, \mu)`.

The approximate (large-L) risk of the reduced H-head model is (docs/theory.md#approximate-loss)

.. math::

    \tilde L(\omega, \mu) = 1 + \sigma^2 - 2\mu^\top\omega
        + \mu^\top\big(\omega\omega^\top + c\, e^{\circ d\,\omega\omega^\top}\big)\mu,
    \qquad c = (1 + \sigma^2)/L .

Every function takes the state ``omega, mu`` (arrays of shape ``(..., H)``:
the last axis is the head axis, the leading axes are batch axes) and the data
model as a :class:`~reduced_dynamics.setting.Setting`. ``omega`` and ``mu``
broadcast against each other over the leading axes (numpy rules; the head axis
itself must have the same length H in both), and the leading axes also
broadcast against the shape of an array-valued setting. A scalar result comes
back as a Python ``float``.

The formulas of the gradient and Hessian are written out by hand here;
:mod:`reduced_dynamics.derive.symbolic` derives the same quantities with sympy
and the tests compare the two routes and central finite differences.

``exp(d ω_h ω_k)`` overflows float64 once ``d ω_h ω_k`` exceeds ~709. Every
function checks the exponent first and raises :class:`LossOverflowError` (an
``OverflowError``) with the offending value, never returning NaN or inf.

References
----------
docs/theory.md#approximate-loss, docs/theory.md#reduced-model
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_positive_float
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "MAX_EXPONENT",
    "LossOverflowError",
    "LossGradient",
    "max_exponent",
    "approx_loss",
    "approx_loss_grad",
    "approx_loss_hessian",
    "optimal_mu",
]

#: Largest allowed value of ``d * max_{h,k} ω_h ω_k``; beyond it exp() is too close to float64 overflow.
MAX_EXPONENT = 600.0


class LossOverflowError(OverflowError):
    """``exp(d ω ωᵀ)`` would overflow float64 (the state left the overflow-safe region)."""


@dataclass(frozen=True)
class LossGradient(FrozenResult):
    r"""Gradient of a loss of the reduced model, split into its ω and μ parts.

    Returned by :func:`approx_loss_grad` and
    :func:`reduced_dynamics.dynamics.corrected_loss.corrected_loss_grad`.

    Attributes
    ----------
    omega : ndarray, shape (..., H)
        :math:`\nabla_\omega` of the loss (read-only).
    mu : ndarray, shape (..., H)
        :math:`\nabla_\mu` of the loss (read-only).

    Notes
    -----
    :attr:`theta` stacks the two parts in the coordinate order of the Hessian
    (``θ = (ω_1..ω_H, μ_1..μ_H)``); :attr:`norm` is the Euclidean norm of the
    full gradient per batch element.
    """

    omega: np.ndarray
    mu: np.ndarray

    @property
    def theta(self) -> np.ndarray:
        """The full gradient in ``θ = (ω, μ)`` order, shape ``(..., 2H)``."""
        return np.concatenate([self.omega, self.mu], axis=-1)

    @property
    def norm(self):
        """Euclidean norm of the full gradient, shape ``(...)`` (a float for a single state)."""
        out = np.sqrt(np.sum(self.omega**2, axis=-1) + np.sum(self.mu**2, axis=-1))
        return float(out) if np.ndim(out) == 0 else out


def max_exponent(omega, setting) -> np.ndarray:
    """Return ``d * max_h ω_h²``, the largest entry of ``d ω ωᵀ`` (per batch element).

    Parameters
    ----------
    omega : array_like, shape (..., H)
    setting : Setting
        Only ``setting.d`` is used (it may be an array broadcasting against the leading axes).

    Returns
    -------
    ndarray, shape (...)

    Raises
    ------
    LossOverflowError
        ``d · max ω²`` overflows float64.
    """
    setting = as_setting(setting)
    omega = check_finite_array("omega", omega, min_ndim=1)
    with np.errstate(over="ignore"):
        out = np.asarray(setting.d) * np.max(omega * omega, axis=-1)
    if not np.all(np.isfinite(out)):
        raise LossOverflowError("`omega` is too large: d·max(ω²) overflows float64")
    return out


def _state_pair(omega, mu, names=("omega", "mu")) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``omega, mu`` of shape ``(..., H)`` (same H) and broadcast their leading axes."""
    a, b = names
    omega = check_finite_array(a, omega, min_ndim=1)
    mu = check_finite_array(b, mu, min_ndim=1)
    if omega.shape[-1] != mu.shape[-1]:
        raise ValueError(
            f"`{a}` and `{b}` must have the same number of heads H (last axis), got shapes {omega.shape} and {mu.shape}"
        )
    try:
        omega, mu = np.broadcast_arrays(omega, mu)
    except ValueError:
        raise ValueError(
            f"`{a}` and `{b}` must broadcast together over their leading (batch) axes, "
            f"got shapes {omega.shape} and {mu.shape}"
        ) from None
    return omega, mu


def _constants(setting: Setting, batch: tuple[int, ...], where: str):
    """``(d, c, sigma2)`` as float arrays broadcast to ``batch`` (the state's and the setting's batch shape)."""
    setting.require_isotropic(where).require_softmax(where)
    d = np.broadcast_to(np.asarray(setting.d, dtype=np.float64), batch)
    c = np.broadcast_to(np.asarray(setting.c, dtype=np.float64), batch)
    s2 = np.broadcast_to(np.asarray(setting.sigma2, dtype=np.float64), batch)
    return d, c, s2


def _prepare(omega, mu, setting, where):
    """Validated, broadcast state and constants, ``E = exp∘(d ωωᵀ)``; raises LossOverflowError first."""
    setting = as_setting(setting)
    omega, mu = _state_pair(omega, mu)
    try:
        batch = np.broadcast_shapes(omega.shape[:-1], setting.shape)
    except ValueError:
        raise ValueError(
            f"the leading axes of `omega` (shape {omega.shape}) must broadcast against the shape "
            f"{setting.shape} of the array-valued `setting`"
        ) from None
    H = omega.shape[-1]
    omega = np.broadcast_to(omega, batch + (H,))
    mu = np.broadcast_to(mu, batch + (H,))
    d, c, s2 = _constants(setting, batch, where)
    with np.errstate(over="ignore"):  # an overflow gives inf, caught by the cap below
        expo = d * np.max(omega * omega, axis=-1)
    worst = float(np.max(expo))
    if worst > MAX_EXPONENT:
        dmax = float(np.max(d))
        raise LossOverflowError(
            f"exp(d·ω_h·ω_k) overflows: d·max(ω²) = {worst:.4g} exceeds {MAX_EXPONENT:g} "
            f"(|ω| ≤ {np.sqrt(MAX_EXPONENT / dmax):.4g} at d = {dmax:g}); reduce |omega| or d"
        )
    E = np.exp(d[..., None, None] * omega[..., :, None] * omega[..., None, :])
    return omega, mu, d, c, s2, E


def _finite(name: str, *arrays):
    for a in arrays:
        if not np.all(np.isfinite(a)):
            raise LossOverflowError(
                f"{name} is not finite: |mu| or exp(d ω ωᵀ) too large for float64; reduce |mu| or |omega|"
            )


def _out(arr):
    arr = np.asarray(arr)
    return float(arr) if arr.ndim == 0 else arr


def _loss_values(omega, mu, c, s2, E):
    with np.errstate(over="ignore", invalid="ignore"):
        u = np.sum(mu * omega, axis=-1)
        quad = np.einsum("...h,...hk,...k->...", mu, E, mu)
        out = s2 + (1.0 - u) ** 2 + c * quad
    _finite("approx_loss", out)
    return out


def _grad_arrays(omega, mu, d, c, E):
    with np.errstate(over="ignore", invalid="ignore"):
        u = np.sum(mu * omega, axis=-1)[..., None]
        g = np.einsum("...hk,...k->...h", E, mu * omega)
        Emu = np.einsum("...hk,...k->...h", E, mu)
        grad_omega = 2.0 * mu * (u - 1.0 + (c * d)[..., None] * g)
        grad_mu = 2.0 * ((u - 1.0) * omega + c[..., None] * Emu)
    _finite("approx_loss_grad", grad_omega, grad_mu)
    return grad_omega, grad_mu


def approx_loss(omega, mu, setting):
    r"""Approximate loss :math:`\tilde L(\omega, \mu)` (docs/theory.md#approximate-loss).

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        KQ scales and OV values of the H heads (a single state or a batch).
        The leading axes broadcast against each other and against
        ``setting.shape``; the head axis must have the same length in both.
    setting : Setting
        The data model (``d``, ``L``, ``sigma2``; isotropic covariates).

    Returns
    -------
    float or ndarray, shape (...)
        ``σ² + (1 − μᵀω)² + c μᵀ exp∘(d ωωᵀ) μ`` with ``c = (1+σ²)/L``; a float
        for a single state and a scalar setting.

    Raises
    ------
    ValueError
        Shapes that do not broadcast, a non-finite state, ``setting`` not a
        :class:`Setting` or with ``Sigma`` set.
    LossOverflowError
        ``d · max ω²`` exceeds :data:`MAX_EXPONENT`.

    Examples
    --------
    >>> from reduced_dynamics import approx_loss
    >>> from reduced_dynamics.setting import Setting
    >>> round(approx_loss([0.0], [0.0], Setting(d=5, L=40, sigma2=0.1)), 12)
    1.1
    """
    omega, mu, _, c, s2, E = _prepare(omega, mu, setting, "approx_loss")
    return _out(_loss_values(omega, mu, c, s2, E))


def approx_loss_grad(omega, mu, setting) -> LossGradient:
    r"""Gradient of :math:`\tilde L` with respect to ``omega`` and ``mu``.

    With :math:`u = \mu^\top\omega`, :math:`E = e^{\circ d\omega\omega^\top}` and
    :math:`g = E(\mu\circ\omega)`:

    .. math::

        \nabla_\omega \tilde L = 2\mu\circ\big(u - 1 + c\,d\,g\big), \qquad
        \nabla_\mu \tilde L = 2\big((u - 1)\,\omega + c\,E\mu\big).

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        Broadcast as in :func:`approx_loss`.
    setting : Setting

    Returns
    -------
    LossGradient
        ``.omega`` and ``.mu``, each of the broadcast shape ``(..., H)``.

    References
    ----------
    docs/theory.md#approximate-loss
    """
    omega, mu, d, c, _, E = _prepare(omega, mu, setting, "approx_loss_grad")
    gw, gm = _grad_arrays(omega, mu, d, c, E)
    return LossGradient(omega=gw, mu=gm)


def approx_loss_hessian(omega, mu, setting):
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
        Broadcast as in :func:`approx_loss`.
    setting : Setting

    Returns
    -------
    ndarray, shape (..., 2H, 2H)
        Symmetric; rows/columns ordered ``(ω_1..ω_H, μ_1..μ_H)``.

    References
    ----------
    docs/theory.md#approximate-loss
    """
    omega, mu, d, c, _, E = _prepare(omega, mu, setting, "approx_loss_hessian")
    return _hessian_arrays(omega, mu, d, c, E)


def _hessian_arrays(omega, mu, d, c, E):
    H = omega.shape[-1]
    cd = (c * d)[..., None, None]
    dd = d[..., None, None]
    with np.errstate(over="ignore", invalid="ignore"):  # reported by _finite below
        u = np.sum(mu * omega, axis=-1)[..., None]
        g = np.einsum("...hk,...k->...h", E, mu * omega)
        s2 = np.einsum("...hk,...k->...h", E, mu * omega * omega)
        eye = np.eye(H)
        mm = mu[..., :, None] * mu[..., None, :]
        ww = omega[..., :, None] * omega[..., None, :]
        h_ww = 2.0 * mm + 2.0 * cd * mm * E * (1.0 + dd * ww) + 2.0 * cd * dd * eye * (mu * s2)[..., :, None]
        # h_wm[j, i] = d² L / dω_j dμ_i
        h_wm = (
            2.0 * eye * (u - 1.0 + (c * d)[..., None] * g)[..., :, None]
            + 2.0 * mu[..., :, None] * omega[..., None, :]
            + 2.0 * cd * mu[..., :, None] * E * omega[..., None, :]
        )
        h_mm = 2.0 * ww + 2.0 * c[..., None, None] * E
        top = np.concatenate([h_ww, h_wm], axis=-1)
        bottom = np.concatenate([np.swapaxes(h_wm, -1, -2), h_mm], axis=-1)
        out = np.concatenate([top, bottom], axis=-2)
    _finite("approx_loss_hessian", out)
    return out


def optimal_mu(omega, setting, *, rcond=1e-12):
    r"""Minimiser of :math:`\tilde L(\omega, \cdot)` over μ at fixed ω (least-norm when not unique).

    :math:`\tilde L` is quadratic in μ: :math:`\tilde L = 1 + \sigma^2 - 2\mu^\top\omega + \mu^\top A\mu`
    with :math:`A = \omega\omega^\top + c\,e^{\circ d\omega\omega^\top}` (positive
    semi-definite: a Gram matrix plus c times a Schur product of PSD matrices). The
    minimisers solve :math:`A\mu = \omega`; since :math:`\omega \in \operatorname{range}(A)`
    a minimiser always exists, and this function returns
    :math:`\mu^* = A^+\omega`, the minimiser of least Euclidean norm
    (:math:`A^{-1}\omega` when A is invertible).

    **Singular A.** A is singular when two heads share the same ω (their rows of
    A coincide), e.g. on the solution manifold S_γ with H >= 3 heads, where all
    positive heads have ``ω_h = γ``: then only the total OV mass of each group of
    equal heads is determined, and the least-norm minimiser splits it equally
    among the group (for ``ω = (γ, γ, −γ)``: ``μ* = (μ_γ/2, μ_γ/2, −μ_γ)``).
    Numerically, eigenvalues of A below ``rcond · λ_max(A)`` are treated as 0.

    Parameters
    ----------
    omega : array_like, shape (..., H)
        KQ scales; leading axes are batch axes (broadcast against ``setting.shape``).
    setting : Setting
    rcond : float, > 0
        Relative cut-off of the pseudo-inverse (default ``1e-12``).

    Returns
    -------
    ndarray, shape (..., H)
        The least-norm minimiser μ* for each batch element.

    Raises
    ------
    LossOverflowError
        ``d · max ω²`` exceeds :data:`MAX_EXPONENT`.

    References
    ----------
    docs/theory.md#approximate-loss, docs/theory.md#solution-manifold

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> s = Setting(d=5, L=40, sigma2=0.1)
    >>> optimal_mu([0.1, -0.1], s).round(4)
    array([ 4.3954, -4.3954])
    """
    rcond = check_positive_float("rcond", rcond)
    omega = check_finite_array("omega", omega, min_ndim=1)
    omega, _, _, c, _, E = _prepare(omega, omega, setting, "optimal_mu")
    A = omega[..., :, None] * omega[..., None, :] + c[..., None, None] * E
    lam, V = np.linalg.eigh(A)
    cut = rcond * np.max(np.abs(lam), axis=-1, keepdims=True)
    inv = np.where(lam > cut, 1.0 / np.where(lam > cut, lam, 1.0), 0.0)
    coef = np.einsum("...kh,...k->...h", V, omega) * inv  # Vᵀω scaled by 1/λ
    return np.einsum("...hk,...k->...h", V, coef)
