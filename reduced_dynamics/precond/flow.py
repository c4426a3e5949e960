r"""Gradient flow of the preconditioned reduced model in ``(ω, μ, W)`` and its limit.

The flow is :math:`\dot\theta = -\nabla\tilde L_\Sigma(\theta)` with ``θ = (ω, μ, W)``
(:func:`reduced_dynamics.precond.loss.precond_loss_grad`), integrated by
:func:`reduced_dynamics.integrate` on the model ``reduced_model(setting, n_heads=H)`` of a
setting with ``Sigma`` (:class:`reduced_dynamics.models.precond.PrecondModel`), in the package's
time convention (docs/conventions.md, "Time convention of the flow"). This module holds the
closed forms: the limit and the normalisation of a state.

**Scale.** :math:`\tilde L_\Sigma` is invariant under ``(ω, W) → (ω/s, sW)``, so the flow conserves
``|W|_F² − |ω|²`` (the generator ``(−ω, W)`` is orthogonal to the gradient). Reports normalise the
scale into ``γ``: ``W_n = W √(d/τ)`` with ``τ = tr(ΣWᵀΣW)``, so that ``tr(ΣW_nᵀΣW_n) = d`` (``Σ⁻¹``
and, at ``Σ = I``, ``I`` are normalised), the sign chosen with ``tr(ΣW_n) > 0``, and
``ω_n = ±ω √(τ/d)``; then the kernel exponent is ``d ω_{n,h} ω_{n,k}`` as in the isotropic model and
``γ = max_h |ω_{n,h}|``. The effective step is ``η_eff = μᵀω_n`` and the model tends to the debiased
preconditioned GD ``ŷ = (η_eff/L) Σ_l y_l (x_l − x̄)ᵀ W_n x_q`` (:func:`precond_limit`).

**Limit.** Expanding ``K = 11ᵀ + τωωᵀ + O(ω⁴)`` as for :math:`\tilde L` (docs/theory.md#solution-manifold),
the flow kills ``Σμ`` and ``γ → 0`` at fixed ``Γ = (μᵀω)W``; the limit loss is

.. math:: \sigma^2 + \tfrac1d\operatorname{tr}[(I-\Sigma\Gamma)\Sigma(I-\Sigma\Gamma)^\top]
          + c_\Sigma\operatorname{tr}(\Sigma\Gamma^\top\Sigma\Gamma),

a quadratic in ``Γ`` minimised at ``Γ* = (Σ + κ_L I)⁻¹`` with ``κ_L = c_Σ d = (tr Σ + dσ²)/L`` (write
``Γ = Σ^{-1/2}MΣ^{-1/2}``: the loss is ``σ² + [tr Σ − 2tr(MΣ) + tr(MMᵀΣ)]/d + c_Σ tr(MᵀM)``, stationary
at ``(Σ + κ_L I)M = Σ``). So the preconditioner is a *ridge-regularised* inverse: ``Σ⁻¹`` only as
``L → ∞``, at scale-free distance ``O(κ_L)`` from it. At ``Σ = I``: ``Γ* = η* I``. The minimum is
``σ² + (κ_L/d) Σ_i s_i/(s_i + κ_L)`` over the eigenvalues ``s_i`` of ``Σ`` (``1 + σ² − η*`` at ``Σ = I``).

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_positive_float, check_positive_int
from reduced_dynamics.models.precond import D_FLOW_MAX, N_HEADS_MAX
from reduced_dynamics.precond.loss import COVARIANCE_WHERE, D_MAX, c_sigma
from reduced_dynamics.precond.metrics import scale_free_distance
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "PrecondLimit",
    "NormalisedPrecond",
    "precond_limit",
    "normalise_precond_state",
    "PrecondInitialState",
    "precond_initial_state",
]


def _tau(W, S):
    return float(np.trace(S @ W.T @ S @ W))


@dataclass(frozen=True)
class PrecondLimit(FrozenResult):
    r"""The limit predictor of the preconditioned flow (:func:`precond_limit`).

    Attributes
    ----------
    Gamma : ndarray, shape (d, d)
        ``Γ* = (Σ + κ_L I)⁻¹``, the minimiser of the limit loss (``Γ = Σ_h μ_h ω_h W_h``).
    kappa : float
        ``κ_L = (tr Σ + d σ²)/L`` (the same κ_L as :attr:`~reduced_dynamics.precond.exact.OptimalPreconditioner.kappa`:
        the flow's limit is the exact optimum of debiased preconditioned GD).
    eta_eff : float
        ``√(tr(ΣΓ*ΣΓ*)/d)``: the step of ``Γ* = η_eff P``.
    P : ndarray, shape (d, d)
        ``Γ*/η_eff``, normalised as ``W_n`` (``tr(ΣPΣP) = d``; ``P = Σ⁻¹`` exactly as ``L → ∞``).
    loss : float
        Minimum of the limit loss, ``σ² + (κ_L/d) Σ_i s_i/(s_i + κ_L)`` (the infimum of :math:`\tilde L_\Sigma`
        along the drift).
    distance_sigma_inv : float
        ``scale_free_distance(Γ*, Σ⁻¹)``.
    """

    Gamma: np.ndarray
    kappa: float
    eta_eff: float
    P: np.ndarray
    loss: float
    distance_sigma_inv: float


def precond_limit(setting: Setting) -> PrecondLimit:
    """The limit of the flow: debiased preconditioned GD with ``Γ* = (Σ + κ_L I)⁻¹`` (module docstring).

    Parameters
    ----------
    setting : Setting
        Scalar; ``Sigma`` (None = ``I_d``).

    Returns
    -------
    PrecondLimit

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> lim = precond_limit(Setting(d=5, L=40, sigma2=0.1))
    >>> round(lim.eta_eff, 6), round(lim.loss, 6)   # η* and 1 + σ² − η*
    (0.879121, 0.220879)
    """
    setting = as_setting(setting, "precond_limit")
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    d = setting.d
    kappa = c_sigma(setting) * d
    Gam = np.linalg.inv(S + kappa * np.eye(d))
    Gam = 0.5 * (Gam + Gam.T)
    eta = np.sqrt(_tau(Gam, S) / d)
    s = np.linalg.eigvalsh(S)
    loss = float(setting.sigma2 + kappa / d * np.sum(s / (s + kappa)))
    return PrecondLimit(
        Gamma=Gam,
        kappa=float(kappa),
        eta_eff=float(eta),
        P=Gam / eta,
        loss=loss,
        distance_sigma_inv=scale_free_distance(Gam, np.linalg.inv(S)),
    )


@dataclass(frozen=True)
class NormalisedPrecond(FrozenResult):
    """A state ``(ω, μ, W)`` with the scale of ``W`` moved into ``γ`` (:func:`normalise_precond_state`).

    Attributes
    ----------
    omega : ndarray, shape (H,)
        ``ω_n``: signed KQ scales against the normalised matrices.
    mu : ndarray, shape (H,)
    W : ndarray, shape (d, d) or (H, d, d)
        ``W_n`` with ``tr(ΣW_nᵀΣW_n) = d`` and ``tr(ΣW_n) >= 0``.
    gamma : float
        ``max_h |ω_{n,h}|``.
    eta_eff : float
        ``μᵀω_n`` (``Σ_h μ_h ω_{n,h}`` also for per-head matrices).
    distance_sigma_inv : float or ndarray, shape (H,)
        ``scale_free_distance(W, Σ⁻¹)`` (per head for per-head matrices).
    distance_identity : float or ndarray, shape (H,)
        ``scale_free_distance(W, I)`` (the control).
    distance_limit : float or ndarray, shape (H,)
        ``scale_free_distance(W, Γ*)`` with ``Γ* = (Σ + κ_L I)⁻¹`` of :func:`precond_limit`.
    zero_sum_ratio : float
        ``|Σ_h μ_h| / Σ_h |μ_h|``.
    sign_matched : bool
        ``sign ω_{n,h} = sign μ_h`` for every head whose ``|ω_{n,h} μ_h|`` exceeds 1 % of the largest.
    """

    omega: np.ndarray
    mu: np.ndarray
    W: np.ndarray
    gamma: float
    eta_eff: float
    distance_sigma_inv: object
    distance_identity: object
    distance_limit: object
    zero_sum_ratio: float
    sign_matched: bool


def _check_state(omega, mu, W, setting, names=("omega", "mu", "W")):
    a, b, w = names
    omega = check_finite_array(a, omega, ndim=1)
    mu = check_finite_array(b, mu, ndim=1)
    if omega.shape != mu.shape:
        raise ValueError(f"`{a}` and `{b}` must have the same shape (H,), got {omega.shape} and {mu.shape}")
    H, d = omega.shape[0], setting.d
    W = check_finite_array(w, W)
    if W.shape not in ((d, d), (H, d, d)):
        raise ValueError(f"`{w}` must have shape ({d}, {d}) (shared) or ({H}, {d}, {d}) (one per head), got {W.shape}")
    return omega, mu, W


def normalise_precond_state(omega, mu, W, setting) -> NormalisedPrecond:
    """Move the scale (and sign) of ``W`` into ``ω`` and compare ``W`` with ``Σ⁻¹``, ``I`` and ``Γ*``.

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
    W : array_like, shape (d, d) or (H, d, d)
    setting : Setting
        Scalar.

    Returns
    -------
    NormalisedPrecond
    """
    setting = as_setting(setting, "normalise_precond_state")
    omega, mu, W = _check_state(omega, mu, W, setting)
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    d, H = setting.d, omega.shape[0]
    shared = W.ndim == 2
    Wh = np.broadcast_to(W, (H, d, d)) if shared else W
    Wn = np.empty((H, d, d))
    om = np.empty(H)
    for h in range(H):
        tau = _tau(Wh[h], S)
        if tau <= 0:
            raise ValueError("`W` must be non-zero to be normalised")
        sgn = -1.0 if np.trace(S @ Wh[h]) < 0 else 1.0
        Wn[h] = sgn * Wh[h] * np.sqrt(d / tau)
        om[h] = sgn * omega[h] * np.sqrt(tau / d)
    Si = np.linalg.inv(S)
    lim = precond_limit(setting)
    target = Wn[0] if shared else Wn

    def dist(B):
        return scale_free_distance(target, B)

    a = np.abs(om * mu)
    live = a > 0.01 * a.max() if a.max() > 0 else np.zeros(H, bool)
    sm = bool(np.all(np.sign(om[live]) == np.sign(mu[live])))
    tot = float(np.sum(np.abs(mu)))
    return NormalisedPrecond(
        omega=om,
        mu=mu,
        W=target,
        gamma=float(np.max(np.abs(om))),
        eta_eff=float(mu @ om),
        distance_sigma_inv=dist(Si),
        distance_identity=dist(np.eye(d)),
        distance_limit=dist(lim.Gamma),
        zero_sum_ratio=float(abs(mu.sum()) / tot) if tot > 0 else 0.0,
        sign_matched=sm,
    )


@dataclass(frozen=True)
class PrecondInitialState(FrozenResult):
    """A random start of the preconditioned flow (:func:`precond_initial_state`).

    Attributes
    ----------
    omega, mu : ndarray, shape (H,)
    W : ndarray, shape (d, d) or (H, d, d)
    """

    omega: np.ndarray
    mu: np.ndarray
    W: np.ndarray

    def __iter__(self):
        return iter((self.omega, self.mu, self.W))


def precond_initial_state(n_heads, setting, *, seed, scale=0.01, kind="symmetric", w_init="random", per_head=False):
    """A start of the flow: ``(ω, μ)`` random or a symmetric ± pattern, ``W`` random or ``I_d``.

    Parameters
    ----------
    n_heads : int, in [1, 16]
    setting : Setting
    seed : int >= 0 or numpy.random.Generator
    scale : float, > 0
        Size of ``ω`` and ``μ``.
    kind : {"symmetric", "random"}
        ``"symmetric"``: ``ω = μ = scale·(+1, −1, +1, ...)`` (a ± pair per two heads, as
        :func:`reduced_dynamics.initial_state`); ``"random"``: i.i.d. ``N(0, scale²)`` (a start whose heads
        all take one sign ends at the kernel regressor, as in the isotropic flow).
    w_init : {"random", "identity"}
        ``"random"``: i.i.d. ``N(0, 1/d)`` entries (``|W|_F ≈ √d``); ``"identity"``: ``I_d`` (the
        isotropic solution, which must then move toward ``Σ⁻¹``).
    per_head : bool, default False
        One matrix per head, shape ``(H, d, d)``.

    Returns
    -------
    PrecondInitialState
        Unpacks as ``omega, mu, W``.
    """
    from reduced_dynamics.estimation.prompts import as_generator

    setting = as_setting(setting, "precond_initial_state")
    if setting.d > D_FLOW_MAX:
        raise ValueError(f"`setting.d` must be <= {D_FLOW_MAX} for the flow (2H + d² variables), got {setting.d}")
    H = check_positive_int("n_heads", n_heads, hi=N_HEADS_MAX)
    scale = check_positive_float("scale", scale)
    if w_init not in ("random", "identity"):
        raise ValueError(f"`w_init` must be 'random' or 'identity', got {w_init!r}")
    if kind not in ("symmetric", "random"):
        raise ValueError(f"`kind` must be 'symmetric' or 'random', got {kind!r}")
    rng = as_generator(seed)
    d = setting.d
    if kind == "random":
        omega = scale * rng.standard_normal(H)
        mu = scale * rng.standard_normal(H)
    else:
        omega = scale * np.where(np.arange(H) % 2 == 0, 1.0, -1.0)
        mu = omega.copy()
    shape = (H, d, d) if per_head else (d, d)
    if w_init == "random":
        W = rng.standard_normal(shape) / np.sqrt(d)
    else:
        W = np.broadcast_to(np.eye(d), shape).copy()
    return PrecondInitialState(omega=omega, mu=mu, W=W)
