r"""Numerics of the preconditioned reduced model under x ~ N(0, Σ): loss, gradient, Monte Carlo risk.

The model (``KQ_h = ω_h W``, one shared ``d × d`` matrix; or ``KQ_h = ω_h W_h``, one per head) is

.. math:: \hat y = \sum_h \mu_h \sum_l y_l\,\mathrm{softmax}_l(\omega_h\, x_l^\top W_h x_q),

and its approximate (large-L) loss, derived in :mod:`reduced_dynamics.precond.derive`, is

.. math::

    \tilde L_\Sigma = \sigma^2 + \tfrac1d\operatorname{tr}\big[(I-\Sigma\Gamma)\Sigma(I-\Sigma\Gamma)^\top\big]
      + c_\Sigma\,\mu^\top K\mu,\qquad
    K_{hk} = e^{\omega_h\omega_k\tau_{hk}},

with ``Γ = Σ_h μ_h ω_h W_h``, ``τ_hk = tr(Σ W_hᵀ Σ W_k)``, ``c_Σ = (tr Σ/d + σ²)/L``.

Gradient (written by hand; the tests compare it with sympy's and with central differences). With
``P = I − ΣΓ`` and ``G = ∂/∂Γ = −(2/d) Σ P Σ``:

* ``∂/∂μ_h = ω_h ⟨G, W_h⟩ + 2 c_Σ (Kμ)_h``,
* ``∂/∂ω_h = μ_h ⟨G, W_h⟩ + 2 c_Σ μ_h Σ_k K_hk τ_hk μ_k ω_k``,
* ``∂/∂W_h = μ_h ω_h G + 2 c_Σ μ_h ω_h Σ_k K_hk μ_k ω_k Σ W_k Σ``,

and for a shared ``W`` the per-head ``∂/∂W_h`` are summed.

The loss is invariant under ``(ω, W) → (ω/s, s W)``; :mod:`reduced_dynamics.precond.flow`
normalises that scale into ``γ``.

Overflow: ``exp(ω_h ω_k τ_hk)`` is checked against
``reduced_dynamics.dynamics.loss.MAX_EXPONENT`` first, and a
:class:`~reduced_dynamics.dynamics.loss.LossOverflowError` is raised (never inf or NaN).

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.dynamics.loss import MAX_EXPONENT, LossOverflowError
from reduced_dynamics.estimation.predictors import Predictor
from reduced_dynamics.estimation.prompts import Prompts
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "D_MAX",
    "PrecondOverflowError",
    "PrecondGradient",
    "c_sigma",
    "precond_loss",
    "precond_loss_grad",
    "PrecondReducedModel",
    "PrecondExpansion",
    "precond_risk_expansion",
]


class PrecondOverflowError(LossOverflowError, ValueError):
    """An exponent or value of the preconditioned loss overflows float64 for the given state.

    A :class:`~reduced_dynamics.dynamics.loss.LossOverflowError` (an ``OverflowError``) and a
    ``ValueError`` naming the state arguments: the command line reports it as bad input (exit 2).
    """


#: Largest dimension of the matrix computations (d × d matrices of float64: 8 MB at d = 1000).
D_MAX = 1000
#: what a refused ``d`` is refused for (:meth:`~reduced_dynamics.Setting.covariance`)
COVARIANCE_WHERE = "the preconditioned model (d × d matrices)"


def c_sigma(setting: Setting) -> float:
    r"""The fluctuation constant :math:`c_\Sigma = (\operatorname{tr}\Sigma/d + \sigma^2)/L` (``c`` at ``Σ = I``)."""
    setting = as_setting(setting, "c_sigma")
    tr = setting.d if setting.Sigma is None else float(np.trace(setting.Sigma))
    return float((tr / setting.d + setting.sigma2) / setting.L)


@dataclass(frozen=True)
class PrecondGradient(FrozenResult):
    """Gradient of :math:`\\tilde L_\\Sigma` (:func:`precond_loss_grad`).

    Attributes
    ----------
    omega : ndarray, shape (H,)
    mu : ndarray, shape (H,)
    W : ndarray, shape (d, d) or (H, d, d)
        Same shape as the ``W`` passed in (shared or per head).

    Notes
    -----
    Iterating gives ``(omega, mu, W)``, so ``g_omega, g_mu, g_W = precond_loss_grad(...)`` works.
    :attr:`norm` is the Euclidean norm of the whole gradient.
    """

    omega: np.ndarray
    mu: np.ndarray
    W: np.ndarray

    def __iter__(self):
        return iter((self.omega, self.mu, self.W))

    @property
    def norm(self) -> float:
        """Euclidean norm of ``(omega, mu, W)``."""
        return float(np.sqrt(np.sum(self.omega**2) + np.sum(self.mu**2) + np.sum(self.W**2)))


def _prepare(omega, mu, W, setting, where):
    setting = as_setting(setting, where)
    setting.require_softmax(where)
    if setting.tasks is not None:
        raise ValueError(f"`setting.tasks` (multi-task) is not supported by {where}")
    omega = check_finite_array("omega", omega, ndim=1)
    mu = check_finite_array("mu", mu, ndim=1)
    if omega.shape != mu.shape:
        raise ValueError(f"`omega` and `mu` must have the same shape (H,), got {omega.shape} and {mu.shape}")
    H, d = omega.shape[0], setting.d
    W = check_finite_array("W", W)
    if W.shape == (d, d):
        shared = True
        Wh = np.broadcast_to(W, (H, d, d))
    elif W.shape == (H, d, d):
        shared = False
        Wh = W
    else:
        raise ValueError(f"`W` must have shape ({d}, {d}) (shared) or ({H}, {d}, {d}) (one per head), got {W.shape}")
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    tau, K = _kernel_parts(omega, Wh, S)
    c = c_sigma(setting)
    return omega, mu, Wh, shared, S, tau, K, c, setting


def _exponents(omega, Wh, S):
    """``τ_hk = tr(Σ W_hᵀ Σ W_k)`` and the exponents ``ω_h ω_k τ_hk`` (H, H), and the largest exponent (inf if
    one is not finite): the numbers of :func:`_prepare`, of the model's margin and of its integrator kernel."""
    with np.errstate(over="ignore", invalid="ignore"):
        SW = S @ Wh  # (H, d, d): Σ W_h
        WS = Wh @ S  # W_h Σ
        tau = np.einsum("hij,kij->hk", WS, SW)  # tr(Σ W_hᵀ Σ W_k) = <W_h Σ, Σ W_k>_F
        expo = omega[:, None] * omega[None, :] * tau
    worst = float(expo.max()) if np.isfinite(expo).all() else np.inf
    return tau, expo, worst


def _kernel_parts(omega, Wh, S):
    """``τ`` and ``K = exp(ω_h ω_k τ_hk)``, or :class:`PrecondOverflowError` beyond ``MAX_EXPONENT``."""
    tau, expo, worst = _exponents(omega, Wh, S)
    if worst > MAX_EXPONENT:
        raise PrecondOverflowError(
            f"`omega` or `W` too large: exp(ω_h ω_k tr(Σ W_hᵀ Σ W_k)) overflows: the largest exponent {worst:.4g} exceeds "
            f"{MAX_EXPONENT:g}; reduce |omega| or the scale of `W`"
        )
    return tau, np.exp(expo)


def _bias_parts(omega, mu, Wh, S, d):
    Gam = np.einsum("h,hij->ij", mu * omega, Wh)
    P = np.eye(d) - S @ Gam
    return Gam, P


def precond_loss(omega, mu, W, setting) -> float:
    r"""Approximate loss :math:`\tilde L_\Sigma(\omega, \mu, W)` of the preconditioned reduced model.

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
        KQ scales and OV values of the heads (one state).
    W : array_like, shape (d, d) or (H, d, d)
        The shared KQ matrix, or one per head.
    setting : Setting
        Scalar; ``Sigma`` (``None`` = ``I_d``), ``L``, ``sigma2``. Softmax activation, single task.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Bad shapes, non-finite input, an array-valued or unsupported setting.
    PrecondOverflowError
        (a ``LossOverflowError`` and a ``ValueError``) An exponent ``ω_h ω_k τ_hk`` above
        ``MAX_EXPONENT`` (600), or a non-finite value.

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics.setting import Setting
    >>> round(precond_loss([0.0], [0.0], np.eye(5), Setting(d=5, L=40, sigma2=0.1)), 12)
    1.1
    """
    omega, mu, Wh, _, S, _, K, c, setting = _prepare(omega, mu, W, setting, "precond_loss")
    d = setting.d
    with np.errstate(over="ignore", invalid="ignore"):
        _, P = _bias_parts(omega, mu, Wh, S, d)
        out = setting.sigma2 + np.trace(P @ S @ P.T) / d + c * float(mu @ K @ mu)
    if not np.isfinite(out):
        raise PrecondOverflowError("`mu`, `omega` or `W` too large: precond_loss is not finite in float64")
    return float(out)


def precond_loss_grad(omega, mu, W, setting) -> PrecondGradient:
    r"""Gradient of :func:`precond_loss` in ``(ω, μ, W)`` (formulas in the module docstring).

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
    W : array_like, shape (d, d) or (H, d, d)
    setting : Setting

    Returns
    -------
    PrecondGradient
        ``omega`` (H,), ``mu`` (H,), ``W`` of the shape of the ``W`` passed in.

    Raises
    ------
    ValueError, PrecondOverflowError
        As :func:`precond_loss`.
    """
    omega, mu, Wh, shared, S, tau, K, c, setting = _prepare(omega, mu, W, setting, "precond_loss_grad")
    g_omega, g_mu, g_W = _grad_parts(omega, mu, Wh, shared, S, tau, K, c, setting.d)
    return PrecondGradient(omega=g_omega, mu=g_mu, W=g_W)


def _grad_parts(omega, mu, Wh, shared, S, tau, K, c, d):
    """The gradient ``(g_omega, g_mu, g_W)`` from the parts of :func:`_prepare` (checked input; the integrator's
    kernel calls it on the parts of a state it has checked once), or :class:`PrecondOverflowError`."""
    with np.errstate(over="ignore", invalid="ignore"):
        _, P = _bias_parts(omega, mu, Wh, S, d)
        G = -(2.0 / d) * (S @ P @ S)
        GW = np.einsum("ij,hij->h", G, Wh)  # <G, W_h>
        Kmu = K @ mu
        a = mu * omega
        KT = K * tau
        g_mu = omega * GW + 2.0 * c * Kmu
        g_omega = mu * GW + 2.0 * c * mu * (KT @ a)
        SWS = S @ Wh @ S  # (H, d, d)
        g_W = a[:, None, None] * G[None] + 2.0 * c * a[:, None, None] * np.einsum("hk,kij->hij", K * a[None, :], SWS)
        if shared:
            g_W = g_W.sum(axis=0)
    for name, v in (("omega", g_omega), ("mu", g_mu), ("W", g_W)):
        if not np.isfinite(v).all():
            raise PrecondOverflowError(
                f"`mu`, `omega` or `W` too large: the `{name}` gradient is not finite in float64"
            )
    return g_omega, g_mu, g_W


@dataclass(frozen=True, eq=False)
class PrecondReducedModel(Predictor):
    r"""The preconditioned reduced model as a predictor of the Monte Carlo engine.

    .. math:: \hat y = \sum_h \mu_h \sum_l y_l\,\mathrm{softmax}_l(\omega_h\, x_l^\top W_h x_q)

    It needs the covariates (``uses_stats = False``): use it with ``sampler="full"`` (the engine
    picks it for a setting with ``Sigma``), ``conditional=True`` for the Rao–Blackwellised loss.

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
    W : array_like, shape (d, d) or (H, d, d)
    """

    omega: Any
    mu: Any
    W: Any
    uses_stats: ClassVar[bool] = False
    name: ClassVar[str] = "precond_reduced"

    def __post_init__(self):
        omega = check_finite_array("omega", self.omega, ndim=1)
        mu = check_finite_array("mu", self.mu, ndim=1)
        if omega.shape != mu.shape:
            raise ValueError(f"`omega` and `mu` must have the same shape (H,), got {omega.shape} and {mu.shape}")
        W = check_finite_array("W", self.W)
        H = omega.shape[0]
        if W.ndim == 2 and W.shape[0] == W.shape[1]:
            W = np.broadcast_to(W, (H, *W.shape)).copy()
        elif not (W.ndim == 3 and W.shape[0] == H and W.shape[1] == W.shape[2]):
            raise ValueError(f"`W` must have shape (d, d) or ({H}, d, d), got {W.shape}")
        for name, v in (("omega", omega), ("mu", mu), ("W", W)):
            v = np.array(v, dtype=np.float64)
            v.setflags(write=False)
            object.__setattr__(self, name, v)

    @property
    def n_heads(self) -> int:
        return int(self.omega.shape[0])

    def weights(self, prompts: Prompts) -> np.ndarray:
        """Smoother weights, shape ``(n, L)``: ``Σ_h μ_h softmax_l(ω_h x_lᵀ W_h x_q)``."""
        if not isinstance(prompts, Prompts) or not prompts.has_covariates:
            raise ValueError("`prompts` must be a Prompts batch with covariates (sampler 'full')")
        X, xq = prompts.X, prompts.x_q
        if X.shape[-1] != self.W.shape[-1]:
            raise ValueError(f"`W` is {self.W.shape[-1]}-dimensional but the prompts have d = {X.shape[-1]}")
        q = np.einsum("hij,nj->nhi", self.W, xq)  # W_h x_q, (n, H, d)
        logits = self.omega[None, :, None] * np.einsum("nld,nhd->nhl", X, q)  # (n, H, L)
        logits = logits - logits.max(axis=-1, keepdims=True)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(logits)
            soft = e / e.sum(axis=-1, keepdims=True)
        return np.einsum("h,nhl->nl", self.mu, soft)


@dataclass(frozen=True)
class PrecondExpansion(FrozenResult):
    r"""The exact expansion of the reduced model's risk under Σ to order 1/L (:func:`precond_risk_expansion`).

    Attributes
    ----------
    R0 : float
        The large-L limit, ``σ² + tr[(I−ΣΓ)Σ(I−ΣΓ)ᵀ]/d`` (the systematic part of :math:`\tilde L_\Sigma`).
    R1 : float
        The exact coefficient of ``1/L``.
    R1_approx : float
        The coefficient of ``1/L`` in :math:`\tilde L_\Sigma`, ``L c_Σ μᵀKμ``.
    risk : float
        ``R0 + R1/L``.
    approx_gap : float
        :math:`\tilde L_\Sigma` minus ``risk``, i.e. ``(R1_approx − R1)/L``: the O(1/L) error of the
        approximate loss predicted by the expansion.
    """

    R0: float
    R1: float
    R1_approx: float
    risk: float
    approx_gap: float


def _gauss_quad_exp(A, B=None):
    """``E[e^{zᵀAz}]`` and ``E[zᵀBz e^{zᵀAz}]`` for ``z ~ N(0, I)`` (A, B symmetrised); needs ``I − 2A ≻ 0``."""
    A = 0.5 * (A + A.T)
    M = np.eye(A.shape[0]) - 2.0 * A
    ev = np.linalg.eigvalsh(M)
    if ev.min() <= 1e-12:
        return None
    e0 = float(np.prod(ev) ** -0.5)
    if B is None:
        return e0
    B = 0.5 * (B + B.T)
    return e0, e0 * float(np.trace(np.linalg.solve(M, B)))


def precond_risk_expansion(omega, mu, W, setting) -> PrecondExpansion:
    r"""The risk of the preconditioned reduced model to order 1/L, exactly: ``R0 + R1/L``.

    *Derivation.* Given the query, with ``q_h = ω_h W_h x_q``, the softmax average of head ``h``
    is the ratio ``A_h = N_h/D_h`` of the sample means of ``x f_h`` and ``f_h = e^{xᵀq_h}`` over
    ``x ~ N(0, Σ)``. Under the tilt ``f_h`` the law of ``x`` is ``N(Σq_h, Σ)``, and the second-order
    delta method gives

    * bias ``E A_h − Σq_h = −(1/L) Σq_h e^{q_hᵀΣq_h}``,
    * covariance ``Cov(A_h, A_k) = (1/L) e^{q_hᵀΣq_k} (Σ + Σq_k q_hᵀΣ)``,
    * ``E|w|² = (1/L) Σ_hk μ_hμ_k e^{q_hᵀΣq_k}``.

    Inserted into the conditional risk ``|x_q − Xᵀw|²/d + σ²(1 + |w|²)`` (docs/theory.md#measuring-risks)
    and averaged over ``x_q = C z``, ``z ~ N(0, I)``, with ``E e^{zᵀAz} = det(I−2A)^{-1/2}`` and
    ``E[zᵀBz e^{zᵀAz}] = det(I−2A)^{-1/2} tr((I−2A)^{-1}B)``:

    .. math::

        R_1 = \tfrac2d \sum_h \mu_h E\big[x_q^\top (I-\Sigma\Gamma)^\top\Sigma q_h\, e^{q_h^\top\Sigma q_h}\big]
          + \sum_{h,k}\mu_h\mu_k E\Big[e^{q_h^\top\Sigma q_k}
            \Big(\frac{\operatorname{tr}\Sigma + q_h^\top\Sigma^2 q_k}{d} + \sigma^2\Big)\Big].

    At ``Σ = I``, ``W = I`` this is the isotropic corrected loss
    (:func:`reduced_dynamics.dynamics.corrected_loss.corrected_loss_terms`, checked by the tests).
    The remainder is ``O(L⁻²)`` for small states; like the isotropic expansion it needs every
    Gaussian average to exist (``I − 2A ≻ 0``), else a ``ValueError``.

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
    W : array_like, shape (d, d) or (H, d, d)
    setting : Setting
        Scalar; ``Sigma`` (None = ``I_d``).

    Returns
    -------
    PrecondExpansion
    """
    omega, mu, Wh, _, S, _, K, c, setting = _prepare(omega, mu, W, setting, "precond_risk_expansion")
    d, H = setting.d, omega.shape[0]
    Cf = np.linalg.cholesky(S)
    why = "the Gaussian average of exp(quadratic form) diverges (state too large for the 1/L expansion)"
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite values are caught below
        Gam, P = _bias_parts(omega, mu, Wh, S, d)
        R0 = float(setting.sigma2 + np.trace(P @ S @ P.T) / d)
        trS = float(np.trace(S))
        S2 = S @ S
        R1 = 0.0
        for h in range(H):
            Qh = omega[h] * Wh[h] @ Cf  # q_h = Qh z
            A = Qh.T @ S @ Qh
            B = (P @ Cf).T @ S @ Qh
            res = _gauss_quad_exp(A, B) if np.all(np.isfinite(B)) else None
            if res is None:
                raise PrecondOverflowError(f"`omega` or `mu` too large for precond_risk_expansion: {why}")
            R1 += (2.0 / d) * mu[h] * res[1]
            for k in range(H):
                Qk = omega[k] * Wh[k] @ Cf
                res = _gauss_quad_exp(Qh.T @ S @ Qk, Qh.T @ S2 @ Qk)
                if res is None:
                    raise PrecondOverflowError(f"`omega` too large for precond_risk_expansion: {why}")
                R1 += mu[h] * mu[k] * ((trS / d + setting.sigma2) * res[0] + res[1] / d)
    with np.errstate(over="ignore", invalid="ignore"):
        R1_approx = float(setting.L * c * (mu @ K @ mu))
        risk = R0 + R1 / setting.L
    if not all(np.isfinite(v) for v in (R0, R1, R1_approx, risk)):
        raise PrecondOverflowError("`mu` or `omega` too large: precond_risk_expansion is not finite in float64")
    return PrecondExpansion(
        R0=R0, R1=float(R1), R1_approx=R1_approx, risk=float(risk), approx_gap=float((R1_approx - R1) / setting.L)
    )
