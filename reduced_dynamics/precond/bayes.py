r"""The proportional-limit Bayes ratio for :math:`x \sim N(0, \Sigma)`: what replaces Theorem 1(c).

Limit: :math:`L \to \infty`, :math:`d/L \to \xi` (``setting.xi``), noise :math:`\sigma^2`
(``setting.sigma2``), and the empirical spectral distribution of Σ tending to a law ``H``, given by
atoms ``eigs`` (equal weights unless ``weights`` are given). Write
:math:`\bar s = \int t\,dH = \lim \mathrm{tr}\Sigma/d` (the signal variance :math:`E(\beta^\top x)^2`) and
:math:`\Phi(\kappa) = \int \frac{t\kappa}{t+\kappa}\,dH(t)`.

**Bayes risk.** The posterior mean (ridge, :math:`\lambda = \sigma^2 d`) has risk
:math:`\sigma^2 + \sigma^2 E\,\mathrm{tr}\big(\Sigma(X^\top X + \sigma^2 d I)^{-1}\big)`. With
:math:`\hat\Sigma = X^\top X/L` and :math:`\lambda = \sigma^2\xi`, the deterministic equivalent of the
sample-covariance resolvent, :math:`\lambda(\hat\Sigma + \lambda)^{-1} \asymp \lambda_\ast(\Sigma + \lambda_\ast)^{-1}`
with :math:`\lambda = \lambda_\ast\big(1 - \xi\,\tfrac1d\mathrm{tr}\,\Sigma(\Sigma + \lambda_\ast)^{-1}\big)`
(the Marchenko–Pastur/Silverstein equation for general Σ), gives
:math:`\mathcal E_{\rm Bayes} \to B = \lambda_\ast/\xi`, i.e. ``B`` is the unique positive root of

.. math:: B = \sigma^2 + \Phi(\xi B).

At Σ = I this is the quadratic :math:`B^2 - (\sigma^2 + 1 - 1/\xi)B - \sigma^2/\xi = 0` of
docs/theory.md#bayes-ratio (tested).

**Debiased preconditioned GD.** From the exact risk (:mod:`reduced_dynamics.precond.exact`) with
``m = L − 1``, ``d = ξL``:

* optimal preconditioner and step, :math:`\eta P_\star = (\Sigma + \kappa_L I)^{-1}`,
  :math:`\kappa_L \to \kappa = \xi(\bar s + \sigma^2)`:
  :math:`G_\star = \sigma^2 + \Phi(\kappa)` -- the Bayes formula with the fixed point ``B`` replaced by
  the zero predictor's risk :math:`\bar s + \sigma^2 > B`;
* :math:`P = \Sigma^{-1}` at its optimal step: :math:`G_{\Sigma^{-1}} = \sigma^2 + \bar s\kappa/(\bar s + \kappa)
  \ge G_\star` (Jensen; the gap is :math:`\frac{\kappa^2}{(\bar s+\kappa)^2}\int\frac{(t-\bar s)^2}{t+\kappa}dH`);
* ``P = I`` (plain debiased GD) at its optimal step:
  :math:`G_I = \sigma^2 + \bar s - m_2^2/(m_3 + \kappa m_2)`, :math:`m_k = \int t^k dH`.

So in the proportional limit the optimal preconditioner is :math:`(\Sigma + \kappa I)^{-1}` with
:math:`\kappa = O(1)`, **not** :math:`\Sigma^{-1}`; it tends to :math:`\Sigma^{-1}` only when ξ → 0.

**The ratio and the isotropic bound.** The ratio :math:`r = G/B` is invariant under
:math:`(\Sigma, \sigma^2) \to (c\Sigma, c\sigma^2)`; normalise :math:`\bar s = 1`, noise
:math:`\tilde\sigma^2 = \sigma^2/\bar s`. The isotropic bound carries over as
:math:`U(\tilde\sigma^2, \xi) = 1 + \big[\tilde\sigma^2(1 + \xi\tilde\sigma^2)(1 + \tilde\sigma^2 + 1/\xi)\big]^{-1}`.
Cancellation-free forms: :math:`G_\star - B = \int \frac{t^2(\kappa - \xi B)}{(t+\kappa)(t+\xi B)}dH` with
:math:`\kappa - \xi B = \xi\int\frac{t^2}{t+\xi B}dH`, and :math:`U - 1 = \xi\eta/(\tilde\sigma^2(1+\xi\tilde\sigma^2))`,
:math:`\eta = 1/(1 + (1+\tilde\sigma^2)\xi)`.

*Theorem (the Σ version of Theorem 1(c)).* Let :math:`\psi(x) = x/(1+x)` (the isotropic Φ) and
:math:`\xi' \le \xi` the aspect ratio of the isotropic problem with the same Bayes risk,
:math:`\psi(\xi' B) = \Phi(\xi B)`. Then :math:`G_\star \le G_{\rm iso}(\tilde\sigma^2, \xi')`, hence

.. math:: r_\Sigma(\tilde\sigma^2, \xi) \le r_{\rm iso}(\tilde\sigma^2, \xi') \le \max_{0 < \xi' \le \xi} r_{\rm iso}(\tilde\sigma^2, \xi'),

and the right-hand side is the supremum over all spectra: a fraction ``1 − p`` of directions with
(almost) no variance is the isotropic problem at :math:`\xi' = p\xi`.
*Proof.* With the probability :math:`dQ = t\,dH`, :math:`m(k) = \int\frac{t}{t+k}dH = E_Q[(t+k)^{-1}]` and
:math:`g = 1/m` has :math:`g' = E_Q[(t+k)^{-2}]/E_Q[(t+k)^{-1}]^2 \ge 1` (Cauchy–Schwarz), so
:math:`g(ck) - g(k) \ge (c-1)k` for :math:`c \ge 1`; since :math:`\Phi(k) = k\,m(k)` this is
:math:`\Phi(ck) \le \psi(c\,\psi^{-1}(\Phi(k)))`. At :math:`k = \xi B`, :math:`c = (1+\tilde\sigma^2)/B \ge 1`:
:math:`\Phi(\kappa) \le \psi(\xi'(1+\tilde\sigma^2))`, i.e. :math:`G_\star \le G_{\rm iso}(\xi')`, while
:math:`B = B_{\rm iso}(\xi')`. And :math:`\xi' \le \xi` because :math:`\Phi \le \psi` (Jensen, :math:`t \mapsto
tk/(t+k)` concave). Equality holds iff Σ ∝ I. ∎

*Corollary.* :math:`U(\tilde\sigma^2, \cdot)` increases on :math:`(0, \xi_U]`,
:math:`\xi_U = (\tilde\sigma^2(1+\tilde\sigma^2))^{-1/2}`, and :math:`r_{\rm iso} < U` (Theorem 1(c), proven in
:mod:`proofs_check.bayes`); so for :math:`\xi \le \xi_U` the isotropic bound :math:`U(\tilde\sigma^2, \xi)`
holds **for every Σ**. Beyond, it can fail: the supremum exceeds it from
:math:`\xi \approx 4.8/\tilde\sigma^2` on (measured: ξ ≈ 0.46, 4.8, 48 at :math:`\tilde\sigma^2` = 10, 1, 0.1).
:class:`BayesRatioSigma` reports :math:`\rho = (r-1)/(U-1)` for the given spectrum, ``xi_equivalent``,
``ratio_equivalent``, ``sup_ratio`` and ``bound_holds_all_spectra``
(docs/theory.md#non-isotropic-covariates).

References
----------
docs/theory.md#non-isotropic-covariates, docs/theory.md#bayes-ratio
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.estimation._threads import single_blas_thread
from reduced_dynamics.estimation.prompts import as_generator, check_n_prompts, chunk_sizes
from reduced_dynamics.estimation.risk import RiskEstimate, _Moments
from reduced_dynamics.precond.exact import COVARIANCE_WHERE, D_MAX
from reduced_dynamics.setting import as_setting

__all__ = [
    "BayesRatioSigma",
    "bayes_ratio_sigma",
    "bayes_risk_sigma_limit",
    "dpgd_risk_sigma_limit",
    "bayes_risk_sigma_finite",
]

_PRECONDITIONERS = ("optimal", "sigma_inv", "identity")


def _spectrum(eigs, weights):
    """Validated atoms and probabilities of the limiting spectral law."""
    e = check_finite_array("eigs", eigs, ndim=1)
    if np.any(e <= 0) or np.any(e > 1e12) or np.any(e < 1e-12):
        raise ValueError("`eigs` must be eigenvalues of a covariance in [1e-12, 1e12] (positive definite)")
    if weights is None:
        w = np.full(e.size, 1.0 / e.size)
    else:
        w = check_finite_array("weights", weights, ndim=1)
        if w.shape != e.shape or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"`weights` must be non-negative, not all zero, with the shape of `eigs` {e.shape}")
        w = w / w.sum()
    return e, w


def _limit_params(setting):
    setting = as_setting(setting)
    setting.require_scalar("the proportional-limit Bayes ratio")
    xi = float(setting.xi)
    s2 = float(setting.sigma2)
    if s2 <= 0:
        raise ValueError(f"`sigma2` must be > 0 for the Bayes ratio (the Bayes risk vanishes at 0), got {s2!r}")
    return xi, s2


def _bayes_u(e, w, s2, xi) -> float:
    """``u = B − σ²`` solving ``u = Φ(ξ(σ² + u))`` (normalised spectrum)."""
    from scipy.optimize import brentq  # on use: scipy.optimize is slow to import

    def g(u):
        k = xi * (s2 + u)
        return u - float(np.sum(w * e * k / (e + k)))

    hi = float(np.sum(w * e))
    if g(hi) <= 0:  # only by rounding (g(s̄) = ∫t²/(t+κ) > 0)
        return hi
    return brentq(g, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)


def bayes_risk_sigma_limit(eigs, setting, *, weights=None) -> float:
    r"""Limiting Bayes risk ``B`` (root of :math:`B = \sigma^2 + \Phi(\xi B)`, module docstring).

    Parameters
    ----------
    eigs : array_like, shape (k,)
        Atoms of the limiting spectral law of Σ, in [1e-12, 1e12].
    setting : Setting
        Scalar; ``sigma2 > 0`` and ``xi = d/L`` are used (its ``Sigma`` is not).
    weights : array_like, shape (k,), optional
        Probabilities of the atoms (normalised); default equal.

    Returns
    -------
    float

    Examples
    --------
    >>> from reduced_dynamics import Setting
    >>> round(bayes_risk_sigma_limit([1.0], Setting(d=5, L=40, sigma2=0.1)), 6)  # isotropic: 0.114057
    0.114057
    """
    e, w = _spectrum(eigs, weights)
    xi, s2 = _limit_params(setting)
    sbar = float(np.sum(w * e))
    return sbar * (s2 / sbar + _bayes_u(e / sbar, w, s2 / sbar, xi))


def _gd_limits(e, w, s2, xi):
    """``(G_opt, G_inv, G_id, kappa)`` for a spectrum normalised to mean 1."""
    k = xi * (1.0 + s2)
    g_opt = s2 + float(np.sum(w * e * k / (e + k)))
    g_inv = s2 + k / (1.0 + k)
    m2, m3 = float(np.sum(w * e**2)), float(np.sum(w * e**3))
    g_id = s2 + 1.0 - m2 * m2 / (m3 + k * m2)
    return g_opt, g_inv, g_id, k


def _iso_excess(t2, xi) -> float:
    """``r_iso − 1`` at noise ``t2`` (signal 1) and aspect ratio ``xi``, cancellation-free."""
    u = _bayes_u(np.ones(1), np.ones(1), t2, xi)
    B = t2 + u
    kb = xi * B
    dk = xi / (1.0 + kb)  # κ − ξB = ξ(1 + σ² − B) = ξ·1/(1 + ξB)
    return (dk / ((1.0 + kb + dk) * (1.0 + kb))) / B


def _iso_xi_with_bayes(t2, u) -> float:
    """The isotropic aspect ratio ξ' whose Bayes risk is ``t2 + u``: ``u = ξ'B/(1 + ξ'B)``, B = t2 + u.

    ``inf`` when ``u`` rounds to 1 (the caller caps ξ' at ξ, which it never exceeds).
    """
    den = (1.0 - u) * (t2 + u)
    return u / den if den > 0 else math.inf


def _sup_iso_excess(t2, xi) -> tuple[float, float]:
    """``max_{0 < ξ' <= ξ} (r_iso(σ², ξ') − 1)`` and its argument (log grid, then a bounded refinement)."""
    from scipy.optimize import minimize_scalar

    grid = np.geomspace(xi * 1e-9, xi, 181)
    vals = np.array([_iso_excess(t2, x) for x in grid])
    i = int(np.argmax(vals))
    if i == len(grid) - 1:
        return float(vals[i]), float(grid[i])
    lo, hi = np.log(grid[max(i - 1, 0)]), np.log(grid[i + 1])
    res = minimize_scalar(lambda z: -_iso_excess(t2, float(np.exp(z))), bounds=(lo, hi), method="bounded")
    if -res.fun > vals[i]:
        return float(-res.fun), float(np.exp(res.x))
    return float(vals[i]), float(grid[i])


def dpgd_risk_sigma_limit(eigs, setting, *, preconditioner="optimal", weights=None) -> float:
    r"""Proportional limit of the optimal-step risk of debiased preconditioned GD (module docstring).

    Parameters
    ----------
    eigs : array_like, shape (k,)
        Atoms of the limiting spectral law of Σ.
    setting : Setting
        Scalar; ``sigma2`` and ``xi`` are used.
    preconditioner : {"optimal", "sigma_inv", "identity"}
        :math:`(\Sigma + \kappa I)^{-1}` (the optimum), :math:`\Sigma^{-1}`, or ``I`` (plain debiased GD),
        each at its optimal step.
    weights : array_like, shape (k,), optional

    Returns
    -------
    float
    """
    e, w = _spectrum(eigs, weights)
    xi = float(as_setting(setting).require_scalar("dpgd_risk_sigma_limit").xi)
    s2 = float(setting.sigma2)
    if not isinstance(preconditioner, str) or preconditioner not in _PRECONDITIONERS:
        raise ValueError(f"`preconditioner` must be one of {list(_PRECONDITIONERS)}, got {preconditioner!r}")
    sbar = float(np.sum(w * e))
    g = _gd_limits(e / sbar, w, s2 / sbar, xi)
    return sbar * g[_PRECONDITIONERS.index(preconditioner)]


@dataclass(frozen=True)
class BayesRatioSigma(FrozenResult):
    r"""Proportional-limit risks and ratios under Σ (:func:`bayes_ratio_sigma`).

    Attributes
    ----------
    xi : float
        :math:`\xi = d/L`.
    sigma2 : float
        :math:`\sigma^2`.
    signal : float
        :math:`\bar s = \int t\,dH` (signal variance).
    sigma2_eff : float
        :math:`\tilde\sigma^2 = \sigma^2/\bar s`, the noise level the ratio depends on.
    bayes_risk : float
        ``B``.
    gd_risk : float
        :math:`G_\star` (optimal preconditioner).
    gd_risk_sigma_inv, gd_risk_identity : float
        :math:`G_{\Sigma^{-1}}`, :math:`G_I`.
    ratio, ratio_sigma_inv, ratio_identity : float
        The three ratios ``G/B``.
    bound : float
        :math:`U(\tilde\sigma^2, \xi)`, the isotropic bound of Theorem 1(c) at the same noise-to-signal ratio.
    rho, rho_sigma_inv : float
        :math:`(r-1)/(U-1)` for the optimal and the :math:`\Sigma^{-1}` preconditioner, computed without
        cancellation; the bound holds iff ``rho <= 1``.
    bound_holds, bound_holds_sigma_inv : bool
        ``rho <= 1``, ``rho_sigma_inv <= 1``.
    ratio_isotropic : float
        The isotropic ratio at :math:`(\tilde\sigma^2, \xi)` (``eigs`` replaced by their mean).
    xi_equivalent : float
        :math:`\xi' \le \xi`, the aspect ratio of the isotropic problem at :math:`\tilde\sigma^2` with the same
        (normalised) Bayes risk.
    ratio_equivalent : float
        :math:`r_{\rm iso}(\tilde\sigma^2, \xi') \ge` ``ratio`` (proven, module docstring).
    sup_ratio : float
        :math:`\max_{0<\xi'\le\xi} r_{\rm iso}(\tilde\sigma^2, \xi')`: the supremum of the optimal-preconditioner
        ratio over **all** spectra with this :math:`\tilde\sigma^2` and ξ (an upper bound, approached by
        spectra with a fraction of near-null directions).
    sup_xi : float
        Where that maximum is attained.
    bound_holds_all_spectra : bool
        ``sup_ratio <= bound``: the isotropic bound holds for every Σ at this :math:`(\tilde\sigma^2, \xi)`;
        guaranteed when :math:`\xi \le \xi_U = (\tilde\sigma^2(1+\tilde\sigma^2))^{-1/2}`.
    xi_u : float
        :math:`\xi_U`, where :math:`U(\tilde\sigma^2, \cdot)` is largest.
    kappa : float
        :math:`\kappa = \xi(\bar s + \sigma^2)`, the regularisation of the optimal preconditioner.
    """

    xi: float
    sigma2: float
    signal: float
    sigma2_eff: float
    bayes_risk: float
    gd_risk: float
    gd_risk_sigma_inv: float
    gd_risk_identity: float
    ratio: float
    ratio_sigma_inv: float
    ratio_identity: float
    bound: float
    rho: float
    rho_sigma_inv: float
    bound_holds: bool
    bound_holds_sigma_inv: bool
    ratio_isotropic: float
    xi_equivalent: float
    ratio_equivalent: float
    sup_ratio: float
    sup_xi: float
    bound_holds_all_spectra: bool
    xi_u: float
    kappa: float


def bayes_ratio_sigma(eigs, setting, *, weights=None) -> BayesRatioSigma:
    r"""The proportional-limit ratio of debiased preconditioned GD to Bayes for Σ with spectrum ``eigs``.

    Replaces Theorem 1(c) (docs/theory.md#bayes-ratio) for :math:`\Sigma \ne I`; module docstring for
    the formulas and the verdict on the isotropic bound.

    Parameters
    ----------
    eigs : array_like, shape (k,)
        Atoms of the limiting spectral law of Σ (e.g. ``np.linalg.eigvalsh(Sigma)``), in [1e-12, 1e12].
    setting : Setting
        Scalar; ``sigma2 > 0`` and ``xi = d/L`` define the limit (its ``Sigma`` is not used).
    weights : array_like, shape (k,), optional
        Probabilities of the atoms; default equal.

    Returns
    -------
    BayesRatioSigma

    References
    ----------
    docs/theory.md#non-isotropic-covariates

    Examples
    --------
    >>> from reduced_dynamics import Setting
    >>> r = bayes_ratio_sigma([1.0], Setting(d=5, L=40, sigma2=0.1))
    >>> round(r.ratio, 4), round(r.bound, 4), r.bound_holds   # isotropic: Theorem 1(c)
    (1.9366, 2.0853, True)
    """
    e, w = _spectrum(eigs, weights)
    xi, s2 = _limit_params(setting)
    sbar = float(np.sum(w * e))
    e1, t2 = e / sbar, s2 / sbar  # normalised: mean 1, noise σ²/s̄
    u = _bayes_u(e1, w, t2, xi)
    B = t2 + u
    g_opt, g_inv, g_id, k = _gd_limits(e1, w, t2, xi)
    kb = xi * B
    # cancellation-free excesses
    dk = xi * float(np.sum(w * e1**2 / (e1 + kb)))  # κ − ξB
    kk = kb + dk
    gmb = float(np.sum(w * e1**2 * dk / ((e1 + kk) * (e1 + kb))))  # G* − B
    jensen = kk * kk / (1.0 + kk) ** 2 * float(np.sum(w * (e1 - 1.0) ** 2 / (e1 + kk)))  # G_inv − G*
    eta = 1.0 / (1.0 + (1.0 + t2) * xi)
    um1 = xi * eta / (t2 * (1.0 + xi * t2))
    rho = (gmb / B) / um1
    rho_inv = ((gmb + jensen) / B) / um1
    ratio_iso = 1.0 + _iso_excess(t2, xi)
    xi_eq = min(_iso_xi_with_bayes(t2, u), xi)  # <= ξ by Jensen; min() only absorbs rounding
    sup_ex, sup_xi = _sup_iso_excess(t2, xi)
    xi_u = 1.0 / math.sqrt(t2 * (1.0 + t2))
    vals = dict(
        xi=xi,
        sigma2=s2,
        signal=sbar,
        sigma2_eff=t2,
        bayes_risk=sbar * B,
        gd_risk=sbar * g_opt,
        gd_risk_sigma_inv=sbar * g_inv,
        gd_risk_identity=sbar * g_id,
        ratio=1.0 + gmb / B,
        ratio_sigma_inv=1.0 + (gmb + jensen) / B,
        ratio_identity=g_id / B,
        bound=1.0 + um1,
        rho=rho,
        rho_sigma_inv=rho_inv,
        bound_holds=bool(rho <= 1.0),
        bound_holds_sigma_inv=bool(rho_inv <= 1.0),
        ratio_isotropic=ratio_iso,
        xi_equivalent=xi_eq,
        ratio_equivalent=1.0 + _iso_excess(t2, xi_eq),
        sup_ratio=1.0 + sup_ex,
        sup_xi=sup_xi,
        bound_holds_all_spectra=bool(sup_ex <= um1),
        xi_u=xi_u,
        kappa=sbar * k,
    )
    for name, v in vals.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"`eigs`, `setting` give a non-finite {name}; the parameters are out of range")
    return BayesRatioSigma(**vals)


def bayes_risk_sigma_finite(setting, *, n_prompts, seed) -> RiskEstimate:
    r"""Finite-(d, L) Bayes risk under Σ by Monte Carlo over X, Rao–Blackwellised over β, ε and :math:`x_q`.

    .. math:: \mathcal E_{\rm Bayes} = \sigma^2 + \sigma^2\,E_X\,\mathrm{tr}\big(\Sigma(X^\top X + \sigma^2 d I)^{-1}\big),

    the posterior covariance :math:`\sigma^2(X^\top X + \sigma^2 dI)^{-1}` weighted by
    :math:`E x_q x_q^\top = \Sigma`. An independent route to the Bayes risk (the engine's
    :class:`~reduced_dynamics.BayesRidge` samples :math:`x_q`, β and ε).

    Parameters
    ----------
    setting : Setting
        Scalar, ``sigma2 > 0``; ``Sigma`` None means ``I_d``.
    n_prompts : int, in [2, 1e9]
        Covariate matrices drawn.
    seed : int >= 0 or numpy.random.Generator

    Returns
    -------
    RiskEstimate
        Named ``"bayes_ridge"``.
    """
    setting = as_setting(setting, "bayes_risk_sigma_finite")
    if setting.sigma2 <= 0:
        raise ValueError(f"`sigma2` must be > 0 for bayes_risk_sigma_finite, got {setting.sigma2!r}")
    n = check_n_prompts(n_prompts)
    rng = as_generator(seed)
    S = setting.covariance(d_max=D_MAX, where=COVARIANCE_WHERE)
    C = np.linalg.cholesky(S)
    d, L, s2 = setting.d, setting.L, float(setting.sigma2)
    cap = max(1, int(2_000_000 // (L * d + d * d)))
    sizes = chunk_sizes(n, 8 * (L * d + 4 * d * d), setting=setting, cap=cap)
    mom = _Moments(1)
    eye = np.eye(d)
    with single_blas_thread():
        for b in sizes:
            X = rng.standard_normal((b, L, d)) @ C.T
            A = np.matmul(np.swapaxes(X, 1, 2), X) + s2 * d * eye
            del X
            Y = np.linalg.solve(A, np.broadcast_to(S, A.shape))
            mom.add(s2 + s2 * np.trace(Y, axis1=1, axis2=2))
    return RiskEstimate(risk=float(mom.mean[0]), stderr=mom.stderr(0), n=n, name="bayes_ridge")
