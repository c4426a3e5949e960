r"""The single head exactly: its finite-L optimum and the large-L limit (docs/theory.md#exact-risk).

**Quadratic in μ.** For H = 1 the risk is :math:`\mathcal E(\omega,\mu) = 1 + \sigma^2 - 2\mu A(\omega) + \mu^2 B(\omega)`
(docs/theory.md#single-head), so :math:`\mu^*(\omega) = A/B` and the profile
:math:`1 + \sigma^2 - A^2/B` is a one-dimensional problem. :func:`exact_single_head_profile`
reads :math:`A, B` from two evaluations of the exact risk
(:func:`reduced_dynamics.exact.evaluator.exact_risk`) at :math:`\mu = \pm1`, and
:func:`exact_single_head_optimum` minimises the profile.

**Large-L limit (closed form).** The corrected loss
(:mod:`reduced_dynamics.dynamics.corrected_loss`) for one head, with :math:`u = \mu\omega`,
:math:`v = \omega^2`, :math:`q = 1 - 2v`, is
:math:`\sigma^2 + (1-u)^2 + \tfrac1L\big[2(1-u)u\,q^{-d/2-1} + \tfrac{u^2}{v}\big((1+\sigma^2)q^{-d/2} + v\,q^{-d/2-1}\big)\big]`.
At the optimum :math:`1 - u = O(1/L)`, so the cross term is :math:`O(L^{-2})` and, to order
1/L, ω minimises

.. math:: F(v) = \frac{(1+\sigma^2)(1-2v)^{-d/2}}{v} + (1-2v)^{-d/2-1}.

:math:`F'(v) = 0` multiplied by :math:`v^2(1-2v)^{d/2+2}` is
:math:`(1+\sigma^2)(1-2v)\big((d+2)v - 1\big) + (d+2)v^2 = 0`, i.e. the quadratic

.. math:: (d+2)(1+2\sigma^2)\,v^2 - (1+\sigma^2)(d+4)\,v + (1+\sigma^2) = 0,

whose smaller root is the limit:

.. math::

    \omega_\infty^2 = \frac{(1+\sigma^2)(d+4) - \sqrt{(1+\sigma^2)^2(d+4)^2 - 4(d+2)(1+\sigma^2)(1+2\sigma^2)}}
                           {2(d+2)(1+2\sigma^2)},
    \qquad \mu_\infty = 1/\omega_\infty,
    \qquad \mathcal E_{\min} = \sigma^2 + F(\omega_\infty^2)/L + O(L^{-2}).

(At d = 5, σ² = 0.1: :math:`\omega_\infty = 0.35242`, against L̃'s :math:`1/\sqrt d = 0.44721`.
L̃ has :math:`F = (1+\sigma^2)e^{dv}/v`, minimised at v = 1/d.) Rate of approach
(measured with the exact evaluator, not derived): :math:`L(\omega^*_L - \omega_\infty)` = 23.9,
31.4, 39.1, 47.0 at L = 10240, 40960, 163840, 655360, i.e. about :math:`(a + b\ln L)/L`,
b ≈ 5.6 (docs/theory.md#single-head-exactly).

**Where the corrected loss can be trusted.** Its :math:`1/L` term averages
:math:`e^{\omega^2 r^2}` over :math:`r^2 \sim \chi^2_d` and exists for :math:`\omega^2 < 1/2`
(:data:`OMEGA_CORRECTED_EXISTS`). The next term of the 1/L expansion contains the third
moment of the softmax denominator, :math:`E[e^{3\omega s}]/E[e^{\omega s}]^3 = e^{3\omega^2r^2}`,
whose χ² average exists only for :math:`\omega^2 < 1/6` (:data:`OMEGA_CORRECTED_SECOND_ORDER`,
:math:`|\omega| < 0.408`). Inside, the corrected loss's error is :math:`O(L^{-2})`; beyond, the
:math:`O(L^{-2})` coefficient is infinite and the error decays more slowly. A heuristic
(the expansion of the softmax average holds for queries with
:math:`e^{\omega^2 r^2} \ll L^{1/2}`; the rest has χ² probability
:math:`\approx L^{-1/(4\omega^2)}`) predicts the exponent
:math:`\min\{2, \tfrac12 + \tfrac1{4\omega^2}\}` (:func:`corrected_loss_error_exponent`); the
exact evaluator measures it (docs/theory.md#exact-risk).

References
----------
docs/theory.md#exact-risk, docs/theory.md#single-head, docs/theory.md#corrected-loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_finite_float
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "OMEGA_CORRECTED_EXISTS",
    "OMEGA_CORRECTED_SECOND_ORDER",
    "SingleHeadLimit",
    "ExactSingleHeadProfile",
    "ExactSingleHeadOptimum",
    "single_head_limit",
    "corrected_loss_error_exponent",
    "exact_single_head_profile",
    "exact_single_head_optimum",
]

#: |ω| beyond which the corrected loss's 1/L term (χ² average of e^{ω²r²}) does not exist: 1/√2.
OMEGA_CORRECTED_EXISTS = 1.0 / math.sqrt(2.0)
#: |ω| beyond which the O(1/L²) term of the expansion (χ² average of e^{3ω²r²}) does not exist: 1/√6.
OMEGA_CORRECTED_SECOND_ORDER = 1.0 / math.sqrt(6.0)


@dataclass(frozen=True)
class SingleHeadLimit(FrozenResult):
    r"""The L → ∞ optimum of the single head (:func:`single_head_limit`).

    Attributes
    ----------
    omega : float or ndarray
        :math:`\omega_\infty` (positive branch; −ω, −μ is the other).
    mu : float or ndarray
        :math:`\mu_\infty = 1/\omega_\infty`.
    F : float or ndarray
        :math:`F(\omega_\infty^2)`: the risk is :math:`\sigma^2 + F/L + O(L^{-2})` at the optimum.
    omega_approx : float or ndarray
        L̃'s optimum :math:`1/\sqrt d`, for comparison.
    """

    omega: float | np.ndarray
    mu: float | np.ndarray
    F: float | np.ndarray
    omega_approx: float | np.ndarray


def _out(x):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def single_head_limit(setting) -> SingleHeadLimit:
    r"""Closed-form large-L optimum of the single head from the corrected loss (module docstring).

    Parameters
    ----------
    setting : Setting
        Isotropic; ``L`` does not enter; may be array-valued (the result broadcasts).

    Returns
    -------
    SingleHeadLimit

    References
    ----------
    docs/theory.md#exact-risk

    Examples
    --------
    >>> round(single_head_limit(Setting(d=5, L=40, sigma2=0.1)).omega, 5)
    0.35242
    """
    setting = as_setting(setting)
    setting.require_isotropic("single_head_limit").require_softmax("single_head_limit")
    d = np.asarray(setting.d, dtype=np.float64)
    s = np.asarray(setting.sigma2, dtype=np.float64)
    a = (d + 2) * (1 + 2 * s)
    b = (1 + s) * (d + 4)
    c = 1 + s
    disc = b * b - 4 * a * c  # = (1+σ²)[(1+σ²)(d+4)² − 4(d+2)(1+2σ²)] > 0 (tested over a grid)
    v = (b - np.sqrt(disc)) / (2 * a)
    q = 1 - 2 * v
    F = (1 + s) * q ** (-d / 2) / v + q ** (-d / 2 - 1)
    w = np.sqrt(v)
    return SingleHeadLimit(omega=_out(w), mu=_out(1 / w), F=_out(F), omega_approx=_out(1 / np.sqrt(d)))


def corrected_loss_error_exponent(omega):
    r"""Heuristic exponent p of the corrected loss's error :math:`\propto L^{-p}` at KQ scale ω.

    :math:`p = \min\{2, \tfrac12 + \tfrac1{4\omega^2}\}` for :math:`\omega^2 < 1/2` (module
    docstring); the corrected loss does not exist for :math:`\omega^2 \ge 1/2`.

    Parameters
    ----------
    omega : float or array_like, with 0 < |omega| < 1/√2

    Returns
    -------
    float or ndarray
    """
    w = check_finite_array("omega", omega)
    if np.any(w == 0) or np.any(np.abs(w) >= OMEGA_CORRECTED_EXISTS):
        raise ValueError(f"`omega` must satisfy 0 < |omega| < 1/√2 = {OMEGA_CORRECTED_EXISTS:.6f}, got {omega!r}")
    with np.errstate(divide="ignore", over="ignore"):  # a tiny omega: the bound 2 applies
        return _out(np.minimum(2.0, 0.5 + 1.0 / (4.0 * w * w)))


# ------------------------------------------------------------ exact optimum


def _exact_risk(omega, mu, setting, tol):
    from reduced_dynamics.exact.evaluator import exact_risk  # the exact evaluator (issue 13, section 1)

    return exact_risk(np.array([omega]), np.array([mu]), setting, tol=tol)


@dataclass(frozen=True)
class ExactSingleHeadProfile(FrozenResult):
    r"""Coefficients of :math:`\mathcal E = 1 + \sigma^2 - 2\mu A + \mu^2 B` at one ω, from the exact evaluator.

    Attributes
    ----------
    omega : float
    A, B : float
    error_estimate : float
        The evaluator's error estimate of the risk at μ = 1.
    mu_opt : float
        Property: :math:`A/B`.
    risk_opt : float
        Property: :math:`1 + \sigma^2 - A^2/B` (needs ``sigma2``; see :attr:`sigma2`).
    sigma2 : float
    """

    omega: float
    A: float
    B: float
    error_estimate: float
    sigma2: float

    @property
    def mu_opt(self) -> float:
        return self.A / self.B

    @property
    def risk_opt(self) -> float:
        return 1.0 + self.sigma2 - self.A**2 / self.B


def exact_single_head_profile(omega, setting, *, tol=1e-12) -> ExactSingleHeadProfile:
    r""":math:`A(\omega)`, :math:`B(\omega)` of the single head from one evaluation of the exact risk.

    The evaluator returns the risk as the quadratic form
    :math:`1 + \sigma^2 - 2\mu^\top b + \mu^\top A\mu`; for one head :math:`A(\omega) = b_1`,
    :math:`B(\omega) = A_{11}`.

    Parameters
    ----------
    omega : float, 0 < |omega| <= 3
    setting : Setting
        Scalar and isotropic.
    tol : float
        Passed to the exact evaluator.

    Returns
    -------
    ExactSingleHeadProfile
    """
    setting = as_setting(setting, "exact_single_head_profile")
    setting.require_scalar("exact_single_head_profile")
    setting.require_isotropic("exact_single_head_profile").require_softmax("exact_single_head_profile")
    w = check_finite_float("omega", omega)
    if not 0 < abs(w) <= 3:
        raise ValueError(f"`omega` must satisfy 0 < |omega| <= 3, got {omega!r}")
    r = _exact_risk(w, 1.0, setting, tol)
    A = float(np.asarray(r.linear_coef)[0])
    B = float(np.asarray(r.quadratic_coef)[0, 0])
    return ExactSingleHeadProfile(
        omega=w,
        A=A,
        B=B,
        error_estimate=float(r.error_estimate),
        sigma2=float(setting.sigma2),
    )


@dataclass(frozen=True)
class ExactSingleHeadOptimum(FrozenResult):
    r"""Exact finite-L optimum of the single head (:func:`exact_single_head_optimum`).

    Attributes
    ----------
    omega, mu : float
        The optimum (positive branch).
    risk : float
        Its exact risk.
    error_estimate : float
        The evaluator's error estimate at the optimum.
    omega_tol : float
        Bracket width of the ω search at the end.
    omega_limit, mu_limit : float
        The L → ∞ limit (:func:`single_head_limit`).
    omega_approx : float
        L̃'s optimum 1/√d.
    risk_limit_form : float
        :math:`\sigma^2 + F(\omega_\infty^2)/L`, the large-L risk to order 1/L.
    evaluations : int
        Calls of the exact evaluator.
    setting : Setting
    """

    omega: float
    mu: float
    risk: float
    error_estimate: float
    omega_tol: float
    omega_limit: float
    mu_limit: float
    omega_approx: float
    risk_limit_form: float
    evaluations: int
    setting: Setting


def _default_bracket(setting) -> tuple[float, float]:
    """The search range (min(0.05, 0.25/√d), min(1.2, omega_max)): the optimum moves in like L̃'s 1/√d
    (at d = 1000 it is near 0.035, below 0.05), and the evaluator's range shrinks as d grows."""
    from reduced_dynamics.exact.evaluator import omega_max

    return min(0.05, 0.25 / math.sqrt(setting.d)), min(1.2, 0.999 * float(omega_max(setting)))


def _gain(p) -> float:
    r""":math:`A^2/B` of a profile: the risk is :math:`1 + \sigma^2 - A^2/B`, so maximising the gain minimises it
    without the cancellation of ``risk_opt`` (at σ² = 1e12 the risk rounds to 1 + σ² for every ω)."""
    return p.A**2 / p.B


def _check_interior_optimum(setting, *, bracket=None, tol=1e-12, _profile=None) -> None:
    r"""Raise ``ValueError`` if the single-head risk still decreases at the upper end of ``bracket``.

    Two exact evaluations (at ``hi`` and ``0.98 hi``). For short prompts the best single head is close
    to a hard-max (nearest-neighbour) attention, beyond the evaluator's range of ω; this is a property
    of the setting (``L`` too short), reported before any search. The CLI calls it before it starts.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic, finite ``L``.
    bracket : tuple of float
        The search range ``(lo, hi)`` of :func:`exact_single_head_optimum`.
    tol : float
        Quadrature tolerance of the two evaluations.

    Raises
    ------
    ValueError
        If ``L < 2``, or if the risk at ``hi`` is below the risk at ``0.98 hi`` (compared through
        :math:`A^2/B`, free of the rounding of :math:`1 + \sigma^2` at a large ``sigma2``).
    """
    if setting.L < 2:
        raise ValueError(f"`L` must be an integer >= 2 for the exact finite-L risk, got {setting.L}")
    hi = float((bracket or _default_bracket(setting))[1])
    prof = _profile or (lambda w: exact_single_head_profile(w, setting, tol=tol))
    if _gain(prof(hi)) > _gain(prof(0.98 * hi)):
        raise ValueError(
            f"`L` = {setting.L} is too short for an interior single-head optimum at d = {setting.d}, "
            f"`sigma2` = {float(setting.sigma2):g}: the exact risk still decreases at |omega| = {hi:g} "
            f"(the end of the search range; the best head is close to a hard-max attention); use a larger `L` "
            "(or a smaller `sigma2`: the larger the noise, the sharper the best head)"
        )


def _golden_section_min(f, lo: float, hi: float, xtol: float) -> tuple[float, float]:
    """Golden-section search for the minimiser of a unimodal ``f`` on ``[lo, hi]``, to a bracket of width ``xtol``.

    Deterministic and derivative-free; ``f`` is called once per new point (callers cache it). Returns the
    better of the two interior points of the final bracket and that bracket's width (<= ``xtol``). Shared by :func:`exact_single_head_optimum`
    and :func:`reduced_dynamics.exact.drift.exact_manifold_minimum`.
    """
    gr = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d_ = b - gr * (b - a), a + gr * (b - a)
    fc, fd = f(c), f(d_)
    while b - a > xtol:
        if fc < fd:
            b, d_, fd = d_, c, fc
            c = b - gr * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d_, fd
            d_ = a + gr * (b - a)
            fd = f(d_)
    return (c if fc < fd else d_), b - a


def exact_single_head_optimum(setting, *, tol=1e-12, omega_tol=1e-7, bracket=None) -> ExactSingleHeadOptimum:
    r"""Minimise the exact single-head risk: golden-section search of the profile :math:`1+\sigma^2-A^2/B` in ω.

    Parameters
    ----------
    setting : Setting
        Scalar and isotropic.
    tol : float
        Passed to the exact evaluator.
    omega_tol : float, in [1e-10, 1e-2]
        Width of the final ω bracket.
    bracket : (float, float), 0 < lo < hi <= 3, optional
        Search interval of ω (the profile is unimodal there at the settings tested). Default
        ``(0.05, min(1.2, omega_max(setting)))``. For short prompts the risk still decreases at its
        upper end (the best head is close to a hard-max attention): ``ValueError`` naming ``L``.

    Returns
    -------
    ExactSingleHeadOptimum

    References
    ----------
    docs/theory.md#exact-risk
    """
    setting = as_setting(setting, "exact_single_head_optimum")
    setting.require_scalar("exact_single_head_optimum")
    setting.require_isotropic("exact_single_head_optimum").require_softmax("exact_single_head_optimum")
    omega_tol = check_finite_float("omega_tol", omega_tol)
    if not 1e-10 <= omega_tol <= 1e-2:
        raise ValueError(f"`omega_tol` must be in [1e-10, 1e-2], got {omega_tol!r}")
    given = bracket is not None
    if bracket is None:
        bracket = _default_bracket(setting)
    try:
        lo, hi = bracket
        lo, hi = check_finite_float("bracket", lo), check_finite_float("bracket", hi)
    except (TypeError, ValueError):
        raise ValueError(f"`bracket` must be a pair (lo, hi) with 0 < lo < hi <= 3, got {bracket!r}") from None
    if not (0 < lo < hi <= 3 and math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"`bracket` must be a pair (lo, hi) with 0 < lo < hi <= 3, got {bracket!r}")
    cache: dict[float, ExactSingleHeadProfile] = {}

    def prof(w):
        if w not in cache:
            cache[w] = exact_single_head_profile(w, setting, tol=tol)
        return cache[w]

    if not given:  # a property of the setting (L too short, a very large sigma2); a given bracket: widen it
        _check_interior_optimum(setting, bracket=(lo, hi), tol=tol, _profile=prof)

    def f(w):  # minus the gain A²/B: the same minimiser as risk_opt, without its cancellation at a large sigma2
        return -_gain(prof(w))

    w, width = _golden_section_min(f, lo, hi, omega_tol)
    for edge, at in (("lower", lo), ("upper", hi)):
        if abs(w - at) < 10 * omega_tol:
            where = (
                f"of `bracket` = {bracket!r}: widen it"
                if given
                else f"of the search range ({lo:.4g}, {hi:.4g}) at `d` = {setting.d}, `L` = {setting.L}, "
                f"`sigma2` = {float(setting.sigma2):g}: the exact optimum is outside the evaluator's range here"
            )
            raise ValueError(f"the single-head risk decreases up to the {edge} edge {where}")
    p = prof(w)
    mu = p.mu_opt
    final = _exact_risk(w, mu, setting, tol)
    lim = single_head_limit(setting)
    return ExactSingleHeadOptimum(
        omega=float(w),
        mu=float(mu),
        risk=float(final.risk),
        error_estimate=float(final.error_estimate),
        omega_tol=float(width),
        omega_limit=float(lim.omega),
        mu_limit=float(lim.mu),
        omega_approx=float(lim.omega_approx),
        risk_limit_form=float(setting.sigma2 + lim.F / setting.L),
        evaluations=len(cache) + 1,
        setting=setting,
    )
