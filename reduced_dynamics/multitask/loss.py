r"""Approximate loss of the multi-task reduced model, its gradient, and its small-ω limit.

State: per head :math:`h` a KQ weight per feature, :math:`\omega^{(h)} \in \mathbb R^d`
(the KQ top block is :math:`\operatorname{diag}(\omega^{(h)})`), and an OV weight per
task, :math:`\mu^{(h)} \in \mathbb R^N`. Arrays: ``omega`` of shape ``(..., H, d)``
(:math:`\Omega`), ``mu`` of shape ``(..., H, N)`` (:math:`M`); leading axes are batch axes.
The prediction for task :math:`n` is

.. math::
    \hat y_n = \sum_h \mu^{(h)}_n \sum_l y_{l,n}
    \operatorname{softmax}_l\big(x_l^\top \operatorname{diag}(\omega^{(h)}) x_q\big).

With :math:`a_{nj} = \sum_h \mu^{(h)}_n \omega^{(h)}_j` (:math:`A = M^\top\Omega`, shape
``(N, d)``), :math:`K = e^{\circ\,\Omega\Omega^\top}` and :math:`c = (1+\sigma^2)/L`, the
approximate loss (derived in :mod:`reduced_dynamics.multitask.derive`) is the sum of the
per-task losses

.. math::
    \tilde L_n = \sigma^2 + \frac{1}{|S_n|}\sum_{j\in S_n}(1 - a_{nj})^2
    + c\, \mu_n^\top K \mu_n .

For :math:`N = 1`, :math:`S_1 = \{1..d\}` and :math:`\omega^{(h)}_j = \omega_h` for all
:math:`j` this is :math:`\tilde L` of docs/theory.md#approximate-loss.

References
----------
docs/theory.md#extensions
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "support_mask",
    "check_state",
    "effective_weights",
    "mt_loss",
    "mt_loss_per_task",
    "mt_gradient",
    "limit_loss_per_task",
    "GradientPair",
]

#: |Ω Ωᵀ| above this overflows exp in float64
_EXP_MAX = 700.0


@dataclasses.dataclass(frozen=True)
class GradientPair(FrozenResult):
    """Gradient of the multi-task loss.

    Attributes
    ----------
    omega : ndarray, shape (..., H, d)
    mu : ndarray, shape (..., H, N)
    """

    omega: np.ndarray
    mu: np.ndarray


def support_mask(setting: Setting) -> np.ndarray:
    """Indicator of the supports: shape ``(N, d)``, ``mask[n, j] = 1`` when feature ``j`` is in ``S_n``.

    Parameters
    ----------
    setting : Setting
        Scalar; its ``supports`` (the single task on all features when ``tasks`` is None).

    Returns
    -------
    ndarray, shape (N, d)
    """
    setting = as_setting(setting, "support_mask")
    m = np.zeros((setting.n_tasks, setting.d))
    for n, s in enumerate(setting.supports):
        m[n, list(s)] = 1.0
    m.setflags(write=False)
    return m


def check_state(omega, mu, setting: Setting) -> tuple[np.ndarray, np.ndarray]:
    """Validate a multi-task state: ``omega`` (..., H, d) and ``mu`` (..., H, N), finite, same H and batch shape.

    Returns
    -------
    omega, mu : ndarray
    """
    setting = as_setting(setting, "the multi-task reduced model").require_softmax("the multi-task reduced model")
    if setting.Sigma is not None:
        # the isotropic multi-task loss would silently ignore Σ: the model with both is its own
        raise ValueError(
            "`setting.Sigma` is not part of the isotropic multi-task loss; the model with Σ and tasks is "
            "reduced_model(setting, n_heads=H) (reduced_dynamics.multitask.sigma_loss)"
        )
    omega = check_finite_array("omega", omega, min_ndim=2)
    mu = check_finite_array("mu", mu, min_ndim=2)
    d, N = setting.d, setting.n_tasks
    if omega.shape[-1] != d:
        raise ValueError(f"`omega` must have shape (..., H, d) with d = {d}, got {omega.shape}")
    if mu.shape[-1] != N:
        raise ValueError(f"`mu` must have shape (..., H, N) with N = {N} tasks, got {mu.shape}")
    if omega.shape[:-1] != mu.shape[:-1]:
        raise ValueError(f"`omega` and `mu` must have the same (..., H), got {omega.shape} and {mu.shape}")
    return omega, mu


def effective_weights(omega, mu, setting: Setting) -> np.ndarray:
    r"""Per-task, per-feature effective steps :math:`A = M^\top\Omega`, shape ``(..., N, d)``.

    :math:`a_{nj} = \sum_h \mu^{(h)}_n\omega^{(h)}_j`: in the small-ω limit the reduced model
    predicts task ``n`` as the weighted debiased GD
    :math:`\frac1L\sum_l y_{l,n}(x_l - \bar x)^\top\operatorname{diag}(a_n)x_q` (when
    :math:`\sum_h\mu^{(h)}_n = 0`).
    """
    omega, mu = check_state(omega, mu, setting)
    return np.swapaxes(mu, -1, -2) @ omega


def _kernel(omega):
    G = omega @ np.swapaxes(omega, -1, -2)
    if np.any(G > _EXP_MAX):
        raise ValueError("`omega` is too large: exp(ω⁽ʰ⁾·ω⁽ᵏ⁾) overflows float64 (need ω⁽ʰ⁾·ω⁽ᵏ⁾ <= 700)")
    return np.exp(G)


def mt_loss_per_task(omega, mu, setting: Setting) -> np.ndarray:
    r"""Per-task approximate losses :math:`\tilde L_n`, shape ``(..., N)``.

    Parameters
    ----------
    omega : array_like, shape (..., H, d)
    mu : array_like, shape (..., H, N)
    setting : Setting
        Scalar, with ``tasks`` (or the single task).

    Returns
    -------
    ndarray, shape (..., N)
    """
    omega, mu = check_state(omega, mu, setting)
    mask = support_mask(setting)
    size = mask.sum(axis=1)
    A = np.swapaxes(mu, -1, -2) @ omega
    bias = ((1.0 - A) ** 2 * mask).sum(axis=-1) / size
    K = _kernel(omega)
    fluct = np.einsum("...hn,...hk,...kn->...n", mu, K, mu)
    out = setting.sigma2 + bias + setting.c * fluct
    if not np.all(np.isfinite(out)):
        raise ValueError("`mu` is too large: the loss overflows float64")
    return out


def mt_loss(omega, mu, setting: Setting):
    r"""Approximate multi-task loss :math:`\tilde L = \sum_n \tilde L_n`; float or shape ``(...)``.

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics import Setting
    >>> s = Setting.paper_multitask()
    >>> round(mt_loss(np.zeros((2, 6)), np.zeros((2, 2)), s), 12)  # two tasks at 1 + σ² each
    2.2
    """
    out = mt_loss_per_task(omega, mu, setting).sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def mt_gradient(omega, mu, setting: Setting) -> tuple[np.ndarray, np.ndarray]:
    r"""Gradient of :func:`mt_loss`: ``(dL/dω, dL/dμ)`` of shapes ``(..., H, d)`` and ``(..., H, N)``.

    With :math:`R_{nj} = -\tfrac{2}{|S_n|}(1 - a_{nj})[j\in S_n]` and :math:`P = MM^\top`:
    :math:`\partial_\Omega = MR + 2c(P\circ K)\Omega`, :math:`\partial_M = \Omega R^\top + 2cKM`
    (checked against the sympy derivation and finite differences in the tests).

    Returns
    -------
    GradientPair
        Fields ``omega`` and ``mu``.
    """
    omega, mu = check_state(omega, mu, setting)
    mask = support_mask(setting)
    g_omega, g_mu = _gradient_parts(omega, mu, mask, mask.sum(axis=1), setting.c)
    return GradientPair(omega=g_omega, mu=g_mu)


def _gradient_parts(omega, mu, mask, size, c):
    """``(dL/dω, dL/dμ)`` of a checked state (:func:`mt_gradient`; the integrator's kernel calls it directly)."""
    A = np.swapaxes(mu, -1, -2) @ omega
    R = -2.0 * (1.0 - A) * mask / size[:, None]
    K = _kernel(omega)
    P = mu @ np.swapaxes(mu, -1, -2)
    g_omega = mu @ R + 2.0 * c * (P * K) @ omega
    g_mu = omega @ np.swapaxes(R, -1, -2) + 2.0 * c * K @ mu
    return g_omega, g_mu


def limit_loss_per_task(A, setting: Setting) -> np.ndarray:
    r"""Small-ω limit of :math:`\tilde L_n` at fixed effective weights ``A`` (with :math:`\sum_h\mu^{(h)}_n = 0`).

    :math:`\sigma^2 + \frac1{|S_n|}\sum_{j\in S_n}(1-a_{nj})^2 + c\,|a_n|^2`; the higher
    Taylor terms of :math:`K` vanish as ω → 0 at fixed ``A``.

    Parameters
    ----------
    A : array_like, shape (..., N, d)
    setting : Setting

    Returns
    -------
    ndarray, shape (..., N)
    """
    setting = as_setting(setting, "limit_loss_per_task")
    A = check_finite_array("A", A, min_ndim=2)
    mask = support_mask(setting)
    if A.shape[-2:] != mask.shape:
        raise ValueError(f"`A` must have shape (..., N, d) = (..., {mask.shape[0]}, {mask.shape[1]}), got {A.shape}")
    size = mask.sum(axis=1)
    return setting.sigma2 + ((1.0 - A) ** 2 * mask).sum(axis=-1) / size + setting.c * (A**2).sum(axis=-1)
