r"""Exact finite-L risks of (debiased) preconditioned one-step GD under :math:`x \sim N(0, \Sigma)`,
and the optimal preconditioner and step.

Predictors (:mod:`reduced_dynamics.precond.predictors`), for a ``d × d`` matrix ``P`` and a step η:

.. math::

    \hat y_{\rm pgd} = \frac{\eta}{L}\sum_l y_l\, x_l^\top P x_q, \qquad
    \hat y_{\rm dpgd} = \frac{\eta}{L}\sum_l y_l\, (x_l - \bar x)^\top P x_q .

Derivation (docs/theory.md#non-isotropic-covariates)
---------------------------------------------------
Write :math:`\hat y = \hat b^\top x_q` with :math:`\hat b = \tfrac{\eta}{L} P^\top X^\top M y`,
``M = I_L`` (vanilla) or the centring projection :math:`C = I - \mathbf 1\mathbf 1^\top/L`
(debiased), ``y = Xβ + ε``. Averaging over the independent :math:`x_q \sim N(0,\Sigma)` and
:math:`\varepsilon_q`, :math:`\mathcal E = \sigma^2 + E(\beta - \hat b)^\top\Sigma(\beta - \hat b)`.
Put :math:`A = X^\top M X`. The rows of ``X`` are i.i.d. :math:`N(0, \Sigma)`, so
:math:`X = Z\Sigma^{1/2}` and :math:`A = \Sigma^{1/2} Z^\top M Z \Sigma^{1/2}` is Wishart
:math:`W_d(m, \Sigma)` with ``m = L`` (vanilla) or ``m = L − 1`` (``C`` is a rank-``(L−1)``
projection and ``Z`` is rotation invariant on the left). Its moments are
:math:`E A = m\Sigma` and :math:`E A^2 = m(m+1)\Sigma^2 + m\,\mathrm{tr}\Sigma\,\Sigma`
(from :math:`E[zz^\top zz^\top] = 2\Sigma^2 + \mathrm{tr}\Sigma\,\Sigma` for one row). The noise
enters through :math:`X^\top M\varepsilon`, of covariance :math:`\sigma^2 A` (:math:`M^2 = M`), and
its cross term with β has mean 0. With :math:`\beta \sim N(0, I/d)`:

.. math::

    \mathcal E(P, \eta) = \sigma^2 + \frac{\mathrm{tr}\Sigma}{d}
        - \frac{2\eta m}{L d}\,\mathrm{tr}(\Sigma^2 P)
        + \frac{\eta^2 m}{L^2 d}\Big[(m+1)\,\mathrm{tr}(P\Sigma P^\top\Sigma^2)
        + (\mathrm{tr}\Sigma + \sigma^2 d)\,\mathrm{tr}(P\Sigma P^\top\Sigma)\Big].

At :math:`\Sigma = I`, ``P = I`` it is ``gd_risk`` of :mod:`proofs_check.closed_forms` (tested).

Optimal preconditioner. Only :math:`F = \eta\,\Sigma^{1/2}P^\top\Sigma^{1/2}` enters, and the risk is
the quadratic :math:`\sigma^2 + \mathrm{tr}\Sigma/d - \tfrac{2m}{Ld}\mathrm{tr}(F\Sigma)
+ \tfrac{m}{L^2 d}\mathrm{tr}(F^\top F D)` with :math:`D = (m+1)\Sigma + \tau I`,
:math:`\tau = \mathrm{tr}\Sigma + \sigma^2 d`. Its unique minimiser is :math:`F = L\Sigma D^{-1}`, i.e.

.. math::

    \eta P_\star = L\big((m+1)\Sigma + \tau I\big)^{-1}
    \;\overset{m = L-1}{=}\; \big(\Sigma + \kappa_L I\big)^{-1},
    \qquad \kappa_L = \frac{\mathrm{tr}\Sigma + \sigma^2 d}{L},

a ridge-regularised inverse, with minimum risk
:math:`\sigma^2 + \tfrac1d\sum_i\big[\lambda_i - m\lambda_i^2/((m+1)\lambda_i + \tau)\big]`
over the eigenvalues :math:`\lambda_i` of Σ. So the optimal preconditioner of debiased GD is
**not** :math:`\Sigma^{-1}` at finite L (unless :math:`\Sigma \propto I`): it is
:math:`(\Sigma + \kappa_L I)^{-1}`, whose direction tends to :math:`\Sigma^{-1}` as
:math:`L \to \infty` at fixed ``d`` with scale-free distance :math:`O(\kappa_L) = O(d/L)`. In the
proportional limit ``d/L → ξ`` it does **not** tend to :math:`\Sigma^{-1}`:
:math:`\kappa_L \to \xi(\mathrm{tr}\Sigma/d + \sigma^2)` stays of order one
(:mod:`reduced_dynamics.precond.bayes`). At Σ = I it reduces to ``η* I`` exactly.

Normalisation. ``P`` and η enter only through ``ηP``; :func:`optimal_dpgd` reports ``P`` scaled to
:math:`\mathrm{tr}(P\Sigma) = d` (so :math:`P = \Sigma^{-1}` and, at Σ = I, ``P = I`` keep their
scale and η is comparable with η*).

References
----------
docs/theory.md#non-isotropic-covariates
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.setting import as_setting

__all__ = [
    "pgd_risk",
    "dpgd_risk",
    "precond_optimal_eta",
    "OptimalPreconditioner",
    "optimal_dpgd",
    "optimal_pgd",
]

#: Largest allowed ``|eta|`` (beyond it the quadratic risk overflows).
ETA_MAX = 1e12
#: Largest ``d`` of the ``d × d`` matrix computations (a 2000 × 2000 float64 matrix is 32 MB).
D_MAX = 2000
#: what a refused ``d`` is refused for (:meth:`~reduced_dynamics.Setting.covariance`)
COVARIANCE_WHERE = "the d × d preconditioner computations"


def _check_P(P, d) -> np.ndarray:
    P = check_finite_array("P", P, min_ndim=2)
    if P.shape[-2:] != (d, d):
        raise ValueError(f"`P` must have shape (..., {d}, {d}) (a d × d preconditioner, d = setting.d), got {P.shape}")
    if np.any(np.abs(P) > 1e150):
        raise ValueError("`P` must have entries with |P_ij| <= 1e150 (the risk would overflow)")
    return P


def _check_eta(eta) -> np.ndarray:
    eta = check_finite_array("eta", eta)
    if np.any(np.abs(eta) > ETA_MAX):
        raise ValueError(f"`eta` must be a finite number with |eta| <= {ETA_MAX:g}, got {eta!r}")
    return eta


def _traces(P, S):
    """``tr(Σ²P)``, ``tr(PΣPᵀΣ²)``, ``tr(PΣPᵀΣ)`` for batched ``P`` (shape ``(..., d, d)``)."""
    S2 = S @ S
    t1 = np.einsum("ij,...ji->...", S2, P)
    PS = P @ S  # (..., d, d)
    PSPt = PS @ np.swapaxes(P, -1, -2)
    t2 = np.einsum("...ij,ji->...", PSPt, S2)
    t3 = np.einsum("...ij,ji->...", PSPt, S)
    return t1, t2, t3


def _risk(P, eta, setting, debiased: bool):
    setting = as_setting(setting)
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    d = setting.d
    P = _check_P(P, d)
    eta = _check_eta(eta)
    L = np.asarray(setting.L, dtype=np.float64)
    s2 = np.asarray(setting.sigma2, dtype=np.float64)
    m = L - 1.0 if debiased else L
    t1, t2, t3 = _traces(P, S)
    trS = float(np.trace(S))
    with np.errstate(over="ignore", invalid="ignore"):
        out = (
            s2
            + trS / d
            - 2.0 * eta * m / (L * d) * t1
            + eta * eta * m / (L * L * d) * ((m + 1.0) * t2 + (trS + s2 * d) * t3)
        )
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError("`P` and `eta` make the risk overflow to non-finite values; use smaller values")
    return float(out) if out.ndim == 0 else out


def pgd_risk(P, eta, setting):
    r"""Exact finite-L risk of preconditioned one-step GD, :math:`\hat y = \frac{\eta}{L}\sum_l y_l x_l^\top P x_q`.

    The formula of the module docstring with ``m = L``.

    Parameters
    ----------
    P : array_like, shape (..., d, d)
        Preconditioner(s); leading axes are batch axes.
    eta : float or array_like, |eta| <= 1e12
        Step; broadcasts against the batch axes of ``P`` and ``setting.shape``.
    setting : Setting
        Scalar ``d``; ``Sigma`` (None means ``I_d``); ``L`` and ``sigma2`` may be arrays (broadcast).

    Returns
    -------
    float or ndarray
        Broadcast shape of ``P.shape[:-2]``, ``eta`` and ``setting.shape``.

    References
    ----------
    docs/theory.md#non-isotropic-covariates

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics import Setting
    >>> round(pgd_risk(np.eye(5), 0.5, Setting(d=5, L=40, sigma2=0.1)), 6)  # = gd_risk at Σ = I
    0.390625
    """
    return _risk(P, eta, setting, debiased=False)


def dpgd_risk(P, eta, setting):
    r"""Exact finite-L risk of debiased preconditioned GD, :math:`\hat y = \frac{\eta}{L}\sum_l y_l (x_l - \bar x)^\top P x_q`.

    The formula of the module docstring with ``m = L − 1`` (:math:`X^\top C X \sim W_d(L-1, \Sigma)`).

    Parameters
    ----------
    P : array_like, shape (..., d, d)
    eta : float or array_like, |eta| <= 1e12
    setting : Setting
        Scalar ``d``; ``L`` and ``sigma2`` may be arrays (broadcast).

    Returns
    -------
    float or ndarray

    References
    ----------
    docs/theory.md#non-isotropic-covariates

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics import Setting
    >>> round(dpgd_risk(np.eye(5), 0.5, Setting(d=5, L=40, sigma2=0.1)), 6)  # = debiased gd_risk at Σ = I
    0.402266
    """
    return _risk(P, eta, setting, debiased=True)


def precond_optimal_eta(P, setting, *, debiased=True):
    r"""The step minimising :func:`dpgd_risk` (or :func:`pgd_risk`) for a fixed preconditioner ``P``.

    .. math:: \eta(P) = \frac{L\,\mathrm{tr}(\Sigma^2 P)}{(m+1)\mathrm{tr}(P\Sigma P^\top\Sigma^2)
              + (\mathrm{tr}\Sigma + \sigma^2 d)\,\mathrm{tr}(P\Sigma P^\top\Sigma)}

    (``m = L − 1`` debiased, ``L`` vanilla). For :math:`P = \Sigma^{-1}` and ``debiased`` this is
    :math:`1/(1 + (d/L)(1 + \sigma^2 d/\mathrm{tr}\Sigma))`, η* at Σ = I.

    Parameters
    ----------
    P : array_like, shape (..., d, d)
        Non-zero preconditioner(s).
    setting : Setting
        Scalar ``d``; ``L`` and ``sigma2`` may be arrays.
    debiased : bool, default True

    Returns
    -------
    float or ndarray
    """
    setting = as_setting(setting)
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    d = setting.d
    P = _check_P(P, d)
    if not isinstance(debiased, (bool, np.bool_)):
        raise ValueError(f"`debiased` must be True or False, got {debiased!r}")
    L = np.asarray(setting.L, dtype=np.float64)
    s2 = np.asarray(setting.sigma2, dtype=np.float64)
    m = L - 1.0 if debiased else L
    if debiased and np.any(L < 2):
        raise ValueError("`L` must be >= 2 for the optimal step of debiased GD (at L = 1 it predicts 0)")
    t1, t2, t3 = _traces(P, S)
    trS = float(np.trace(S))
    den = (m + 1.0) * t2 + (trS + s2 * d) * t3
    if np.any(den <= 0):
        raise ValueError("`P` must be non-zero (the risk does not depend on the step otherwise)")
    out = np.asarray(L * t1 / den, dtype=np.float64)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class OptimalPreconditioner(FrozenResult):
    r"""The risk-minimising preconditioner and step of (debiased) preconditioned GD (:func:`optimal_dpgd`).

    Attributes
    ----------
    P : ndarray, shape (d, d)
        The optimal preconditioner, symmetric, scaled to :math:`\mathrm{tr}(P\Sigma) = d`.
    eta : float
        The optimal step for that scale (``eta * P`` is what the predictor uses).
    effective : ndarray, shape (d, d)
        ``eta * P`` :math:`= L((m+1)\Sigma + \tau I)^{-1}` (debiased: :math:`(\Sigma + \kappa_L I)^{-1}`).
    kappa : float
        The regularisation :math:`\tau/(m+1)`, :math:`\tau = \mathrm{tr}\Sigma + \sigma^2 d`
        (debiased: :math:`\kappa_L = \tau/L`).
    risk : float
        Exact minimum risk.
    distance_to_sigma_inv : float
        ``scale_free_distance(P, Σ⁻¹)`` (0 exactly when Σ ∝ I).
    eta_sigma_inv : float
        Optimal step for :math:`P = \Sigma^{-1}`.
    risk_sigma_inv : float
        Exact risk of :math:`P = \Sigma^{-1}` at ``eta_sigma_inv`` (``>= risk``).
    eta_identity : float
        Optimal step for ``P = I`` (plain GD under Σ).
    risk_identity : float
        Exact risk of ``P = I`` at ``eta_identity``.
    debiased : bool
    """

    P: np.ndarray
    eta: float
    effective: np.ndarray
    kappa: float
    risk: float
    distance_to_sigma_inv: float
    eta_sigma_inv: float
    risk_sigma_inv: float
    eta_identity: float
    risk_identity: float
    debiased: bool = True


def _optimal(setting, debiased: bool) -> OptimalPreconditioner:
    from reduced_dynamics.precond.metrics import scale_free_distance

    where = "optimal_dpgd" if debiased else "optimal_pgd"
    setting = as_setting(setting, where)
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    d, L, s2 = setting.d, setting.L, float(setting.sigma2)
    if debiased and L < 2:
        raise ValueError(f"`L` must be >= 2 for {where} (debiased GD predicts 0 at L = 1), got {L}")
    m = L - 1 if debiased else L
    lam, V = np.linalg.eigh(S)
    trS = float(lam.sum())
    tau = trS + s2 * d
    kappa = tau / (m + 1)
    eff_eigs = L / ((m + 1) * lam + tau)
    effective = (V * eff_eigs) @ V.T
    effective = 0.5 * (effective + effective.T)
    scale = d / float(np.sum(eff_eigs * lam))  # tr(P Σ) = d
    P = effective * scale
    eta = 1.0 / scale
    risk = s2 + float(np.sum(lam - m * lam**2 / ((m + 1) * lam + tau))) / d
    S_inv = (V / lam) @ V.T
    S_inv = 0.5 * (S_inv + S_inv.T)
    eta_inv = precond_optimal_eta(S_inv, setting, debiased=debiased)
    eta_id = precond_optimal_eta(np.eye(d), setting, debiased=debiased)
    risk_fn = dpgd_risk if debiased else pgd_risk
    return OptimalPreconditioner(
        P=P,
        eta=float(eta),
        effective=effective,
        kappa=float(kappa),
        risk=float(risk),
        distance_to_sigma_inv=float(scale_free_distance(P, S_inv)),
        eta_sigma_inv=float(eta_inv),
        risk_sigma_inv=float(risk_fn(S_inv, eta_inv, setting)),
        eta_identity=float(eta_id),
        risk_identity=float(risk_fn(np.eye(d), eta_id, setting)),
        debiased=bool(debiased),
    )


def optimal_dpgd(setting) -> OptimalPreconditioner:
    r"""The optimal preconditioner and step of debiased preconditioned GD at finite L.

    :math:`\eta P_\star = (\Sigma + \kappa_L I)^{-1}`, :math:`\kappa_L = (\mathrm{tr}\Sigma + \sigma^2 d)/L`
    (module docstring): a ridge-regularised :math:`\Sigma^{-1}`, equal to it in direction only when
    :math:`\Sigma \propto I`; at Σ = I, ``P = I`` and ``eta = η*`` exactly.

    Parameters
    ----------
    setting : Setting
        Scalar, ``L >= 2``; ``Sigma`` None means ``I_d``.

    Returns
    -------
    OptimalPreconditioner
        Also the optimal steps and risks of ``P = Σ⁻¹`` and ``P = I`` for comparison.

    References
    ----------
    docs/theory.md#non-isotropic-covariates

    Examples
    --------
    >>> from reduced_dynamics import Setting
    >>> opt = optimal_dpgd(Setting(d=5, L=40, sigma2=0.1))
    >>> round(opt.eta, 6), round(opt.risk, 6), opt.distance_to_sigma_inv < 1e-14
    (0.879121, 0.242857, True)
    """
    return _optimal(setting, True)


def optimal_pgd(setting) -> OptimalPreconditioner:
    r"""The optimal preconditioner and step of (vanilla) preconditioned GD at finite L.

    :math:`\eta P_\star = L((L+1)\Sigma + (\mathrm{tr}\Sigma + \sigma^2 d) I)^{-1}` (module docstring, ``m = L``).

    Parameters
    ----------
    setting : Setting
        Scalar; ``Sigma`` None means ``I_d``.

    Returns
    -------
    OptimalPreconditioner
        With ``debiased=False``.
    """
    return _optimal(setting, False)
