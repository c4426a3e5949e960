r"""Gradient flow of the preconditioned reduced model in ``(ω, μ, W)`` and its limit.

The flow is :math:`\dot\theta = -\nabla\tilde L_\Sigma(\theta)` with ``θ = (ω, μ, W)``
(:func:`reduced_dynamics.precond.loss.precond_loss_grad`), the package's time convention
(docs/conventions.md, "Time convention of the flow").

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

a quadratic in ``Γ`` minimised at ``Γ* = (Σ + λI)⁻¹`` with ``λ = c_Σ d = (tr Σ + dσ²)/L`` (write
``Γ = Σ^{-1/2}MΣ^{-1/2}``: the loss is ``σ² + [tr Σ − 2tr(MΣ) + tr(MMᵀΣ)]/d + c_Σ tr(MᵀM)``, stationary
at ``(Σ + λI)M = Σ``). So the preconditioner is a *ridge-regularised* inverse: ``Σ⁻¹`` only as
``L → ∞``, at scale-free distance ``O(λ)`` from it. At ``Σ = I``: ``Γ* = η* I``. The minimum is
``σ² + (λ/d) Σ_i s_i/(s_i + λ)`` over the eigenvalues ``s_i`` of ``Σ`` (``1 + σ² − η*`` at ``Σ = I``).

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_positive_float, check_positive_int
from reduced_dynamics.dynamics.loss import LossOverflowError
from reduced_dynamics.precond.loss import PrecondOverflowError, c_sigma, precond_loss, precond_loss_grad, sigma_of
from reduced_dynamics.precond.metrics import scale_free_distance
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "PrecondLimit",
    "NormalisedPrecond",
    "PrecondFlowResult",
    "precond_limit",
    "normalise_precond_state",
    "integrate_precond_flow",
    "PrecondInitialState",
    "precond_initial_state",
    "precond_flow_end_state",
]

#: Largest final time of a flow.
T_END_MAX = 1e8
#: Largest number of heads of a flow.
N_HEADS_MAX = 16
#: Largest dimension of a flow (the state has 2H + d² variables; the stiff solver's Jacobian is its square).
D_FLOW_MAX = 40
#: Status messages of :func:`integrate_precond_flow`.
STATUS_MESSAGES = {
    0: "Reached t_end. For H >= 2 the flow never stops (it drifts toward γ = 0); increase `t_end` to follow it.",
    2: "Left the overflow-safe region: an exponent ω_h ω_k tr(ΣW_hᵀΣW_k) reached the cap. "
    "Try a smaller `init_scale` or a smaller start.",
    -1: "Integration failed (see the solver message). Try method='Radau' or looser `rtol`/`atol`.",
}


def _tau(W, S):
    return float(np.trace(S @ W.T @ S @ W))


@dataclass(frozen=True)
class PrecondLimit(FrozenResult):
    r"""The limit predictor of the preconditioned flow (:func:`precond_limit`).

    Attributes
    ----------
    Gamma : ndarray, shape (d, d)
        ``Γ* = (Σ + λI)⁻¹``, the minimiser of the limit loss (``Γ = Σ_h μ_h ω_h W_h``).
    lam : float
        ``λ = (tr Σ + d σ²)/L``.
    eta_eff : float
        ``√(tr(ΣΓ*ΣΓ*)/d)``: the step of ``Γ* = η_eff P``.
    P : ndarray, shape (d, d)
        ``Γ*/η_eff``, normalised as ``W_n`` (``tr(ΣPΣP) = d``; ``P = Σ⁻¹`` exactly as ``L → ∞``).
    loss : float
        Minimum of the limit loss, ``σ² + (λ/d) Σ_i s_i/(s_i + λ)`` (the infimum of :math:`\tilde L_\Sigma`
        along the drift).
    distance_sigma_inv : float
        ``scale_free_distance(Γ*, Σ⁻¹)``.
    """

    Gamma: np.ndarray
    lam: float
    eta_eff: float
    P: np.ndarray
    loss: float
    distance_sigma_inv: float


def precond_limit(setting: Setting) -> PrecondLimit:
    """The limit of the flow: debiased preconditioned GD with ``Γ* = (Σ + λI)⁻¹`` (module docstring).

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
    S = sigma_of(setting)
    d = setting.d
    lam = c_sigma(setting) * d
    Gam = np.linalg.inv(S + lam * np.eye(d))
    Gam = 0.5 * (Gam + Gam.T)
    eta = np.sqrt(_tau(Gam, S) / d)
    s = np.linalg.eigvalsh(S)
    loss = float(setting.sigma2 + lam / d * np.sum(s / (s + lam)))
    return PrecondLimit(
        Gamma=Gam,
        lam=float(lam),
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
        ``scale_free_distance(W, Γ*)`` with ``Γ* = (Σ + λI)⁻¹`` of :func:`precond_limit`.
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
    S = sigma_of(setting)
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
class PrecondFlowResult(FrozenResult):
    """A trajectory of the preconditioned flow (:func:`integrate_precond_flow`).

    Attributes
    ----------
    success : bool
        ``status == 0``.
    status : int
        0 reached ``t_end``; 2 left the overflow-safe region (the trajectory stops at the last safe
        output time); -1 solver failure.
    message : str
    t : float
        Final time reached.
    omega, mu : ndarray, shape (H,)
        Final state.
    W : ndarray, shape (d, d) or (H, d, d)
        Final KQ matrix (raw scale).
    loss : float
        :math:`\\tilde L_\\Sigma` at the final state.
    normalised : NormalisedPrecond
        The final state with the scale moved into ``γ`` and the distances to ``Σ⁻¹``, ``I``, ``Γ*``.
    limit : PrecondLimit
        The limit predictor of this setting.
    t_path : ndarray, shape (n,)
        Output times (0 and log-spaced).
    omega_path, mu_path : ndarray, shape (n, H)
    W_path : ndarray, shape (n, d, d) or (n, H, d, d)
    loss_path : ndarray, shape (n,)
    distance_path : ndarray, shape (n,) or (n, H)
        ``scale_free_distance(W, Σ⁻¹)`` along the path.
    setting : Setting
    nfev : int
    seconds : float
        Wall time.
    """

    success: bool
    status: int
    message: str
    t: float
    omega: np.ndarray
    mu: np.ndarray
    W: np.ndarray
    loss: float
    normalised: NormalisedPrecond
    limit: PrecondLimit
    t_path: np.ndarray
    omega_path: np.ndarray
    mu_path: np.ndarray
    W_path: np.ndarray
    loss_path: np.ndarray
    distance_path: np.ndarray
    setting: Setting
    nfev: int
    seconds: float

    def summary(self) -> dict:
        """JSON-friendly summary (what ``run --json`` prints for a setting with ``Sigma``)."""
        n = self.normalised
        return {
            "success": self.success,
            "status": self.status,
            "message": self.message,
            "t": self.t,
            "omega": self.omega.tolist(),
            "mu": self.mu.tolist(),
            "W": self.W.tolist(),
            "loss": self.loss,
            "gamma": n.gamma,
            "eta_eff": n.eta_eff,
            "W_normalised": n.W.tolist(),
            "distance_sigma_inv": np.asarray(n.distance_sigma_inv).tolist(),
            "distance_identity": np.asarray(n.distance_identity).tolist(),
            "distance_limit": np.asarray(n.distance_limit).tolist(),
            "zero_sum_ratio": n.zero_sum_ratio,
            "sign_matched": n.sign_matched,
            "limit": {
                "lam": self.limit.lam,
                "eta_eff": self.limit.eta_eff,
                "loss": self.limit.loss,
                "distance_sigma_inv": self.limit.distance_sigma_inv,
                "P": self.limit.P.tolist(),
            },
            "nfev": self.nfev,
            "seconds": self.seconds,
        }


class _Overflow(Exception):
    pass


def integrate_precond_flow(
    omega0,
    mu0,
    W0,
    setting,
    *,
    t_end=1e4,
    method="LSODA",
    rtol=1e-9,
    atol=1e-12,
    n_times=200,
    t_first=1e-2,
) -> PrecondFlowResult:
    r"""Integrate :math:`\dot\theta = -\nabla\tilde L_\Sigma(\theta)` in ``θ = (ω, μ, W)`` from ``(omega0, mu0, W0)``.

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
        Initial state, ``1 <= H <= 16``.
    W0 : array_like, shape (d, d) or (H, d, d)
        Initial shared KQ matrix, or one per head.
    setting : Setting
        Scalar, ``d <= 40``; ``Sigma`` (None = ``I_d``). Softmax, single task.
    t_end : float, in (0, 1e8]
    method : {"LSODA", "Radau", "BDF"}
    rtol : float, in [1e-13, 1e-2]
    atol : float, in (0, 1]
    n_times : int, in [2, 100000]
        Output times: 0 and ``n_times − 1`` log-spaced from ``t_first`` to ``t_end``.
    t_first : float, in (0, t_end)

    Returns
    -------
    PrecondFlowResult
        ``status`` 2 (not an exception) when the state leaves the overflow-safe region on the way.

    Raises
    ------
    ValueError
        A bad argument, named with its allowed range.
    PrecondOverflowError
        (a ``LossOverflowError`` and a ``ValueError``) The initial state is already outside the
        overflow-safe region.
    """
    setting = as_setting(setting, "integrate_precond_flow")
    if setting.d > D_FLOW_MAX:
        raise ValueError(f"`setting.d` must be <= {D_FLOW_MAX} for the flow (2H + d² variables), got {setting.d}")
    omega0, mu0, W0 = _check_state(omega0, mu0, W0, setting, names=("omega0", "mu0", "W0"))
    H = check_positive_int("H", omega0.shape[0], hi=N_HEADS_MAX)
    t_end = check_positive_float("t_end", t_end)
    if t_end > T_END_MAX:
        raise ValueError(f"`t_end` must be a number in (0, {T_END_MAX:g}], got {t_end!r}")
    if method not in ("LSODA", "Radau", "BDF"):
        raise ValueError(f"`method` must be one of ['LSODA', 'Radau', 'BDF'], got {method!r}")
    rtol = check_positive_float("rtol", rtol)
    if not 1e-13 <= rtol <= 1e-2:
        raise ValueError(f"`rtol` must be a number in [1e-13, 0.01], got {rtol!r}")
    atol = check_positive_float("atol", atol)
    if atol > 1.0:
        raise ValueError(f"`atol` must be a number in (0, 1], got {atol!r}")
    n_times = check_positive_int("n_times", n_times, hi=100_000)
    if n_times < 2:
        raise ValueError(f"`n_times` must be an integer in [2, 100000], got {n_times!r}")
    t_first = check_positive_float("t_first", t_first)
    if t_first >= t_end:
        raise ValueError(f"`t_first` must be a number in (0, t_end = {t_end:g}), got {t_first!r}")
    try:
        precond_loss(omega0, mu0, W0, setting)
    except LossOverflowError as exc:
        raise PrecondOverflowError(
            f"the start (`omega0`, `mu0`, `W0`) is outside the overflow-safe region: {exc}"
        ) from None
    wshape = W0.shape

    def split(y):
        return y[:H], y[H : 2 * H], y[2 * H :].reshape(wshape)

    def rhs(_t, y):
        om, m, W = split(y)
        try:
            g = precond_loss_grad(om, m, W, setting)
        except LossOverflowError:
            raise _Overflow from None
        return -np.concatenate([g.omega, g.mu, g.W.ravel()])

    t_eval = np.concatenate([[0.0], np.geomspace(t_first, t_end, n_times - 1)])
    y0 = np.concatenate([omega0, mu0, W0.ravel()])
    t0 = time.perf_counter()
    status, message, nfev = 0, STATUS_MESSAGES[0], 0
    ts, ys = [0.0], [y0]
    try:
        sol = solve_ivp(rhs, (0.0, t_end), y0, method=method, t_eval=t_eval, rtol=rtol, atol=atol)
        nfev = int(sol.nfev)
        if sol.status < 0:
            status, message = -1, f"{STATUS_MESSAGES[-1]} Solver: {sol.message}"
        ts = list(sol.t)
        ys = list(sol.y.T)
    except _Overflow:
        status, message = 2, STATUS_MESSAGES[2]
        # redo up to the overflow one output interval at a time to keep the safe part of the path
        ts, ys = [0.0], [y0]
        for a, b in zip(t_eval[:-1], t_eval[1:]):
            try:
                part = solve_ivp(rhs, (a, b), ys[-1], method=method, rtol=rtol, atol=atol)
            except _Overflow:
                break
            nfev += int(part.nfev)
            if part.status < 0:
                break
            ts.append(b)
            ys.append(part.y[:, -1])
    seconds = time.perf_counter() - t0
    ts = np.asarray(ts)
    ys = np.asarray(ys)
    om_p, mu_p = ys[:, :H], ys[:, H : 2 * H]
    W_p = ys[:, 2 * H :].reshape((len(ts), *wshape))
    loss_p = np.array([precond_loss(a, b, c, setting) for a, b, c in zip(om_p, mu_p, W_p)])
    Si = np.linalg.inv(sigma_of(setting))
    dist_p = np.asarray(scale_free_distance(W_p, Si))
    om, m, W = om_p[-1], mu_p[-1], W_p[-1]
    return PrecondFlowResult(
        success=status == 0,
        status=status,
        message=message,
        t=float(ts[-1]),
        omega=om,
        mu=m,
        W=W,
        loss=float(loss_p[-1]),
        normalised=normalise_precond_state(om, m, W, setting),
        limit=precond_limit(setting),
        t_path=ts,
        omega_path=om_p,
        mu_path=mu_p,
        W_path=W_p,
        loss_path=loss_p,
        distance_path=dist_p,
        setting=setting,
        nfev=nfev,
        seconds=seconds,
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


def precond_flow_end_state(
    setting,
    *,
    seed,
    n_heads=2,
    t_end=1e4,
    scale=0.01,
    kind="symmetric",
    w_init="random",
    per_head=False,
    n_times=200,
) -> PrecondFlowResult:
    """Integrate the preconditioned flow from a seeded random start (:func:`precond_initial_state`).

    Parameters
    ----------
    setting : Setting
    seed : int >= 0
    n_heads : int, in [1, 16], default 2
    t_end : float, default 1e4
    scale, kind, w_init, per_head
        As in :func:`precond_initial_state`.
    n_times : int, default 200

    Returns
    -------
    PrecondFlowResult
    """
    om, mu, W = precond_initial_state(
        n_heads, setting, seed=seed, scale=scale, kind=kind, w_init=w_init, per_head=per_head
    )
    return integrate_precond_flow(om, mu, W, setting, t_end=t_end, n_times=n_times)
