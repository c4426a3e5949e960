r"""The exact finite-L drift along the solution manifold, and where it stops (docs/theory.md#exact-risk).

On the manifold (p positive heads at +γ with OV mass M, n negative heads at −γ
with mass −M, η = 2γM) the exact risk is
:math:`\Phi(\gamma;\eta) = R_{\rm dgd}(\eta) + A_2\gamma^2 + A_4\gamma^4 + O(\gamma^6)`
(:mod:`reduced_dynamics.exact.expansion`), with :math:`A_2(\eta^*) < 0 < A_4(\eta^*)`
for every (d, L, σ²).

**Drift law.** The projection of docs/theory.md#drift-law holds for any loss on
the manifold (γ stiff at fixed OV mass, the sum of the masses in quasi-equilibrium):

.. math::

    \dot\gamma = -\frac{4pn}{H}\,\frac{\gamma^4}{\eta^2}\,\partial_\gamma\Phi
               = -\frac{4pn}{H}\,\frac{\gamma^5}{\eta^2}\,\big(2A_2 + 4A_4\gamma^2 + 6A_6\gamma^4 + \dots\big).

With :math:`A_2 > 0` this would end in :math:`\gamma \sim t^{-1/4}`; with the exact
:math:`A_2(\eta^*) < 0` the right-hand side vanishes at
:math:`\gamma_{\min}^2 \approx -A_2/(2A_4) = O(1/L)`, and the drift has two regimes:

* :math:`\gamma \gg \gamma_{\min}`: the :math:`A_4` term dominates,
  :math:`\gamma \simeq (96\,(pn/H)\,A_4\,t/\eta^2)^{-1/6}` (the :math:`t^{-1/6}` law of L̃ with
  the exact :math:`A_4` in place of :math:`cd^3\eta^2/6`);
* it reaches :math:`\gamma_{\min}` at the crossover time
  :math:`t_c = \eta^2/(96 (pn/H) A_4 \gamma_{\min}^6) = O(L^4)` and then relaxes exponentially,
  :math:`\gamma - \gamma_{\min} \propto e^{-\lambda t}`,
  :math:`\lambda = \frac{4pn}{H}\frac{\gamma_{\min}^4}{\eta^2}\,\partial^2_\gamma\Phi(\gamma_{\min})
  = \frac{4pn}{H}\frac{\gamma_{\min}^4}{\eta^2}(-4A_2)`.

So the exact flow does **not** drift to γ = 0: it stops at a finite-γ minimiser
whose predictor is not debiased GD (it differs from it at :math:`O(\gamma_{\min}^2) = O(1/L)`
in the weights) and whose risk is below the debiased-GD optimum
:math:`1 + \sigma^2 - \eta^*(1 - 1/L)` by :math:`\approx A_2^2/(4A_4) = O(L^{-3})`.

:func:`exact_drift_gamma` integrates the two- (or three-) term law;
:func:`drift_time_scales` gives :math:`\gamma_{\min}`, :math:`t_c`, λ;
:func:`manifold_excess_mc` measures :math:`\Phi(\gamma;\eta) - R_{\rm dgd}(\eta)` by
paired Monte Carlo (independent of the expansion and of the exact evaluator).

References
----------
docs/theory.md#exact-risk, docs/theory.md#drift-law, docs/theory.md#solution-manifold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import (
    check_bool,
    check_finite_array,
    check_finite_float,
    check_nonnegative_int,
    check_positive_int,
)
from reduced_dynamics.exact.expansion import (
    derive_manifold_expansion,
    exact_manifold_coefficients,
    expansion_symbols,
    manifold_minimiser_estimate,
)
from reduced_dynamics.exact.single_head import _golden_section_min
from reduced_dynamics.setting import as_setting

__all__ = [
    "DriftTimeScales",
    "ManifoldExcess",
    "drift_time_scales",
    "exact_drift_rate",
    "exact_drift_gamma",
    "manifold_excess_mc",
    "manifold_excess_exact",
    "RichardsonCoefficients",
    "richardson_coefficients",
    "ExactManifoldMinimum",
    "exact_manifold_minimum",
]


def _scalar(setting, where):
    setting = as_setting(setting, where)
    setting.require_scalar(where)
    setting.require_isotropic(where).require_softmax(where)
    return setting


def _check_bracket(bracket, rule: str) -> tuple[float, float]:
    """``bracket`` as two finite real numbers (the caller checks the range ``rule``), or ``ValueError``."""
    try:
        lo, hi = bracket
        return check_finite_float("bracket", lo), check_finite_float("bracket", hi)
    except (TypeError, ValueError):
        raise ValueError(f"`bracket` must be a pair (lo, hi) of real numbers, {rule}, got {bracket!r}") from None


def _head_counts(p, n):
    p = check_positive_int("n_positive", p, hi=10**6)
    n = check_positive_int("n_negative", n, hi=10**6)
    return p, n


def _a6(setting, eta):
    S = expansion_symbols()
    expr = derive_manifold_expansion(6).coefficients[3]
    return float(expr.subs({S.L: setting.L, S.d: setting.d, S.sigma2: setting.sigma2, S.eta: eta}))


def _coefficients(setting, eta, order):
    c = exact_manifold_coefficients(eta, setting)
    a = [float(c.a2), float(c.a4)]
    if order == 6:
        a.append(_a6(setting, eta))
    return a


def _check_order(order):
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order not in (4, 6):
        raise ValueError(f"`order` must be 4 or 6 (the highest power of γ kept in Φ), got {order!r}")
    return int(order)


def _check_eta(eta) -> float:
    """The effective step of the drift law (it divides by η²): in [1e-8, 1e6]."""
    eta = check_finite_float("eta", eta)
    if not 1e-8 <= eta <= 1e6:
        raise ValueError(f"`eta` (the effective step; the law divides by η²) must be in [1e-8, 1e6], got {eta!r}")
    return eta


def _check_step(eta, setting) -> float:
    """An effective step of the manifold (default η*): finite, |eta| <= 1e6 (as :func:`dgd_risk`)."""
    if eta is None:
        return float(setting.eta_star)
    eta = check_finite_float("eta", eta)
    if not abs(eta) <= 1e6:
        raise ValueError(f"`eta` must be finite with |eta| <= 1e6 (an effective step), got {eta!r}")
    return eta


def exact_drift_rate(gamma, setting, *, n_positive=1, n_negative=1, eta=None, order=4):
    r"""Right-hand side of the drift law, :math:`\dot\gamma = -\frac{4pn}{H}\frac{\gamma^5}{\eta^2}(2A_2 + 4A_4\gamma^2 [+ 6A_6\gamma^4])`.

    Parameters
    ----------
    gamma : float or array_like, > 0
    setting : Setting
        Scalar and isotropic.
    n_positive, n_negative : int, >= 1
        Heads of each sign (p, n).
    eta : float, optional
        Effective step; default η*.
    order : {4, 6}
        Highest power of γ kept in Φ.

    Returns
    -------
    float or ndarray, like ``gamma``
    """
    setting = _scalar(setting, "exact_drift_rate")
    p, n = _head_counts(n_positive, n_negative)
    order = _check_order(order)
    gamma = check_finite_array("gamma", gamma)
    if np.any(gamma <= 0) or np.any(gamma > 1):
        raise ValueError(f"`gamma` must be in (0, 1], got {gamma!r}")
    eta = setting.eta_star if eta is None else _check_eta(eta)
    a = _coefficients(setting, eta, order)
    dphi = sum(2 * (j + 1) * a[j] * gamma ** (2 * j + 1) for j in range(len(a)))
    out = -4 * p * n / (p + n) * gamma**4 / eta**2 * dphi
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class DriftTimeScales(FrozenResult):
    r"""Landmarks of the exact drift (:func:`drift_time_scales`).

    Attributes
    ----------
    gamma_min : float
        Leading-order :math:`\gamma_{\min} = \sqrt{-A_2/(2A_4)}` at η*.
    t_cross : float
        :math:`t_c = \eta^{*2}/(96(pn/H)A_4\gamma_{\min}^6)`: when the :math:`t^{-1/6}` law reaches
        :math:`\gamma_{\min}`.
    relax_rate : float
        λ of the final exponential approach, :math:`\frac{4pn}{H}\frac{\gamma_{\min}^4}{\eta^{*2}}(-4A_2)`.
    a2, a4 : float
        :math:`A_2(\eta^*)`, :math:`A_4(\eta^*)`.
    law_constant : float
        :math:`K = 96 A_4/\eta^{*2}` of the early law :math:`\gamma = (K (pn/H) t)^{-1/6}`.
    """

    gamma_min: float
    t_cross: float
    relax_rate: float
    a2: float
    a4: float
    law_constant: float


def drift_time_scales(setting, *, n_positive=1, n_negative=1) -> DriftTimeScales:
    r"""γ_min, the crossover time and the final relaxation rate of the exact drift (module docstring).

    Parameters
    ----------
    setting : Setting
        Scalar and isotropic.
    n_positive, n_negative : int, >= 1

    Returns
    -------
    DriftTimeScales
    """
    setting = _scalar(setting, "drift_time_scales")
    p, n = _head_counts(n_positive, n_negative)
    es = setting.eta_star
    c = exact_manifold_coefficients(es, setting)
    g = float(manifold_minimiser_estimate(setting).gamma)
    K = 96 * float(c.a4) / es**2
    kappa = 4 * p * n / (p + n)
    return DriftTimeScales(
        gamma_min=g,
        t_cross=float(1.0 / (K * (p * n / (p + n)) * g**6)),
        relax_rate=float(kappa * g**4 / es**2 * (-4 * float(c.a2))),
        a2=float(c.a2),
        a4=float(c.a4),
        law_constant=float(K),
    )


#: Shortest span ``t - t0`` of :func:`exact_drift_gamma` (the smallest normal float, as the engine's ``t_end``).
T_SPAN_MIN = float(np.finfo(np.float64).tiny)


def exact_drift_gamma(t, setting, *, gamma0, t0=0.0, n_positive=1, n_negative=1, eta=None, order=4, rtol=1e-10):
    r"""γ(t) of the drift law :math:`\dot\gamma = -\frac{4pn}{H}\frac{\gamma^4}{\eta^2}\partial_\gamma\Phi` from ``γ(t0) = gamma0``.

    Integrated numerically in :math:`\log\gamma` (LSODA); the law has no universal origin
    once :math:`A_2 \ne 0`, hence the required ``gamma0``. For ``gamma0`` above the root
    of :math:`\partial_\gamma\Phi`, γ decreases toward it and never below.

    Parameters
    ----------
    t : float or array_like, >= t0, at most 1e15
        Flow time (as in :func:`reduced_dynamics.integrate`).
    setting : Setting
        Scalar and isotropic.
    gamma0 : float, in (0, 1]
    t0 : float
    n_positive, n_negative : int, >= 1
    eta : float, optional
        Default η*.
    order : {4, 6}
    rtol : float, in [1e-13, 1e-3]

    Returns
    -------
    float or ndarray, like ``t``
    """
    from scipy.integrate import solve_ivp

    setting = _scalar(setting, "exact_drift_gamma")
    p, n = _head_counts(n_positive, n_negative)
    order = _check_order(order)
    g0 = check_finite_float("gamma0", gamma0)
    if not 0 < g0 <= 1:
        raise ValueError(f"`gamma0` must be in (0, 1], got {gamma0!r}")
    t0 = check_finite_float("t0", t0)
    t = check_finite_array("t", t)
    if np.any(t < t0) or np.any(t > 1e15):
        raise ValueError(f"`t` must lie in [t0, 1e15] = [{t0}, 1e15], got {t!r}")
    if np.any((t > t0) & (t - t0 < T_SPAN_MIN)):
        raise ValueError(
            f"`t` must be t0 or at least t0 + {T_SPAN_MIN:.6g} (a normal float: the solver's steps below it are "
            f"subnormal and never end), got {t!r}"
        )
    rtol = check_finite_float("rtol", rtol)
    if not 1e-13 <= rtol <= 1e-3:
        raise ValueError(f"`rtol` must be in [1e-13, 1e-3], got {rtol!r}")
    eta = setting.eta_star if eta is None else _check_eta(eta)
    a = _coefficients(setting, eta, order)
    kappa = 4 * p * n / (p + n) / eta**2

    def rhs(_, y):  # y = log γ
        g2 = math.exp(2 * y[0])
        return [-kappa * g2 * g2 * sum(2 * (j + 1) * a[j] * g2**j for j in range(len(a)))]

    flat = np.atleast_1d(t).ravel()
    order_idx = np.argsort(flat)
    ts = flat[order_idx]
    if ts[-1] == t0:
        out = np.full(flat.shape, g0)
    else:
        sol = solve_ivp(
            rhs, (t0, float(ts[-1])), [math.log(g0)], method="LSODA", t_eval=ts, rtol=rtol, atol=1e-12 * rtol
        )
        if not sol.success:
            raise RuntimeError(f"exact_drift_gamma: the integration failed: {sol.message}")
        out = np.empty(flat.shape)
        out[order_idx] = np.exp(sol.y[0])
    out = out.reshape(t.shape)
    return float(out) if out.ndim == 0 else out


# ---------------------------------------------------------- paired Monte Carlo


@dataclass(frozen=True)
class ManifoldExcess(FrozenResult):
    r""":math:`\Phi(\gamma;\eta) - R_{\rm dgd}(\eta)` on the manifold, with its uncertainty.

    Attributes
    ----------
    gamma : ndarray, shape (G,)
    eta : float
    excess : ndarray, shape (G,)
        The estimate.
    stderr : ndarray, shape (G,)
        Standard error (0 for an exact evaluation).
    method : str
        ``"monte_carlo"`` (paired) or ``"exact"``.
    n : int
        Prompts (Monte Carlo), 0 otherwise.
    """

    gamma: np.ndarray
    eta: float
    excess: np.ndarray
    stderr: np.ndarray
    method: str
    n: int


def _paired_chunk(rng, m, d, L, s2, gammas, eta):
    r2 = rng.chisquare(d, size=m)
    r = np.sqrt(r2)[:, None]
    g = rng.standard_normal((m, L))
    b = g - g.mean(axis=1, keepdims=True)
    k = (d - 1) / d + s2

    def loss(w):
        return (r[:, 0] - np.sum(w * g, axis=1)) ** 2 / d + s2 + k * np.sum(w * w, axis=1)

    base = loss(eta / L * r * b)

    def sm(z):
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    out = np.empty((len(gammas), m))
    for i, gam in enumerate(gammas):
        w = eta / (2 * gam) * (sm(gam * r * b) - sm(-gam * r * b))
        out[i] = loss(w) - base
    return out


def manifold_excess_mc(gamma, setting, *, n_prompts, seed, eta=None, chunk=20_000) -> ManifoldExcess:
    r"""Paired Monte Carlo of :math:`\Phi(\gamma;\eta) - R_{\rm dgd}(\eta)` on the two-sign manifold.

    Per prompt, the Rao–Blackwellised conditional loss (docs/theory.md#measuring-risks) of
    the manifold weights :math:`w = \tfrac{\eta}{2\gamma}(\mathrm{softmax}(\gamma s) - \mathrm{softmax}(-\gamma s))`
    minus that of debiased GD, :math:`w = \tfrac{\eta}{L}(s - \bar s)`, on the same covariates:
    the difference is :math:`O(\gamma^2)` per prompt, so its mean is resolved far better
    than either risk. Independent of the expansion and of the exact evaluator.

    Parameters
    ----------
    gamma : float or array_like, shape (G,), each in [1e-3, 1]
    setting : Setting
        Scalar and isotropic.
    n_prompts : int, in [2, 1e9]
    seed : int >= 0
        Required.
    eta : float, optional
        Default η*.
    chunk : int, in [1, 1e6]
        Prompts per chunk (memory).

    Returns
    -------
    ManifoldExcess
    """
    setting = _scalar(setting, "manifold_excess_mc")
    gam = np.atleast_1d(check_finite_array("gamma", gamma)).astype(float)
    if gam.ndim != 1 or np.any(gam < 1e-3) or np.any(gam > 1):
        raise ValueError(f"`gamma` must be a number or 1-d array with entries in [1e-3, 1], got {gamma!r}")
    n_prompts = check_positive_int("n_prompts", n_prompts, hi=10**9)
    if n_prompts < 2:
        raise ValueError(f"`n_prompts` must be an integer in [2, 1e9], got {n_prompts}")
    seed = check_nonnegative_int("seed", seed)
    chunk = check_positive_int("chunk", chunk, hi=10**6)
    eta = _check_step(eta, setting)
    from reduced_dynamics.estimation.prompts import MEMORY_BUDGET

    need = 8 * 8 * min(chunk, n_prompts) * (setting.L + 2)
    if need > MEMORY_BUDGET:  # decided before anything is drawn (a chunk holds about 8 arrays of (m, L))
        raise ValueError(
            f"manifold_excess_mc: a chunk of {min(chunk, n_prompts)} prompts at `setting.L` = {setting.L} needs "
            f"{need / 2**30:.3g} GiB, more than the memory budget of {MEMORY_BUDGET / 2**30:g} GiB "
            "(reduced_dynamics.estimation.prompts.MEMORY_BUDGET); use a smaller `chunk`"
        )
    ss = np.random.SeedSequence([seed, setting.L, setting.d])
    s1 = np.zeros(gam.size)
    s2 = np.zeros(gam.size)
    done = 0
    while done < n_prompts:
        m = min(chunk, n_prompts - done)
        rng = np.random.default_rng(ss.spawn(1)[0])
        x = _paired_chunk(rng, m, setting.d, setting.L, setting.sigma2, gam, eta)
        s1 += x.sum(axis=1)
        s2 += (x * x).sum(axis=1)
        done += m
    mean = s1 / n_prompts
    var = np.maximum(s2 / n_prompts - mean**2, 0.0) * n_prompts / (n_prompts - 1)
    return ManifoldExcess(
        gamma=gam, eta=float(eta), excess=mean, stderr=np.sqrt(var / n_prompts), method="monte_carlo", n=n_prompts
    )


# ------------------------------------------------------- with the exact evaluator


def _exact_risk(omega, mu, setting, *, grad=False, tol=1e-12):
    from reduced_dynamics.exact.evaluator import exact_risk  # issue 13, section 1

    return exact_risk(np.asarray(omega, dtype=float), np.asarray(mu, dtype=float), setting, grad=grad, tol=tol)


def _check_gammas(gamma, lo=1e-3, hi=1.0):
    gam = np.atleast_1d(check_finite_array("gamma", gamma)).astype(float)
    if gam.ndim != 1 or gam.size == 0 or np.any(gam < lo) or np.any(gam > hi):
        raise ValueError(f"`gamma` must be a number or 1-d array with entries in [{lo:g}, {hi:g}], got {gamma!r}")
    return gam


def manifold_excess_exact(gamma, setting, *, eta=None, tol=1e-12) -> ManifoldExcess:
    r""":math:`\Phi(\gamma;\eta) - R_{\rm dgd}(\eta)` from the exact evaluator, at ω = (γ, −γ), μ = (M, −M), M = η/(2γ).

    Two heads suffice: heads of one sign add, so the manifold risk does not depend on p, n.

    Parameters
    ----------
    gamma : float or array_like, entries in [1e-3, 1]
    setting : Setting
        Scalar and isotropic.
    eta : float, optional
        Default η*.
    tol : float
        Passed to the exact evaluator.

    Returns
    -------
    ManifoldExcess
        ``stderr`` holds the evaluator's error estimates.
    """
    from reduced_dynamics.exact.expansion import dgd_risk

    setting = _scalar(setting, "manifold_excess_exact")
    gam = _check_gammas(gamma)
    eta = _check_step(eta, setting)
    r0 = float(dgd_risk(eta, setting))
    vals, errs = [], []
    for g in gam:
        M = eta / (2 * g)
        r = _exact_risk([g, -g], [M, -M], setting, tol=tol)
        vals.append(r.risk - r0)
        errs.append(r.error_estimate)
    return ManifoldExcess(gamma=gam, eta=float(eta), excess=np.array(vals), stderr=np.array(errs), method="exact", n=0)


@dataclass(frozen=True)
class RichardsonCoefficients(FrozenResult):
    r"""A₂, A₄ extracted from the exact evaluator (:func:`richardson_coefficients`), against the closed forms.

    Attributes
    ----------
    gamma : ndarray, shape (G,)
        The γ used.
    a2, a4 : float
        Fitted coefficients.
    a2_closed, a4_closed : float
        :func:`~reduced_dynamics.exact.expansion.exact_manifold_coefficients`.
    a2_residual, a4_residual : float
        Relative differences fitted/closed − 1.
    fit_degree : int
        Highest power of γ² in the fit of :math:`(\Phi - R_{\rm dgd})/\gamma^2`.
    eta : float
    """

    gamma: np.ndarray
    a2: float
    a4: float
    a2_closed: float
    a4_closed: float
    a2_residual: float
    a4_residual: float
    fit_degree: int
    eta: float


def richardson_coefficients(
    setting, *, eta=None, gamma=(0.01, 0.015, 0.02, 0.025, 0.03, 0.04), fit_degree=3, tol=1e-13
):
    r"""Extract :math:`A_2, A_4` from the exact evaluator by polynomial extrapolation in γ² to γ = 0.

    Fits :math:`(\Phi(\gamma;\eta) - R_{\rm dgd}(\eta))/\gamma^2 = A_2 + A_4\gamma^2 + \dots` (degree
    ``fit_degree`` in γ², least squares) and compares with the closed forms.

    Parameters
    ----------
    setting : Setting
        Scalar and isotropic.
    eta : float, optional
        Default η*.
    gamma : sequence of float, entries in [1e-3, 0.3], more than ``fit_degree + 1`` of them
    fit_degree : int, in [1, 6]
    tol : float
        Passed to the exact evaluator.

    Returns
    -------
    RichardsonCoefficients
    """
    setting = _scalar(setting, "richardson_coefficients")
    gam = _check_gammas(gamma, 1e-3, 0.3)
    fit_degree = check_positive_int("fit_degree", fit_degree, hi=6)
    if gam.size <= fit_degree + 1:
        raise ValueError(f"`gamma` must have more than fit_degree + 1 = {fit_degree + 1} entries, got {gam.size}")
    ex = manifold_excess_exact(gam, setting, eta=eta, tol=tol)
    y = ex.excess / gam**2
    coef = np.polynomial.polynomial.polyfit(gam**2, y, fit_degree)
    c = exact_manifold_coefficients(ex.eta, setting)
    if float(c.a2) == 0 or float(c.a4) == 0:
        raise ValueError(
            f"`eta` = {ex.eta:g}: a closed-form coefficient A_2 or A_4 vanishes there (no relative residual); "
            "use another `eta`"
        )
    return RichardsonCoefficients(
        gamma=gam,
        a2=float(coef[0]),
        a4=float(coef[1]),
        a2_closed=float(c.a2),
        a4_closed=float(c.a4),
        a2_residual=float(coef[0] / c.a2 - 1),
        a4_residual=float(coef[1] / c.a4 - 1),
        fit_degree=fit_degree,
        eta=ex.eta,
    )


@dataclass(frozen=True)
class ExactManifoldMinimum(FrozenResult):
    r"""Minimiser of the exact risk on the two-sign manifold (:func:`exact_manifold_minimum`).

    Attributes
    ----------
    gamma : float
        :math:`\gamma_{\min}`.
    mass : float
        OV mass M (positive heads total M, negative −M).
    eta : float
        :math:`2\gamma_{\min}M`.
    risk : float
        Exact risk there.
    error_estimate : float
    depth : float
        ``risk`` minus the debiased-GD optimum :math:`R_{\rm dgd}(\eta^*) = 1+\sigma^2-\eta^*(1-1/L)` (negative).
    gamma_estimate, depth_estimate : float
        Leading-order :func:`~reduced_dynamics.exact.expansion.manifold_minimiser_estimate`.
    hessian_eigenvalues : ndarray, shape (4,) or (0,)
        Of the full (ω₁, ω₂, μ₁, μ₂) Hessian of the exact risk at the two-head state (central
        differences of the exact gradient), if requested: first the two of the manifold sector
        (γ, M), then the two of the transverse sector (mean ω, Σμ), which the symmetry
        (ω, μ) → (−ω, −μ) with the heads swapped decouples. All positive means a strict local
        minimum of the H = 2 risk, not only on the manifold.
    evaluations : int
    setting : Setting
    """

    gamma: float
    mass: float
    eta: float
    risk: float
    error_estimate: float
    depth: float
    gamma_estimate: float
    depth_estimate: float
    hessian_eigenvalues: np.ndarray
    evaluations: int
    setting: object


def _profile_over_mass(g, setting, tol):
    """min over M of the exact risk at ω = (γ, −γ), μ = (M, −M): quadratic in M."""
    r = _exact_risk([g, -g], [1.0, -1.0], setting, tol=tol)
    b, A = np.asarray(r.linear_coef), np.asarray(r.quadratic_coef)
    lin = b[0] - b[1]
    quad = A[0, 0] - 2 * A[0, 1] + A[1, 1]
    M = lin / quad
    return 1 + setting.sigma2 - lin * lin / quad, M, r.error_estimate


def exact_manifold_minimum(setting, *, bracket=None, gamma_tol=1e-6, tol=1e-12, hessian=True) -> ExactManifoldMinimum:
    r"""Minimise the exact risk over the two-sign manifold (γ and the OV mass), and test it in the full space.

    At fixed γ the risk is quadratic in the mass, so one evaluation gives the minimum over M;
    a golden-section search in γ does the rest. With ``hessian=True`` the 4×4 Hessian of the
    H = 2 risk at the minimiser is formed by central differences of the exact gradient.

    Parameters
    ----------
    setting : Setting
        Scalar and isotropic.
    bracket : (float, float), optional
        Search interval of γ; default ``(γ_est/4, 3γ_est)`` around the leading-order estimate.
    gamma_tol : float, in [1e-9, 1e-2]
    tol : float
        Passed to the exact evaluator.
    hessian : bool

    Returns
    -------
    ExactManifoldMinimum

    References
    ----------
    docs/theory.md#exact-risk
    """
    setting = _scalar(setting, "exact_manifold_minimum")
    hessian = check_bool("hessian", hessian)
    gamma_tol = check_finite_float("gamma_tol", gamma_tol)
    if not 1e-9 <= gamma_tol <= 1e-2:
        raise ValueError(f"`gamma_tol` must be in [1e-9, 1e-2], got {gamma_tol!r}")
    est = manifold_minimiser_estimate(setting)
    if bracket is None:
        lo, hi = float(est.gamma) / 4, min(3 * float(est.gamma), 0.9)
    else:
        lo, hi = _check_bracket(bracket, "1e-3 <= lo < hi <= 1")
        if not (1e-3 <= lo < hi <= 1):
            raise ValueError(f"`bracket` must be a pair (lo, hi), 1e-3 <= lo < hi <= 1, got {bracket!r}")
    cache = {}

    def f(g):
        if g not in cache:
            cache[g] = _profile_over_mass(g, setting, tol)
        return cache[g][0]

    g, _ = _golden_section_min(f, lo, hi, gamma_tol)
    if min(g - lo, hi - g) < 10 * gamma_tol:
        if bracket is not None:
            raise ValueError(f"`bracket`: the minimum over γ is at its edge ({lo:g}, {hi:g}); widen or move it")
        raise ValueError(
            f"`setting` (d = {setting.d}, L = {setting.L}, sigma2 = {setting.sigma2:g}): the minimum over γ is at the "
            f"edge of the search range ({lo:g}, {hi:g}) around the leading-order estimate γ = {float(est.gamma):.4g} "
            "(the 1/L expansion does not place it here); give a `bracket`"
        )
    risk, M, err = cache[g]
    r0 = 1 + setting.sigma2 - setting.eta_star * (1 - 1 / setting.L)
    evals = len(cache)
    eig = np.zeros(0)
    if hessian:
        # central differences of the exact gradient, step 1e-5 relative to each coordinate; the
        # symmetry (ω, μ) -> (-ω, -μ) with the heads swapped decouples the manifold sector (γ, M)
        # from the transverse sector (δ = mean ω, S = Σμ), so the blocks are diagonalised separately
        th = np.array([g, -g, M, -M])
        Hm = np.empty((4, 4))
        for i in range(4):
            h = 1e-5 * abs(th[i])
            gp, gm = [], []
            for sgn, store in ((1, gp), (-1, gm)):
                t2 = th.copy()
                t2[i] += sgn * h
                r = _exact_risk(t2[:2], t2[2:], setting, grad=True, tol=tol)
                store.append(np.concatenate([r.grad_omega, r.grad_mu]))
            Hm[:, i] = (gp[0] - gm[0]) / (2 * h)
            evals += 2
        U = np.array([[1, -1, 0, 0], [0, 0, 1, -1], [1, 1, 0, 0], [0, 0, 1, 1]]) / math.sqrt(2)
        B = U @ (0.5 * (Hm + Hm.T)) @ U.T
        eig = np.concatenate([np.linalg.eigvalsh(B[:2, :2]), np.linalg.eigvalsh(B[2:, 2:])])
    return ExactManifoldMinimum(
        gamma=float(g),
        mass=float(M),
        eta=float(2 * g * M),
        risk=float(risk),
        error_estimate=float(err),
        depth=float(risk - r0),
        gamma_estimate=float(est.gamma),
        depth_estimate=float(est.depth),
        hessian_eigenvalues=eig,
        evaluations=evals,
        setting=setting,
    )
