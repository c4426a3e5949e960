r"""Exact large-L expansion of the risk of the reduced model, to order 1/L.

The reduced H-head model predicts :math:`\hat y = \sum_h \mu_h \sum_l y_l\,
\mathrm{softmax}_l(\omega_h x_l^\top x_q)` (docs/theory.md#reduced-model). For the isotropic
Gaussian model (``x ~ N(0, I_d)``, ``β ~ N(0, I/d)``, noise σ², noisy target)
its risk is

.. math::

    \mathcal E(\omega,\mu) = R_0(\omega,\mu) + R_1(\omega,\mu)/L + O(1/L^2),

    R_0 = \sigma^2 + (1 - u)^2, \qquad u = \mu^\top\omega,

    R_1 = 2(1-u)\sum_h \mu_h\omega_h\,(1-2\omega_h^2)^{-d/2-1}
        + \sum_{h,k}\mu_h\mu_k\Big[(1+\sigma^2)(1-2\omega_h\omega_k)^{-d/2}
        + \omega_h\omega_k\,(1-2\omega_h\omega_k)^{-d/2-1}\Big].

Derivation (per query; the README of the package and the report carry the details).
Given the covariates, β and ε integrate out:
:math:`E[(y_q-\hat y)^2\mid X,x_q] = \tfrac1d|x_q - \sum_h\mu_h A_h|^2 + \sigma^2(1+|w|^2)`
with :math:`A_h = N_h/D_h`, :math:`N_h = \tfrac1L\sum_l x_l e^{\omega_h s_l}`,
:math:`D_h = \tfrac1L\sum_l e^{\omega_h s_l}`, :math:`s_l = x_l^\top x_q`.
Condition on :math:`x_q` (:math:`r^2 = |x_q|^2`). With :math:`f_h = e^{\omega_h s}`,
:math:`m_h = E f_h = e^{\omega_h^2 r^2/2}` and the Gaussian tilt
:math:`E[x f_h] = \omega_h x_q m_h`:

* mean (tilt): :math:`A_h^0 = \omega_h x_q` -- linear in :math:`x_q`, so the
  O(1) part is :math:`\tfrac{r^2}{d}(1-u)^2` and averages to :math:`(1-u)^2`;
* self-normalisation bias (delta method, second order):
  :math:`E A_h - A_h^0 = (A_h^0\,\mathrm{Var}D_h - \mathrm{Cov}(N_h,D_h))/m_h^2
  = -\tfrac1L\,\omega_h x_q\, e^{\omega_h^2 r^2}`;
* covariance: :math:`\mathrm{tr\,Cov}(A_h,A_k) = \tfrac1L E[(x-A^0_h)^\top(x-A^0_k)f_hf_k]/(m_hm_k)
  = \tfrac1L (d + \omega_h\omega_k r^2)\, e^{\omega_h\omega_k r^2}` (the
  :math:`\omega_h\omega_k r^2` is the tilt of the response variance);
* noise: :math:`E|w|^2 = \tfrac1L \sum_{hk}\mu_h\mu_k e^{\omega_h\omega_k r^2} + O(L^{-2})`.

So, per query,
:math:`\mathcal E(r^2) = \sigma^2 + \tfrac{r^2}{d}(1-u)^2 + \tfrac1L\big[\tfrac{2}{d}(1-u)r^2
\sum_h\mu_h\omega_h e^{\omega_h^2 r^2} + \sum_{hk}\mu_h\mu_k e^{\omega_h\omega_k r^2}
(1+\sigma^2+\omega_h\omega_k r^2/d)\big]`, and :math:`r^2\sim\chi^2_d` is averaged
exactly with :math:`E e^{a r^2} = (1-2a)^{-d/2}`,
:math:`E[r^2 e^{a r^2}] = d(1-2a)^{-d/2-1}`.

Compared with :math:`\tilde L` (:mod:`reduced_dynamics.dynamics.loss`), which has
:math:`R_1 = (1+\sigma^2)\sum_{hk}\mu_h\mu_k e^{d\omega_h\omega_k}`: the χ²
average replaces :math:`e^{dx}` by :math:`(1-2x)^{-d/2}`, and the bias term and
the response-variance tilt are new.

Where it can be trusted (docs/theory.md#where-the-corrected-loss-holds). The
:math:`1/L` term needs :math:`2\max(\omega_h^2) < 1` (the χ² average of
:math:`e^{\omega^2 r^2}`; the code refuses :math:`\max\omega_h^2 \ge` :data:`MAX_OMEGA2`).
The remainder is :math:`O(L^{-2})` only for :math:`\max|\omega_h| < 1/\sqrt6 \approx 0.408`:
the next order contains :math:`E e^{3\omega s}/(E e^{\omega s})^3 = e^{3\omega^2 r^2}`, whose χ²
average diverges beyond. Measured against the exact evaluator
(:mod:`reduced_dynamics.exact.evaluator`; one head at :math:`\mu = 1/\omega`, d = 5,
σ² = 0.1) the error decays like :math:`L^{-2.00}` at ω = 0.2, and with local exponents
1.97, 1.87, 1.69, 1.50, 1.33, 1.19, 1.09, 1.02 at ω = 0.3, 0.35, ..., 0.65 (L = 10240 → 40960,
still rising with L; heuristic limit :math:`\min\{2, 1/2 + 1/(4\omega^2)\}`); at L = 40 it
is off by 0.012, 0.040, 0.14, 0.54 at ω = 0.2, 0.3, 0.4, 0.5. Use it for
:math:`|\omega_h| \lesssim 0.3` and L ≳ 640 (error ≲ 3e-4), not at the L = 40 single-head
optimum (ω = 0.518).

Gradient: analytic (:func:`corrected_loss_grad`), checked against central
differences in the tests. Hessian: central differences of the analytic
gradient (:func:`corrected_loss_hessian_fd`), used only as the Jacobian of
the stiff flow integrator.

Slow drift on the solution manifold (p positive, n negative heads, all
:math:`|\omega_h| = \gamma`, positive / negative OV mass :math:`\pm M`,
:math:`\eta = 2\gamma M`): at fixed η,

.. math::

    R_1 = [(1+\sigma^2)d + 1]\eta^2 + 2(1-\eta)\eta
          + a_2(\eta)\gamma^2 + a_4(\eta)\gamma^4 + O(\gamma^6),

    a_2 = 2(d+2)(1-\eta)\eta, \qquad
    a_4 = (d+2)(d+4)\Big[\eta^2\Big(\tfrac{(1+\sigma^2)d}{6} + \tfrac12\Big) + (1-\eta)\eta\Big].

The drift mechanism of :mod:`reduced_dynamics.dynamics.manifold` (γ stiff at fixed OV
mass, η in quasi-equilibrium) gives
:math:`\dot\gamma = -\tfrac{4pn}{H}\,\tfrac{1}{L\eta^2}\,(2a_2\gamma^5 + 4a_4\gamma^7)`
(for :math:`\tilde L`, :math:`a_2 = 0`, :math:`a_4 = c d^3 \eta^2 L/6`, which
reproduces :math:`\gamma = (16cd^3(pn/H)t)^{-1/6}`). The γ⁴ term alone gives
:math:`\gamma(t) = (K (pn/H) t)^{-1/6}` with
:math:`K = 96 a_4/(L\eta^2) = \tfrac{16}{L}(d+2)(d+4)[(1+\sigma^2)d + 3 + 6(1-\eta)/\eta]`.
The γ² term has coefficient :math:`\propto (1-\eta)/L`, which is O(1/L²) at the
quasi-equilibrium η; it is kept in :func:`corrected_drift_gamma` (the exact
solution of the two-term ODE) but, being of the order the expansion neglects,
it is *not* the true risk's γ² coefficient: the exact one
(:mod:`reduced_dynamics.exact.expansion`) is
:math:`A_2(\eta^*) = -4\eta^{*2}(L-1)(d+2)/L^3 < 0`, so the true drift stops at a
finite γ (docs/theory.md#exact-risk) while this flow drifts on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import (
    check_finite_array,
    check_finite_float,
    check_positive_float,
    check_positive_int,
)
from reduced_dynamics.dynamics.loss import LossGradient, LossOverflowError, _state_pair
from reduced_dynamics.setting import as_setting

__all__ = [
    "MAX_OMEGA2",
    "CorrectedLossTerms",
    "ManifoldCoefficients",
    "McRiskEstimates",
    "corrected_loss_terms",
    "corrected_loss",
    "corrected_loss_grad",
    "corrected_loss_hessian_fd",
    "corrected_eta_star",
    "corrected_manifold_coefficients",
    "corrected_drift_constant",
    "corrected_drift_gamma",
    "mc_risk_cv",
]

#: Largest ``setting.L`` of :func:`mc_risk_cv` (a chunk holds at least one prompt of L scores).
MC_L_MAX = 10**7

#: Largest allowed ``max_h ω_h²``: the χ² averages need ``1 − 2ω_hω_k > 0``; we keep a margin.
MAX_OMEGA2 = 0.45


def _scalar(setting, where):
    """``(d, L, sigma2)`` of a scalar, isotropic setting."""
    setting = as_setting(setting, where)
    setting.require_isotropic(where).require_softmax(where)
    return setting.d, setting.L, setting.sigma2


def _prepare(omega, mu, setting, where, names=("omega", "mu")):
    d, L, sigma2 = _scalar(setting, where)
    omega, mu = _state_pair(omega, mu, names)
    with np.errstate(over="ignore"):
        w2 = float(np.max(omega * omega)) if omega.size else 0.0
    if w2 >= MAX_OMEGA2:
        raise ValueError(
            f"`{names[0]}` must satisfy max ω_h² < {MAX_OMEGA2} (the expansion needs 1 − 2ω_hω_k > 0), "
            f"got max ω_h² = {w2:.4g}"
        )
    return omega, mu, d, L, sigma2


def _pieces(omega, mu, d, sigma2):
    W = omega[..., :, None] * omega[..., None, :]
    one = 1.0 - 2.0 * W
    P = one ** (-d / 2.0)  # E e^{x r²}
    Q = P / one  # (1-2x)^{-d/2-1} = E[r² e^{x r²}]/d
    G = (1.0 + sigma2) * P + W * Q  # pair kernel g(x)
    # g'(x) = (1+σ²) d Q + Q + x (d+2) Q/(1-2x)
    Gp = ((1.0 + sigma2) * d + 1.0) * Q + W * (d + 2.0) * Q / one
    w2 = omega * omega
    b = (1.0 - 2.0 * w2) ** (-d / 2.0 - 1.0)
    bp = 2.0 * (d + 2.0) * omega * (1.0 - 2.0 * w2) ** (-d / 2.0 - 2.0)  # db/dω
    return G, Gp, b, bp


def _guard(where, *arrays):
    """Raise LossOverflowError if a result is not finite (never return NaN/inf silently)."""
    for a in arrays:
        if not np.all(np.isfinite(a)):
            raise LossOverflowError(
                f"{where} is not finite in float64: `mu` too large, or (1 − 2ω_h²)^(−d/2) overflows "
                "for this `omega` and `setting.d`; reduce |mu|, |omega| or d"
            )


def _float_or_array(x):
    x = np.asarray(x)
    return float(x) if x.ndim == 0 else x


@dataclass(frozen=True)
class CorrectedLossTerms(FrozenResult):
    r"""The two terms of the expansion :math:`\mathcal E = R_0 + R_1/L + O(L^{-2})`.

    Attributes
    ----------
    R0 : float or ndarray, shape (...)
        :math:`R_0 = \sigma^2 + (1 - \mu^\top\omega)^2` (the L → ∞ risk).
    R1 : float or ndarray, shape (...)
        :math:`R_1`, the coefficient of :math:`1/L` (module docstring).
    """

    R0: float | np.ndarray
    R1: float | np.ndarray


def corrected_loss_terms(omega, mu, setting) -> CorrectedLossTerms:
    r"""The terms ``R0, R1`` of the expansion :math:`\mathcal E = R_0 + R_1/L + O(L^{-2})`.

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        Broadcast over their leading axes (same H); ``max ω_h² < MAX_OMEGA2``.
    setting : Setting
        Scalar and isotropic (``setting.L`` does not enter ``R0, R1``).

    Returns
    -------
    CorrectedLossTerms
        ``R0`` and ``R1``, floats for a single state, else arrays of shape ``(...)``.

    References
    ----------
    docs/theory.md#corrected-loss
    """
    omega, mu, d, _, sigma2 = _prepare(omega, mu, setting, "corrected_loss_terms")
    with np.errstate(all="ignore"):  # checked by _guard
        G, _, b, _ = _pieces(omega, mu, d, sigma2)
        u = np.sum(mu * omega, axis=-1)
        R0 = sigma2 + (1.0 - u) ** 2
        R1 = 2.0 * (1.0 - u) * np.sum(mu * omega * b, axis=-1) + np.einsum("...h,...hk,...k->...", mu, G, mu)
        total = R0 + R1 / setting.L
    _guard("corrected_loss_terms", R0, R1, total)
    return CorrectedLossTerms(R0=_float_or_array(R0), R1=_float_or_array(R1))


def corrected_loss(omega, mu, setting):
    r"""Risk of the reduced model to order 1/L: :math:`R_0 + R_1/L` (module docstring).

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        KQ scales and OV values, broadcast over their leading axes (same H);
        ``max ω_h² < MAX_OMEGA2``.
    setting : Setting
        Scalar and isotropic.

    Returns
    -------
    float or ndarray, shape (...)

    Raises
    ------
    ValueError
        Shapes, non-finite state, ``omega`` too large, or an array-valued / anisotropic setting.

    References
    ----------
    docs/theory.md#corrected-loss
    """
    terms = corrected_loss_terms(omega, mu, setting)
    return _float_or_array(np.asarray(terms.R0) + np.asarray(terms.R1) / setting.L)


def _corrected_grad_arrays(omega, mu, d, L, sigma2):
    with np.errstate(all="ignore"):  # checked by the callers (_guard)
        return _corrected_grad_raw(omega, mu, d, L, sigma2)


def _corrected_grad_raw(omega, mu, d, L, sigma2):
    G, Gp, b, bp = _pieces(omega, mu, d, sigma2)
    u = np.sum(mu * omega, axis=-1)[..., None]
    v = np.sum(mu * omega * b, axis=-1)[..., None]
    Gmu = np.einsum("...hk,...k->...h", G, mu)
    Gpmw = np.einsum("...hk,...k->...h", Gp, mu * omega)
    r1_mu = -2.0 * omega * v + 2.0 * (1.0 - u) * omega * b + 2.0 * Gmu
    r1_w = -2.0 * mu * v + 2.0 * (1.0 - u) * mu * (b + omega * bp) + 2.0 * mu * Gpmw
    grad_mu = -2.0 * (1.0 - u) * omega + r1_mu / L
    grad_w = -2.0 * (1.0 - u) * mu + r1_w / L
    return grad_w, grad_mu


def corrected_loss_grad(omega, mu, setting) -> LossGradient:
    r"""Analytic gradient of :func:`corrected_loss`.

    With :math:`u = \mu^\top\omega`, :math:`b_h = (1-2\omega_h^2)^{-d/2-1}`,
    :math:`v = \sum_h\mu_h\omega_h b_h`, :math:`g(x) = (1+\sigma^2)(1-2x)^{-d/2} + x(1-2x)^{-d/2-1}`:

    .. math::

        \partial_{\mu_j} = -2(1-u)\omega_j + \tfrac1L\big[-2\omega_j v + 2(1-u)\omega_j b_j
            + 2\textstyle\sum_k \mu_k g(\omega_j\omega_k)\big]

        \partial_{\omega_j} = -2(1-u)\mu_j + \tfrac1L\big[-2\mu_j v + 2(1-u)\mu_j(b_j + \omega_j b_j')
            + 2\mu_j \textstyle\sum_k \mu_k\omega_k g'(\omega_j\omega_k)\big]

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        Broadcast over their leading axes (same H).
    setting : Setting
        Scalar and isotropic.

    Returns
    -------
    LossGradient
        ``.omega`` and ``.mu``, each of the broadcast shape ``(..., H)``.

    References
    ----------
    docs/theory.md#corrected-loss
    """
    omega, mu, d, L, sigma2 = _prepare(omega, mu, setting, "corrected_loss_grad")
    gw, gm = _corrected_grad_arrays(omega, mu, d, L, sigma2)
    _guard("corrected_loss_grad", gw, gm)
    return LossGradient(omega=gw, mu=gm)


def corrected_loss_hessian_fd(omega, mu, setting, *, h=1e-6):
    """Hessian in ``θ = (ω, μ)`` by central differences of the analytic gradient (single state).

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
    setting : Setting
        Scalar and isotropic.
    h : float, in (0, 0.01]
        Relative step of the differences.

    Returns
    -------
    ndarray, shape (2H, 2H)
        Symmetrised.
    """
    omega, mu, d, L, sigma2 = _prepare(omega, mu, setting, "corrected_loss_hessian_fd")
    if omega.ndim != 1:
        raise ValueError(f"`omega` must have shape (H,) here, got {omega.shape}")
    h = check_positive_float("h", h)
    if h > 1e-2:
        raise ValueError(f"`h` must be a number in (0, 0.01], got {h!r}")
    with np.errstate(all="ignore"):
        out = _fd_hessian(omega, mu, d, L, sigma2, h)
    _guard("corrected_loss_hessian_fd", out)
    return out


def _fd_hessian(omega, mu, d, L, sigma2, h=1e-6):
    H = omega.size
    th = np.concatenate([omega, mu])
    out = np.empty((2 * H, 2 * H))
    for i in range(2 * H):
        step = h * max(1.0, abs(th[i]))
        tp, tm = th.copy(), th.copy()
        tp[i] += step
        tm[i] -= step
        gp = np.concatenate(_corrected_grad_arrays(tp[:H], tp[H:], d, L, sigma2))
        gm = np.concatenate(_corrected_grad_arrays(tm[:H], tm[H:], d, L, sigma2))
        out[:, i] = (gp - gm) / (2 * step)
    return 0.5 * (out + out.T)


# ----------------------------------------------------------- solution manifold


def corrected_eta_star(setting):
    r"""Minimiser over η of the γ → 0 limit :math:`\sigma^2 + (1-\eta)^2 + [((1+\sigma^2)d+1)\eta^2 + 2(1-\eta)\eta]/L`.

    :math:`\eta_c^* = (L-1)/(L-1+(1+\sigma^2)d)` (differs from η* = L/(L+(1+σ²)d) at O(1/L²),
    the order the expansion neglects).

    Parameters
    ----------
    setting : Setting
        May be array-valued (the result broadcasts).

    Returns
    -------
    float or ndarray, shape ``setting.shape``

    References
    ----------
    docs/theory.md#corrected-loss
    """
    setting = as_setting(setting)
    L = np.asarray(setting.L, dtype=np.float64)
    return _float_or_array((L - 1.0) / (L - 1.0 + (1.0 + np.asarray(setting.sigma2)) * np.asarray(setting.d)))


@dataclass(frozen=True)
class ManifoldCoefficients(FrozenResult):
    r"""Coefficients of :math:`R_1 = a_0 + a_2\gamma^2 + a_4\gamma^4 + O(\gamma^6)` on the manifold at fixed η.

    Attributes
    ----------
    a0 : float or ndarray
        :math:`[(1+\sigma^2)d+1]\eta^2 + 2(1-\eta)\eta`.
    a2 : float or ndarray
        :math:`2(d+2)(1-\eta)\eta`.
    a4 : float or ndarray
        :math:`(d+2)(d+4)[\eta^2((1+\sigma^2)d/6 + 1/2) + (1-\eta)\eta]`.

    Each has the broadcast shape of ``eta`` and ``setting.shape``.
    """

    a0: float | np.ndarray
    a2: float | np.ndarray
    a4: float | np.ndarray


def corrected_manifold_coefficients(eta, setting) -> ManifoldCoefficients:
    r"""Coefficients of :math:`R_1 = a_0 + a_2\gamma^2 + a_4\gamma^4 + O(\gamma^6)` on the manifold at fixed η.

    Parameters
    ----------
    eta : float or array_like
        Effective step :math:`\eta = 2\gamma M`.
    setting : Setting
        ``L`` does not enter; may be array-valued (the result broadcasts).

    Returns
    -------
    ManifoldCoefficients
        ``a0, a2, a4``.

    References
    ----------
    docs/theory.md#corrected-loss
    """
    setting = as_setting(setting)
    eta = check_finite_array("eta", eta)
    d = np.broadcast_to(np.asarray(setting.d, dtype=np.float64), setting.shape)
    s2 = np.broadcast_to(np.asarray(setting.sigma2, dtype=np.float64), setting.shape)
    try:
        np.broadcast_shapes(eta.shape, setting.shape)
    except ValueError:
        raise ValueError(
            f"`eta` (shape {eta.shape}) must broadcast against the shape {setting.shape} of `setting`"
        ) from None
    with np.errstate(all="ignore"):
        a0 = ((1 + s2) * d + 1) * eta**2 + 2 * (1 - eta) * eta
        a2 = 2 * (d + 2) * (1 - eta) * eta
        a4 = (d + 2) * (d + 4) * (eta**2 * ((1 + s2) * d / 6 + 0.5) + (1 - eta) * eta)
    if not all(np.all(np.isfinite(a)) for a in (a0, a2, a4)):
        raise ValueError(f"`eta` is too large: the coefficients overflow float64, got {eta!r}")
    return ManifoldCoefficients(a0=_float_or_array(a0), a2=_float_or_array(a2), a4=_float_or_array(a4))


def corrected_drift_constant(setting, *, eta=None):
    r"""Constant K of the γ⁴-driven drift :math:`\gamma(t) \approx (K\,(pn/H)\,t)^{-1/6}`.

    :math:`K = 96\,a_4/(L\eta^2)`, η defaulting to :func:`corrected_eta_star`;
    L̃'s analogue is :math:`16 c d^3`. Time as in :func:`reduced_dynamics.integrate`.

    Parameters
    ----------
    setting : Setting
        Scalar.
    eta : float in [1e-100, 1e100], optional
        Effective step; default :func:`corrected_eta_star`. It must give ``a4 > 0``.

    Returns
    -------
    float

    References
    ----------
    docs/theory.md#corrected-loss
    """
    d, L, sigma2 = _scalar(setting, "corrected_drift_constant")
    if L < 2:
        raise ValueError(f"`setting.L` must be >= 2 for the corrected drift law (η_c* = 0 at L = 1), got {L}")
    eta = corrected_eta_star(setting) if eta is None else check_finite_float("eta", eta)
    if not 1e-100 <= eta <= 1e100:
        raise ValueError(f"`eta` must be a number in [1e-100, 1e100] (an effective step), got {eta!r}")
    a4 = corrected_manifold_coefficients(eta, setting).a4
    out = 96.0 * a4 / (L * eta**2)
    if not (math.isfinite(out) and out > 0):
        raise ValueError(f"`eta` = {eta!r} gives no finite positive drift constant (need a4 > 0) in {setting!r}")
    return float(out)


def corrected_drift_gamma(t, setting, *, n_positive=1, n_negative=1, gamma0=None, t0=0.0, include_gamma2=True):
    r"""Drift law of the corrected flow along the solution manifold.

    Solves :math:`\dot\gamma = -\kappa(A\gamma^5 + B\gamma^7)`,
    :math:`\kappa = 4pn/H`, :math:`A = 2a_2/(L\eta^2)`, :math:`B = 4a_4/(L\eta^2)` at
    η = :func:`corrected_eta_star`. Without ``gamma0`` and with ``include_gamma2=False``
    this is :math:`\gamma = (K (pn/H) t)^{-1/6}`. With ``gamma0`` the solution starts at
    ``γ(t0) = gamma0`` (exact implicit solution, solved by bisection per time).

    Parameters
    ----------
    t : float or array_like, > t0 (or > 0 without gamma0)
        Flow time (as in :func:`reduced_dynamics.integrate`).
    setting : Setting
        Scalar.
    n_positive, n_negative : int, >= 1
    gamma0 : float in [1e-6, 1], optional
        γ at ``t0``.
    t0 : float
    include_gamma2 : bool
        Keep the (formally O(1/L²)) γ² term.

    Returns
    -------
    float or ndarray, like ``t``

    References
    ----------
    docs/theory.md#corrected-loss
    """
    d, L, sigma2 = _scalar(setting, "corrected_drift_gamma")
    if L < 2:
        raise ValueError(f"`setting.L` must be >= 2 for the corrected drift law (η_c* = 0 at L = 1), got {L}")
    from reduced_dynamics.dynamics.manifold import _head_counts  # shared validation of p, n

    p, n = _head_counts(n_positive, n_negative)
    t = check_finite_array("t", t)
    if t.size > 100_000:
        raise ValueError(f"`t` must have at most 100000 entries, got {t.size}")
    eta = corrected_eta_star(setting)
    coef = corrected_manifold_coefficients(eta, setting)
    a2, a4 = coef.a2, coef.a4
    kappa = 4.0 * p * n / (p + n)
    A = (2.0 * a2 / (L * eta**2)) if include_gamma2 else 0.0
    B = 4.0 * a4 / (L * eta**2)
    if gamma0 is None:
        if A != 0.0:
            raise ValueError("`gamma0` is required when include_gamma2=True (the two-term law has no universal origin)")
        if np.any(t <= 0):
            raise ValueError(f"`t` must be > 0, got {t!r}")
        with np.errstate(all="ignore"):
            out = (6.0 * kappa * B * t) ** (-1.0 / 6.0)
        if not np.all(np.isfinite(out)):
            raise ValueError(f"`t` is too small: γ(t) overflows float64, got {t!r}")
        return float(out) if out.ndim == 0 else out
    g0 = check_finite_float("gamma0", gamma0)
    if not 1e-6 <= g0 <= 1.0:
        raise ValueError(f"`gamma0` must be a number in [1e-06, 1] (a KQ scale on the manifold), got {gamma0!r}")
    t0 = check_finite_float("t0", t0)
    if np.any(t < t0):
        raise ValueError(f"`t` must be >= t0 = {t0}, got {t!r}")

    # time to go from g0 down to g: T(g) = ∫_g^{g0} dγ / (κ(Aγ⁵ + Bγ⁷)), closed form
    def F(g):  # antiderivative of 1/(Aγ⁵ + Bγ⁷) up to sign: ∫ dγ/(γ⁵(A + Bγ²))
        if A == 0.0:
            return -1.0 / (6.0 * B * g**6)
        # 1/(γ⁵(A+Bγ²)) = 1/(Aγ⁵) − B/(A²γ³) + B²/(A³γ) − B³γ/(A³(A+Bγ²))
        return (
            -1.0 / (4.0 * A * g**4)
            + B / (2.0 * A**2 * g**2)
            + (B**2 / A**3) * np.log(g)
            - (B**2 / (2.0 * A**3)) * np.log(A + B * g * g)
        )

    def elapsed(g):
        return (F(g0) - F(g)) / kappa

    res = []
    for tt in np.atleast_1d(t - t0):
        lo, hi = 1e-12 * g0, g0  # elapsed decreasing in g
        if tt == 0:
            res.append(g0)
            continue
        # bisection in log γ (robust; 200 iterations reach float precision)
        for _ in range(200):
            mid = np.sqrt(lo * hi)
            if elapsed(mid) > tt:
                lo = mid
            else:
                hi = mid
        res.append(np.sqrt(lo * hi))
    out = np.array(res).reshape(t.shape)
    return float(out) if out.ndim == 0 else out


# ------------------------------------------------- Monte Carlo verification


def _mc_chunk(rng, m, d, L, sigma2, states, cv):
    """Per-prompt conditional losses (and mean-zero control variates) of several states on one sample."""
    r2 = rng.chisquare(d, size=m)
    s = rng.standard_normal((m, L)) * np.sqrt(r2)[:, None]
    oms = sorted({o for w, _ in states for o in w})
    E, D, S, V1, V2 = {}, {}, {}, {}, {}
    for o in oms:
        e = np.exp(o * s - 0.5 * o * o * r2[:, None])  # mean 1 given |x_q|
        E[o] = e
        D[o] = e.mean(1)
        S[o] = (s * e).mean(1)
        V1[o] = D[o] - 1.0
        V2[o] = S[o] - o * r2 * D[o]
    pairs = {tuple(sorted((w[i], w[j]))) for w, _ in states for i in range(len(w)) for j in range(i, len(w))}
    P = {k: (E[k[0]] * E[k[1]]).mean(1) for k in pairs}
    del E
    out = []
    for w, mu in states:
        ws = sum(mm * S[o] / D[o] for o, mm in zip(w, mu))
        ww = 0.0
        for i in range(len(w)):
            for j in range(len(w)):
                ww = ww + mu[i] * mu[j] * P[tuple(sorted((w[i], w[j])))] / (L * D[w[i]] * D[w[j]])
        # conditional_loss for statistics-only Prompts (predictors.conditional_loss), written via per-head sums
        loss = (r2 - ws) ** 2 / (d * r2) + sigma2 + ((d - 1) / d + sigma2) * ww
        regs = []
        if cv:  # every regressor has conditional mean exactly 0 given |x_q|² (closed-form Gaussian moments)
            regs += [r2 - d, (r2 - d) ** 2 - 2 * d]
            uo = sorted(set(w))
            for o in uo:
                regs += [V1[o], V2[o], r2 * V1[o], r2 * V2[o]]
            for o1 in uo:
                for o2 in uo:
                    x = np.exp(o1 * o2 * r2)
                    regs.append(V1[o1] * V2[o2] - o1 * r2 * x / L)
                    regs.append(V1[o1] * x)
                    if o1 <= o2:
                        regs.append((V2[o1] * V2[o2] - (r2 + o1 * o2 * r2**2) * x / L) / r2)
                        regs.append(V1[o1] * V1[o2] - (x - 1) / L)
                        regs.append(P[(o1, o2)] - x)
        out.append((loss, np.array(regs).T if regs else None))
    return out


@dataclass(frozen=True)
class McRiskEstimates(FrozenResult):
    """Monte Carlo risks of several reduced states on one common sample (:func:`mc_risk_cv`).

    Attributes
    ----------
    mean : ndarray, shape (S,)
        Estimated risk of each of the S states.
    stderr : ndarray, shape (S,)
        Its standard error (of the control-variate residual when ``cv=True``);
        :func:`mc_risk_cv` refuses too few prompts for the degrees of freedom.
    """

    mean: np.ndarray
    stderr: np.ndarray


def mc_risk_cv(states, setting, *, n_prompts, seed, cv=True, chunk_elems=4_000_000) -> McRiskEstimates:
    r"""Rao–Blackwellised Monte Carlo risk of several reduced states on one sample, with control variates.

    The per-prompt loss is exactly :func:`reduced_dynamics.estimation.predictors.conditional_loss`
    of ``reduced_dynamics.estimation.predictors.multi_head_weights`` (sufficient-statistics
    form; β and ε integrated out). Common random numbers: every state is evaluated on
    the same covariates. Control variates (``cv=True``): with
    :math:`e_{h,l} = e^{\omega_h s_l - \omega_h^2 r^2/2}`,
    :math:`V_1 = \bar e_h - 1`, :math:`V_2 = \overline{(s-\omega_h r^2)e_h}` (mean 0
    given :math:`r^2`), their products with :math:`r^2` and the centred second-order
    products (:math:`V_1V_1, V_1V_2, V_2V_2/r^2, \overline{e_he_k}`, conditional means
    in closed form), and :math:`r^2 - d`, :math:`(r^2-d)^2 - 2d`. Their coefficients
    are fitted by least squares (bias O(1/n)); the standard error is the residual's.
    They remove the O(L^{-1/2}) and O(L^{-1}) fluctuations, so the SE scales like
    :math:`L^{-3/2}n^{-1/2}`.

    Parameters
    ----------
    states : sequence of (omega, mu) pairs
        Each ``omega``, ``mu`` a sequence of H floats (H may differ between states).
    setting : Setting
        Scalar and isotropic.
    n_prompts : int, in [1, 1e9]
        Number of prompts.
    seed : int >= 0 or numpy.random.Generator
        Required. An int seeds ``SeedSequence([seed, L])``; a Generator supplies that int.
    cv : bool
        Use the control variates.
    chunk_elems : int, in [1, 1e8]
        Prompts·L per chunk (memory bound); ``setting.L`` must be <= 1e7 (one prompt per chunk at least).

    Returns
    -------
    McRiskEstimates
        ``mean`` and ``stderr``, one entry per state.

    References
    ----------
    docs/theory.md#corrected-loss
    """
    d, L, sigma2 = _scalar(setting, "mc_risk_cv")
    if L > MC_L_MAX:
        raise ValueError(f"`setting.L` must be <= {MC_L_MAX} for mc_risk_cv (one prompt is held in memory), got {L}")
    n_prompts = check_positive_int("n_prompts", n_prompts, hi=10**9)
    chunk_elems = check_positive_int("chunk_elems", chunk_elems, hi=10**8)
    try:
        states = [tuple(pair) for pair in states]
        if any(len(pair) != 2 for pair in states) or not states:
            raise TypeError
    except TypeError:
        raise ValueError(f"`states` must be a non-empty sequence of (omega, mu) pairs, got {states!r}") from None
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(2**63))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be an integer >= 0 or a numpy Generator, got {seed!r}")
    st = []
    for i, (w, mu) in enumerate(states):
        try:
            w, mu = _state_pair(w, mu)
        except ValueError as exc:
            raise ValueError(f"`states` entry {i}: {exc}") from None
        if d * float(np.max(w * w)) > 50.0 or np.max(np.abs(mu)) > 1e6:
            raise ValueError(
                f"`states` entry {i} must have d·max ω² <= 50 and |mu| <= 1e6 (the Monte Carlo weights "
                f"e^(ω s − ω² r²/2) degenerate beyond), got d·max ω² = {d * float(np.max(w * w)):.4g}"
            )
        if w.ndim != 1:
            raise ValueError(f"`states` entries must be (omega, mu) of shape (H,), got {w.shape}")
        st.append((tuple(float(v) for v in w), tuple(float(v) for v in mu)))
    m = max(1, int(chunk_elems) // L)
    ss = np.random.SeedSequence([int(seed), L])
    # Running sums of the regression of the losses on the control variates (intercept first):
    # memory is one chunk whatever n_prompts. Z = [1, X]; the residual sum of squares of the least-squares
    # fit gives the standard error of the control-variate mean, mean(y) - mean(X)·coef.
    acc = [None for _ in st]
    done = 0
    while done < n_prompts:
        mm = min(m, n_prompts - done)
        rng = np.random.Generator(np.random.SFC64(ss.spawn(1)[0]))
        for i, (loss, X) in enumerate(_mc_chunk(rng, mm, d, L, sigma2, st, cv)):
            Z = np.c_[np.ones(loss.size), X] if cv else np.ones((loss.size, 1))
            with np.errstate(all="ignore"):
                part = (Z.T @ Z, Z.T @ loss, float(loss @ loss))
            acc[i] = part if acc[i] is None else tuple(a + b for a, b in zip(acc[i], part))
        done += mm
    means, ses = [], []
    for ZtZ, Zty, yty in acc:
        dof = ZtZ.shape[0]
        if n_prompts <= dof:
            raise ValueError(
                f"`n_prompts` must exceed the {dof} fitted coefficients for a standard error, got {n_prompts}"
            )
        with np.errstate(all="ignore"):
            coef = np.linalg.lstsq(ZtZ, Zty, rcond=None)[0] if np.all(np.isfinite(ZtZ)) else np.full(dof, np.nan)
            ssr = max(yty - 2.0 * coef @ Zty + coef @ ZtZ @ coef, 0.0)
            # mean of y - X·coef[1:]: Zty[0] = Σy, ZtZ[0, 1:] = ΣX
            mean = (Zty[0] - ZtZ[0, 1:] @ coef[1:]) / n_prompts
            se = np.sqrt(ssr / (n_prompts - dof)) / np.sqrt(n_prompts)
        if not (np.isfinite(mean) and np.isfinite(se)):
            raise LossOverflowError(
                f"mc_risk_cv: the Monte Carlo losses are not finite in float64 at {setting!r}; "
                "reduce `setting.d` or |omega|, |mu| of `states`"
            )
        means.append(float(mean))
        ses.append(float(se))
    return McRiskEstimates(mean=np.array(means), stderr=np.array(ses))
