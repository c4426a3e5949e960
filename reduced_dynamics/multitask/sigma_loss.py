r"""The composed reduced model (several tasks, x ~ N(0, Σ)): loss, gradient, Hessian, small-B limit, 1/L expansion.

State: per head ``h`` a full KQ covariate block ``B_h`` (``d × d``) and an OV vector ``μ^(h) ∈ R^N``.
Arrays: ``B`` of shape ``(..., H, d, d)``, ``mu`` of shape ``(..., H, N)``; leading axes are batch axes.
The prediction for task ``n`` is

.. math:: \hat y_n = \sum_h \mu^{(h)}_n \sum_l y_{l,n}\,\mathrm{softmax}_l(x_l^\top B_h x_q).

With ``A_n = Σ_h μ^(h)_n B_h``, ``P_n = I − ΣA_n``, ``D_n = diag(1[j ∈ S_n])``, ``s_n = |S_n|``,
``K_hk = exp(τ_hk)``, ``τ_hk = tr(Σ B_hᵀ Σ B_k)`` and ``c_n = (tr(D_nΣ)/s_n + σ²)/L``, the approximate
loss (derived in :mod:`reduced_dynamics.multitask.sigma_derive`) is the sum of the per-task losses

.. math::
    \tilde L_n = \sigma^2 + \tfrac{1}{s_n}\operatorname{tr}(D_nP_n\Sigma P_n^\top) + c_n\,\mu_n^\top K\mu_n .

Reductions (tests): ``Σ = I``, ``B_h = diag(ω^(h))`` gives :func:`reduced_dynamics.multitask.loss.mt_loss`;
one task on all features and ``B_h = ω_h W_h`` gives :func:`reduced_dynamics.precond.loss.precond_loss`;
both give :func:`reduced_dynamics.dynamics.loss.approx_loss`.

Gradient (by hand; the tests compare it with sympy's and with central differences). With
``G_n = ∂/∂A_n = −(2/s_n) Σ D_n P_n Σ`` and ``Q = M diag(c) Mᵀ`` (``Q_hk = Σ_n c_n μ^(h)_n μ^(k)_n``):

* ``∂/∂B_h = Σ_n μ^(h)_n G_n + 2 Σ_k Q_hk K_hk Σ B_k Σ``,
* ``∂/∂μ^(h)_n = ⟨G_n, B_h⟩ + 2 c_n (K μ_n)_h``.

Hessian (by hand, :func:`sigma_mt_hessian`; checked against sympy's and against central differences of
the gradient). With ``E_n = Σ D_n Σ`` and ``V_h = Σ B_h Σ`` (all ⊗ row-major, ``vec`` row-major):

* ``∂²/∂B_h∂B_k = Σ_n (2/s_n) μ_hn μ_kn E_n ⊗ Σ + 2 Q_hk K_hk Σ ⊗ Σ
  + 2 δ_hk Σ_j Q_hj K_hj vec V_j vec V_jᵀ + 2 Q_hk K_hk vec V_k vec V_hᵀ``,
* ``∂²/∂B_h∂μ_kn = δ_hk G_n + (2/s_n) μ_hn E_n B_k Σ + 2 c_n (δ_hk Σ_j K_hj μ_jn V_j + K_hk μ_hn V_k)``,
* ``∂²/∂μ_hn∂μ_km = δ_nm [(2/s_n) ⟨B_h, E_n B_k Σ⟩ + 2 c_n K_hk]``.

Small-B limit (:func:`sigma_mt_limit_loss_per_task`, :func:`sigma_mt_limit`). Along ``(γB, μ/γ)`` with
``Σ_h μ^(h)_n = 0`` and ``γ → 0`` at fixed ``A_n``, ``μ_nᵀKμ_n → tr(ΣA_nᵀΣA_n)``, so the limit loss is
``σ² + tr(D_nP_nΣP_nᵀ)/s_n + c_n tr(ΣA_nᵀΣA_n)``: a convex quadratic in ``A_n``, stationary where
``D_n − D_nΣA_n = λ_n A_n``, ``λ_n = s_n c_n = (tr(D_nΣ) + s_nσ²)/L``:

.. math::
    A_n^* = (D_n\Sigma + \lambda_n I)^{-1} D_n
          = \begin{pmatrix}(\Sigma_{S_nS_n} + \lambda_n I)^{-1} & 0\\ 0 & 0\end{pmatrix},\qquad
    \min = \sigma^2 + \frac{\lambda_n}{s_n}\sum_i \frac{e_i}{e_i + \lambda_n}

(``e_i`` the eigenvalues of ``Σ_{S_nS_n}``, the block on the support): the preconditioned limit
(``Γ* = (Σ + λI)⁻¹``) of the sub-problem on ``S_n`` with covariance ``Σ_{S_nS_n}``. It is reachable by
the flow's leading order when ``H >= N + 1`` (``A`` free under ``1ᵀM = 0``). The exact finite-L risk
of the limit predictor (debiased preconditioned GD with ``A_n``, :func:`sigma_mt_dpgd_risk`) is
``(σ² + tr(D_nΣ)/s_n)/L + (1 − 1/L) × (limit loss)``, so ``A_n^*`` is also its exact minimiser at every L.

Overflow: an exponent ``τ_hk`` above ``reduced_dynamics.dynamics.loss.MAX_EXPONENT`` raises
:class:`SigmaTasksOverflowError` (a :class:`~reduced_dynamics.dynamics.loss.LossOverflowError` and a
``ValueError``); so does a non-finite result. Never inf or NaN.

References
----------
docs/_sigma_tasks_section.md
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.dynamics.loss import MAX_EXPONENT, LossOverflowError
from reduced_dynamics.multitask.loss import support_mask
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "D_MAX",
    "HESSIAN_MAX",
    "SigmaTasksOverflowError",
    "SigmaTasksGradient",
    "SigmaTasksLimit",
    "SigmaTasksExpansion",
    "task_constants",
    "check_sigma_mt_state",
    "sigma_mt_effective",
    "sigma_mt_loss_per_task",
    "sigma_mt_loss",
    "sigma_mt_gradient",
    "sigma_mt_hessian",
    "sigma_mt_limit_loss_per_task",
    "sigma_mt_limit",
    "sigma_mt_dpgd_risk",
    "sigma_mt_risk_expansion",
]

#: Largest dimension (d × d matrices per head).
D_MAX = 1000
#: what a refused ``d`` is refused for (:meth:`~reduced_dynamics.Setting.covariance`)
COVARIANCE_WHERE = "the composed model (d × d blocks)"
#: Largest number of state variables ``H d² + H N`` of a dense Hessian.
HESSIAN_MAX = 4000


class SigmaTasksOverflowError(LossOverflowError, ValueError):
    """An exponent ``tr(Σ B_hᵀ Σ B_k)`` exceeds ``MAX_EXPONENT``, or a value is not finite in float64.

    A :class:`~reduced_dynamics.dynamics.loss.LossOverflowError` (an ``OverflowError``) and a
    ``ValueError`` (bad input for the command line, as :class:`reduced_dynamics.precond.loss.PrecondOverflowError`).
    """


@dataclasses.dataclass(frozen=True)
class SigmaTasksGradient(FrozenResult):
    """Gradient of :func:`sigma_mt_loss` (iterates as ``(B, mu)``).

    Attributes
    ----------
    B : ndarray, shape (..., H, d, d)
    mu : ndarray, shape (..., H, N)
    """

    B: np.ndarray
    mu: np.ndarray

    def __iter__(self):
        return iter((self.B, self.mu))


def task_constants(setting: Setting) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""``(mask, sizes, c)``: the supports as a (N, d) mask, ``s_n = |S_n|`` (N,), ``c_n = (tr(D_nΣ)/s_n + σ²)/L`` (N,)."""
    setting = as_setting(setting, "task_constants").require_scalar("task_constants")
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    mask = np.asarray(support_mask(setting))
    sizes = mask.sum(axis=1)
    c = (mask @ np.diag(S) / sizes + setting.sigma2) / setting.L
    return mask, sizes, c


def check_sigma_mt_state(B, mu, setting: Setting, *, where: str = "the composed reduced model"):
    """Validate a state: ``B`` (..., H, d, d), ``mu`` (..., H, N), finite, same ``(..., H)``; returns ``(B, mu, setting)``."""
    setting = as_setting(setting, where).require_softmax(where).require_scalar(where)
    B = check_finite_array("B", B, min_ndim=3)
    mu = check_finite_array("mu", mu, min_ndim=2)
    d, N = setting.d, setting.n_tasks
    if B.shape[-2:] != (d, d):
        raise ValueError(f"`B` must have shape (..., H, d, d) with d = {d}, got {B.shape}")
    if mu.shape[-1] != N:
        raise ValueError(f"`mu` must have shape (..., H, N) with N = {N} tasks, got {mu.shape}")
    if B.shape[:-2] != mu.shape[:-1]:
        raise ValueError(f"`B` and `mu` must have the same (..., H), got {B.shape} and {mu.shape}")
    return B, mu, setting


def sigma_mt_effective(B, mu, setting: Setting) -> np.ndarray:
    r"""Per-task effective matrices ``A_n = Σ_h μ^(h)_n B_h``, shape ``(..., N, d, d)``.

    In the small-B limit (``Σ_h μ^(h)_n = 0``) the model predicts task ``n`` as debiased
    preconditioned GD ``(1/L) Σ_l y_{l,n}(x_l − x̄)ᵀ A_n x_q``.
    """
    B, mu, _ = check_sigma_mt_state(B, mu, setting, where="sigma_mt_effective")
    return np.einsum("...hn,...hij->...nij", mu, B)


def _prepare(B, mu, setting, where):
    B, mu, setting = check_sigma_mt_state(B, mu, setting, where=where)
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    mask, sizes, c = task_constants(setting)
    return (B, mu, setting, S, mask, sizes, c, *_state_parts(B, mu, S, setting.d, where))


def _state_parts(B, mu, S, d, where):
    """``(V, τ, K, A, P)`` of a checked state (:func:`_prepare`; the integrator's kernel calls it directly), or
    :class:`SigmaTasksOverflowError` beyond ``MAX_EXPONENT``."""
    with np.errstate(over="ignore", invalid="ignore"):
        V = S @ B @ S  # Σ B_h Σ, (..., H, d, d)
        tau = np.einsum("...hij,...kij->...hk", B, V)  # tr(B_hᵀ Σ B_k Σ) = tr(Σ B_hᵀ Σ B_k)
    worst = float(tau.max()) if np.isfinite(tau).all() else np.inf
    if worst > MAX_EXPONENT:
        raise SigmaTasksOverflowError(
            f"`B` too large for {where}: exp(tr(Σ B_hᵀ Σ B_k)) overflows: the largest exponent {worst:.4g} "
            f"exceeds {MAX_EXPONENT:g}; reduce the scale of `B`"
        )
    K = np.exp(tau)
    with np.errstate(over="ignore", invalid="ignore"):
        A = np.einsum("...hn,...hij->...nij", mu, B)
        P = np.eye(d) - S @ A  # (..., N, d, d)
    return V, tau, K, A, P


def _finite(where, **arrays):
    for name, v in arrays.items():
        if not np.isfinite(v).all():
            raise SigmaTasksOverflowError(f"`mu` or `B` too large: the {name} of {where} is not finite in float64")


def sigma_mt_loss_per_task(B, mu, setting: Setting) -> np.ndarray:
    r"""Per-task approximate losses :math:`\tilde L_n`, shape ``(..., N)``.

    Parameters
    ----------
    B : array_like, shape (..., H, d, d)
        KQ covariate blocks ``B_h``.
    mu : array_like, shape (..., H, N)
        OV weights ``μ^(h)_n``.
    setting : Setting
        Scalar, softmax; ``Sigma`` (None = ``I_d``), ``tasks`` (None = one task on all features), ``L``,
        ``sigma2``.

    Returns
    -------
    ndarray, shape (..., N)

    Raises
    ------
    ValueError
        Bad shapes, non-finite input, an array-valued or non-softmax setting.
    SigmaTasksOverflowError
        An exponent ``tr(Σ B_hᵀ Σ B_k)`` above ``MAX_EXPONENT`` (600), or a non-finite value.

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics import Setting
    >>> s = Setting(d=3, L=40, sigma2=0.1, Sigma=np.diag([1.0, 2.0, 3.0]), tasks=((0, 1), (1, 2)))
    >>> sigma_mt_loss_per_task(np.zeros((2, 3, 3)), np.zeros((2, 2)), s).round(12).tolist()  # tr(D_nΣ)/s_n + σ²
    [1.6, 2.6]
    """
    B, mu, setting, S, mask, sizes, c, V, tau, K, A, P = _prepare(B, mu, setting, "sigma_mt_loss_per_task")
    with np.errstate(over="ignore", invalid="ignore"):
        PS = P @ S
        bias = np.einsum("nj,...nji,...nji->...n", mask, PS, P) / sizes  # Σ_{j∈S} (P Σ Pᵀ)_jj / s
        fluct = np.einsum("...hn,...hk,...kn->...n", mu, K, mu)
        out = setting.sigma2 + bias + c * fluct
    _finite("sigma_mt_loss_per_task", value=out)
    return out


def sigma_mt_loss(B, mu, setting: Setting):
    r"""Approximate loss :math:`\tilde L = \sum_n \tilde L_n` (float, or shape ``(...)`` for a batch).

    Parameters and errors as :func:`sigma_mt_loss_per_task`.
    """
    out = sigma_mt_loss_per_task(B, mu, setting).sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def _grad_parts(B, mu, setting, S, mask, sizes, c, V, K, P):
    G = -2.0 * (S @ (mask[:, :, None] * P) @ S) / sizes[:, None, None]  # (..., N, d, d)
    Q = np.einsum("...hn,n,...kn->...hk", mu, c, mu)
    g_B = np.einsum("...hn,...nij->...hij", mu, G) + 2.0 * np.einsum("...hk,...kij->...hij", Q * K, V)
    g_mu = np.einsum("...nij,...hij->...hn", G, B) + 2.0 * c * (K @ mu)
    return G, Q, g_B, g_mu


def sigma_mt_gradient(B, mu, setting: Setting) -> SigmaTasksGradient:
    r"""Gradient of :func:`sigma_mt_loss` in ``(B, μ)`` (formulas in the module docstring).

    Parameters
    ----------
    B : array_like, shape (..., H, d, d)
    mu : array_like, shape (..., H, N)
    setting : Setting

    Returns
    -------
    SigmaTasksGradient
        ``B`` (..., H, d, d) and ``mu`` (..., H, N); ``dB, dmu = sigma_mt_gradient(...)`` works.

    Raises
    ------
    ValueError, SigmaTasksOverflowError
        As :func:`sigma_mt_loss_per_task`.
    """
    B, mu, setting, S, mask, sizes, c, V, tau, K, A, P = _prepare(B, mu, setting, "sigma_mt_gradient")
    with np.errstate(over="ignore", invalid="ignore"):
        _, _, g_B, g_mu = _grad_parts(B, mu, setting, S, mask, sizes, c, V, K, P)
    _finite("sigma_mt_gradient", B_gradient=g_B, mu_gradient=g_mu)
    return SigmaTasksGradient(B=g_B, mu=g_mu)


def sigma_mt_hessian(B, mu, setting: Setting) -> np.ndarray:
    r"""Hessian of :func:`sigma_mt_loss`, shape ``(..., P, P)`` with ``P = H d² + H N`` (formulas in the module docstring).

    The variables are ordered as ``np.concatenate([B.ravel(), mu.ravel()])`` of one state: the entries of
    ``B_h`` row-major with ``h`` outermost, then ``μ`` row-major ``(h, n)``.

    Parameters
    ----------
    B : array_like, shape (..., H, d, d)
    mu : array_like, shape (..., H, N)
    setting : Setting

    Returns
    -------
    ndarray, shape (..., P, P)
        Symmetric.

    Raises
    ------
    ValueError
        As :func:`sigma_mt_loss_per_task`, or ``P > 4000`` (a dense Hessian of that size is refused).
    SigmaTasksOverflowError
        As :func:`sigma_mt_loss_per_task`.
    """
    B, mu, setting, S, mask, sizes, c, V, tau, K, A, P = _prepare(B, mu, setting, "sigma_mt_hessian")
    H, d, N = B.shape[-3], setting.d, setting.n_tasks
    nB, nP = H * d * d, H * d * d + H * N
    if nP > HESSIAN_MAX:
        raise ValueError(f"the Hessian has {nP} variables (H d² + H N); at most {HESSIAN_MAX} are supported")
    batch = B.shape[:-3]
    I_H = np.eye(H)
    with np.errstate(over="ignore", invalid="ignore"):
        G, Q, _, _ = _grad_parts(B, mu, setting, S, mask, sizes, c, V, K, P)
        E = S @ (mask[:, :, None] * S) / sizes[:, None, None]  # Σ D_n Σ / s_n, (N, d, d)
        QK = Q * K
        # B-B block, (..., h, i, j, k, a, l)
        bb = 2.0 * np.einsum("...hn,...kn,nia,jl->...hijkal", mu, mu, E, S)
        bb = bb + 2.0 * np.einsum("...hk,ia,jl->...hijkal", QK, S, S)
        bb = bb + 2.0 * np.einsum("hk,...hj,...jia,...jlm->...hiaklm", I_H, QK, V, V)
        bb = bb + 2.0 * np.einsum("...hk,...kij,...hal->...hijkal", QK, V, V)
        # B-μ block, (..., h, i, j, k, n): ∂²/∂B_h[i,j] ∂μ_kn
        EBS = np.einsum("nia,...kab,bj->...nkij", E, B, S)  # E_n B_k Σ
        bm = np.einsum("hk,...nij->...hijkn", I_H, G)
        bm = bm + 2.0 * np.einsum("...hn,...nkij->...hijkn", mu, EBS)
        KmuV = np.einsum("...hj,...jn,...jab->...nhab", K, mu, V)  # Σ_j K_hj μ_jn V_j
        bm = bm + 2.0 * np.einsum("n,hk,...nhij->...hijkn", c, I_H, KmuV)
        bm = bm + 2.0 * np.einsum("n,...hk,...hn,...kij->...hijkn", c, K, mu, V)
        # μ-μ block, (..., h, n, k, m)
        mm_n = 2.0 * np.einsum("...hij,...nkij->...nhk", B, EBS) + 2.0 * c[:, None, None] * K[..., None, :, :]
        mm = np.einsum("...nhk,nm->...hnkm", mm_n, np.eye(N))
        out = np.empty((*batch, nP, nP))
        out[..., :nB, :nB] = bb.reshape(*batch, nB, nB)
        out[..., :nB, nB:] = bm.reshape(*batch, nB, H * N)
        out[..., nB:, :nB] = np.swapaxes(out[..., :nB, nB:], -1, -2)
        out[..., nB:, nB:] = mm.reshape(*batch, H * N, H * N)
    _finite("sigma_mt_hessian", Hessian=out)
    return out


def sigma_mt_limit_loss_per_task(A, setting: Setting) -> np.ndarray:
    r"""The small-B limit of :math:`\tilde L_n` at fixed ``A_n`` (with ``Σ_h μ^(h)_n = 0``), shape ``(..., N)``.

    ``σ² + tr(D_n(I−ΣA_n)Σ(I−ΣA_n)ᵀ)/s_n + c_n tr(ΣA_nᵀΣA_n)`` (module docstring).

    Parameters
    ----------
    A : array_like, shape (..., N, d, d)
        The effective matrices (:func:`sigma_mt_effective`).
    setting : Setting

    Returns
    -------
    ndarray, shape (..., N)
    """
    setting = as_setting(setting, "sigma_mt_limit_loss_per_task").require_scalar("sigma_mt_limit_loss_per_task")
    A = check_finite_array("A", A, min_ndim=3)
    d, N = setting.d, setting.n_tasks
    if A.shape[-3:] != (N, d, d):
        raise ValueError(f"`A` must have shape (..., N, d, d) = (..., {N}, {d}, {d}), got {A.shape}")
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    mask, sizes, c = task_constants(setting)
    with np.errstate(over="ignore", invalid="ignore"):
        P = np.eye(d) - S @ A
        bias = np.einsum("nj,...nji,...nji->...n", mask, P @ S, P) / sizes
        fluct = np.einsum("...nij,...nij->...n", A @ S, S @ A)  # tr(ΣAᵀΣA) = <AΣ, ΣA>_F
        out = setting.sigma2 + bias + c * fluct
    _finite("sigma_mt_limit_loss_per_task", value=out)
    return out


@dataclasses.dataclass(frozen=True)
class SigmaTasksLimit(FrozenResult):
    r"""The minimiser of the limit loss per task (:func:`sigma_mt_limit`).

    Attributes
    ----------
    A : ndarray, shape (N, d, d)
        ``A_n^* = (Σ_{S_nS_n} + λ_n I)^{-1}`` on the ``S_n × S_n`` block, zero elsewhere
        (``= (D_nΣ + λ_n I)^{-1} D_n``).
    lam : ndarray, shape (N,)
        ``λ_n = s_n c_n = (tr(D_nΣ) + s_nσ²)/L``.
    loss : ndarray, shape (N,)
        The minimum of the limit loss, ``σ² + (λ_n/s_n) Σ_i e_i/(e_i + λ_n)``, ``e_i`` the eigenvalues of
        ``Σ_{S_nS_n}``.
    """

    A: np.ndarray
    lam: np.ndarray
    loss: np.ndarray


def sigma_mt_limit(setting: Setting) -> SigmaTasksLimit:
    r"""Minimiser ``A_n^*`` and minimum of the limit loss of every task (module docstring).

    Parameters
    ----------
    setting : Setting
        Scalar; ``Sigma`` (None = ``I_d``) and ``tasks``.

    Returns
    -------
    SigmaTasksLimit

    Examples
    --------
    >>> from reduced_dynamics import Setting
    >>> lim = sigma_mt_limit(Setting.paper_multitask())   # Σ = I: η_n = 1/(1 + c|S_n|) on S_n
    >>> round(float(lim.A[0, 0, 0]), 6), round(float(lim.loss[0]), 6)
    (0.900901, 0.199099)
    """
    setting = as_setting(setting, "sigma_mt_limit").require_scalar("sigma_mt_limit")
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    mask, sizes, c = task_constants(setting)
    d, N = setting.d, setting.n_tasks
    lam = sizes * c
    A = np.zeros((N, d, d))
    loss = np.empty(N)
    for n, support in enumerate(setting.supports):
        idx = np.asarray(support)
        Ss = S[np.ix_(idx, idx)]
        e, U = np.linalg.eigh(Ss)
        A[n][np.ix_(idx, idx)] = (U / (e + lam[n])) @ U.T
        loss[n] = setting.sigma2 + lam[n] / sizes[n] * np.sum(e / (e + lam[n]))
    return SigmaTasksLimit(A=A, lam=lam, loss=loss)


def sigma_mt_dpgd_risk(A, setting: Setting) -> np.ndarray:
    r"""Exact finite-L risk per task of debiased preconditioned GD ``ŷ_n = (1/L) Σ_l y_{l,n}(x_l − x̄)ᵀ A_n x_q``, shape ``(..., N)``.

    *Derivation* (as :mod:`reduced_dynamics.precond.exact`, with the task's prior ``E β_nβ_nᵀ = D_n/s_n``).
    ``ŷ_n = b̂ᵀx_q``, ``b̂ = (1/L) A_nᵀ Xᵀ C y_n`` (``C`` the centring projection), ``W = XᵀCX ~ W_d(m, Σ)``,
    ``m = L − 1``, ``E W = mΣ``, ``E[W F W] = m(m+1) ΣFΣ + m tr(FΣ) Σ`` (symmetric ``F``), noise covariance
    ``σ² W``; averaging ``σ² + E(β − b̂)ᵀΣ(β − b̂)`` gives

    .. math::
        \mathcal E_n = \sigma^2 + \frac{\operatorname{tr}(D_n\Sigma)}{s_n}
          - \frac{2m}{L s_n}\operatorname{tr}(D_n\Sigma A_n\Sigma)
          + \frac{m}{L^2 s_n}\Big[(m+1)\operatorname{tr}(D_n\Sigma A_n\Sigma A_n^\top\Sigma)
          + \big(\operatorname{tr}(D_n\Sigma) + s_n\sigma^2\big)\operatorname{tr}(A_n\Sigma A_n^\top\Sigma)\Big]

    ``= (σ² + tr(D_nΣ)/s_n)/L + (1 − 1/L) ×`` :func:`sigma_mt_limit_loss_per_task` (tests). For one task on
    all features it is ``dpgd_risk(A, 1, setting)`` of :mod:`reduced_dynamics.precond.exact`.

    Parameters
    ----------
    A : array_like, shape (..., N, d, d)
    setting : Setting
        Scalar, ``L >= 2``.

    Returns
    -------
    ndarray, shape (..., N)
    """
    setting = as_setting(setting, "sigma_mt_dpgd_risk").require_scalar("sigma_mt_dpgd_risk")
    A = check_finite_array("A", A, min_ndim=3)
    d, N, L = setting.d, setting.n_tasks, setting.L
    if A.shape[-3:] != (N, d, d):
        raise ValueError(f"`A` must have shape (..., N, d, d) = (..., {N}, {d}, {d}), got {A.shape}")
    if L < 2:
        raise ValueError(f"`setting.L` must be >= 2 for debiased GD, got {L}")
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    mask, sizes, _ = task_constants(setting)
    m = L - 1.0
    trDS = mask @ np.diag(S)
    with np.errstate(over="ignore", invalid="ignore"):
        SAS = S @ A @ S  # (..., N, d, d)
        t1 = np.einsum("nj,...njj->...n", mask, SAS)  # tr(D Σ A Σ)
        ASA = A @ S @ np.swapaxes(A, -1, -2)  # A Σ Aᵀ
        SASAS = S @ ASA @ S
        t2 = np.einsum("nj,...njj->...n", mask, SASAS)  # tr(D Σ A Σ Aᵀ Σ)
        t3 = np.einsum("...nij,ji->...n", ASA, S)  # tr(A Σ Aᵀ Σ)
        out = (
            setting.sigma2
            + trDS / sizes
            - 2.0 * m / (L * sizes) * t1
            + m / (L * L * sizes) * ((m + 1.0) * t2 + (trDS + sizes * setting.sigma2) * t3)
        )
    _finite("sigma_mt_dpgd_risk", value=out)
    return out


@dataclasses.dataclass(frozen=True)
class SigmaTasksExpansion(FrozenResult):
    r"""The exact 1/L expansion of the model's per-task risk (:func:`sigma_mt_risk_expansion`).

    Attributes
    ----------
    R0 : ndarray, shape (N,)
        Large-L limit ``σ² + tr(D_nP_nΣP_nᵀ)/s_n`` (the systematic part of :math:`\tilde L_n`).
    R1 : ndarray, shape (N,)
        The exact coefficient of ``1/L`` (delta method).
    R1_approx : ndarray, shape (N,)
        The coefficient of ``1/L`` in :math:`\tilde L_n`, ``L c_n μ_nᵀKμ_n``.
    risk : ndarray, shape (N,)
        ``R0 + R1/L``.
    approx_gap : ndarray, shape (N,)
        :math:`\tilde L_n` minus ``risk``: ``(R1_approx − R1)/L``.
    """

    R0: np.ndarray
    R1: np.ndarray
    R1_approx: np.ndarray
    risk: np.ndarray
    approx_gap: np.ndarray


def _gauss_quad_exp(Aq, Bq=None):
    """``E[e^{zᵀAz}]`` and ``E[zᵀBz e^{zᵀAz}]`` for ``z ~ N(0, I)`` (symmetrised); None unless ``I − 2A ≻ 0``."""
    Aq = 0.5 * (Aq + Aq.T)
    M = np.eye(Aq.shape[0]) - 2.0 * Aq
    ev = np.linalg.eigvalsh(M)
    if ev.min() <= 1e-12:
        return None
    e0 = float(np.prod(ev) ** -0.5)
    if Bq is None:
        return e0
    Bq = 0.5 * (Bq + Bq.T)
    return e0, e0 * float(np.trace(np.linalg.solve(M, Bq)))


def sigma_mt_risk_expansion(B, mu, setting: Setting) -> SigmaTasksExpansion:
    r"""The per-task risk of the composed model to order 1/L, exactly: ``R0 + R1/L`` (an independent route to :math:`\tilde L`).

    *Derivation* (the multi-task version of :func:`reduced_dynamics.precond.loss.precond_risk_expansion`).
    Given the prompt's covariates the risk of task ``n`` is ``|D_n(Xᵀw_n − x_q)|²/s_n + σ²(1 + |w_n|²)``
    (``β_n`` averaged). With ``q_h = B_h x_q`` the tilt ``e^{xᵀq_h}`` makes ``x ~ N(Σq_h, Σ)`` and the
    delta method gives the softmax average's bias ``−(1/L)Σq_h e^{q_hᵀΣq_h}``, the covariance
    ``(1/L) e^{q_hᵀΣq_k}(Σ + Σq_k q_hᵀΣ)`` and ``E|w_n|² = (1/L)Σ_hk μ_hn μ_kn e^{q_hᵀΣq_k}``, so

    .. math::
        R_{1,n} = \tfrac{2}{s_n}\sum_h \mu_{hn} E\big[x_q^\top P_n^\top D_n\Sigma q_h e^{q_h^\top\Sigma q_h}\big]
          + \sum_{hk}\mu_{hn}\mu_{kn} E\Big[e^{q_h^\top\Sigma q_k}\Big(
            \frac{\operatorname{tr}(D_n\Sigma) + q_h^\top\Sigma D_n\Sigma q_k}{s_n} + \sigma^2\Big)\Big],

    averaged over ``x_q = C z`` with ``E e^{zᵀAz} = det(I−2A)^{-1/2}`` and
    ``E[zᵀBz e^{zᵀAz}] = det(I−2A)^{-1/2} tr((I−2A)^{-1}B)``. The remainder is ``O(L⁻²)`` for small
    states; every Gaussian average must exist (``I − 2A ≻ 0``), else :class:`SigmaTasksOverflowError`.

    Parameters
    ----------
    B : array_like, shape (H, d, d)
    mu : array_like, shape (H, N)
    setting : Setting

    Returns
    -------
    SigmaTasksExpansion
    """
    B, mu, setting, S, mask, sizes, c, V, tau, K, A, P = _prepare(B, mu, setting, "sigma_mt_risk_expansion")
    if B.ndim != 3:
        raise ValueError(f"`B` must have shape (H, d, d) (one state), got {B.shape}")
    H, N = B.shape[0], setting.n_tasks
    Cf = np.linalg.cholesky(S)
    why = "the Gaussian average of exp(quadratic form) diverges (state too large for the 1/L expansion)"
    R0 = np.empty(N)
    R1 = np.zeros(N)
    with np.errstate(over="ignore", invalid="ignore"):
        Qz = B @ Cf  # q_h = Qz[h] z
        cache = {}
        for h in range(H):
            for k in range(H):
                cache[h, k] = Qz[h].T @ S @ Qz[k]
        for n in range(N):
            Dn = np.diag(mask[n])
            R0[n] = setting.sigma2 + np.trace(Dn @ P[n] @ S @ P[n].T) / sizes[n]
            SDS = S @ Dn @ S
            trDS = float(np.trace(Dn @ S))
            for h in range(H):
                Bq = (P[n] @ Cf).T @ Dn @ S @ Qz[h]
                res = _gauss_quad_exp(cache[h, h], Bq)
                if res is None:
                    raise SigmaTasksOverflowError(f"`B` too large for sigma_mt_risk_expansion: {why}")
                R1[n] += (2.0 / sizes[n]) * mu[h, n] * res[1]
                for k in range(H):
                    res = _gauss_quad_exp(cache[h, k], Qz[h].T @ SDS @ Qz[k])
                    if res is None:
                        raise SigmaTasksOverflowError(f"`B` too large for sigma_mt_risk_expansion: {why}")
                    R1[n] += mu[h, n] * mu[k, n] * ((trDS / sizes[n] + setting.sigma2) * res[0] + res[1] / sizes[n])
        R1_approx = setting.L * c * np.einsum("hn,hk,kn->n", mu, K, mu)
        risk = R0 + R1 / setting.L
    _finite("sigma_mt_risk_expansion", R0=R0, R1=R1, R1_approx=R1_approx)
    return SigmaTasksExpansion(R0=R0, R1=R1, R1_approx=R1_approx, risk=risk, approx_gap=(R1_approx - R1) / setting.L)
