r"""Closed forms of Theorem 1: one-step GD risks, the Bayes risk, and the ratio bound.

Data model (docs/theory.md#data-model): ``x_l, x_q ~ N(0, I_d)``, ``β ~ N(0, I_d/d)``,
``ε ~ N(0, σ²)``, ``y_l = βᵀx_l + ε_l``, noisy target ``y_q = βᵀx_q + ε_q``;
the risk ``E[(y_q − ŷ)²]`` includes the irreducible σ².

Summary of what is derived below (each function's docstring has the details):

* exact finite-(d, L) risk of vanilla and debiased one-step GD
  (:func:`gd_risk`), their optimal steps (:func:`gd_optimal_eta`) and optimal
  risks (:func:`gd_optimal_risk`). The optimal debiased step equals
  ``η* = 1/(1 + (1+σ²)d/L)`` **exactly** at every finite ``L ≥ 2``. They take
  a :class:`~reduced_dynamics.setting.Setting` and broadcast over ``eta`` and
  over array-valued settings;
* the proportional limit ``L → ∞, d/L → ξ`` of the debiased risk at ``η*``,
  ``σ² + 1 − η*`` (:func:`gd_risk_limit`) — as docs/theory.md#theorem-1 states;
* the limiting Bayes risk from the Marchenko–Pastur Stieltjes transform
  (:func:`bayes_risk_limit`) — it agrees with docs/theory.md#theorem-1;
* Theorem 1(c)'s ratio (:func:`risk_ratio_limit`), its right-hand side
  (:func:`risk_ratio_bound`), and the cancellation-free differences
  ``r − 1`` (:func:`risk_ratio_excess`), ``U − r`` (:func:`bound_slack`) and
  ``(U − r)/(U − 1)`` (:func:`bound_relative_slack`), derived in
  :mod:`proofs_check.bayes`;
* 50-digit mpmath versions (``*_mp``) for regions where float64 cancels;
* a Rao–Blackwellised Monte Carlo of the finite-(d, L) Bayes risk
  (:func:`bayes_risk_finite`) and the finite-L risk ratio
  (:func:`risk_ratio_finite`).

The library uses these closed forms itself (the top-level ``risk_ratio_excess`` and
``bound_slack``, the ``risk`` command's exact column, the figures), so they live here, in the
library; :mod:`proofs_check.closed_forms` re-exports them for the checks (the checker imports
the library, never the reverse). mpmath is imported only by the ``*_mp`` functions.

The proportional-limit functions depend only on ``σ²`` and ``ξ = d/L`` (there
is no finite ``d`` or ``L``), so they take ``sigma2`` and ``xi`` as
keyword-only arguments instead of a setting (docs/conventions.md); they
broadcast over them.

References
----------
docs/theory.md#data-model, docs/theory.md#predictors, docs/theory.md#theorem-1,
docs/theory.md#bayes-ratio; He, Pan, Chen, Yang (ICML 2025), Theorem 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.estimation._threads import single_blas_thread
from reduced_dynamics.estimation.prompts import as_generator, check_n_prompts, chunk_sizes
from reduced_dynamics.estimation.risk import RiskEstimate, _Moments
from reduced_dynamics.setting import as_setting

__all__ = [
    # finite (d, L)
    "gd_risk",
    "gd_optimal_eta",
    "gd_optimal_risk",
    "bayes_risk_finite",
    "risk_ratio_finite",
    "RatioEstimate",
    # proportional limit
    "gd_risk_limit",
    "bayes_risk_limit",
    "risk_ratio_limit",
    "risk_ratio_bound",
    "risk_ratio_excess",
    "bound_slack",
    "bound_relative_slack",
    "gd_risk_limit_mp",
    "bayes_risk_limit_mp",
    "risk_ratio_limit_mp",
    "risk_ratio_bound_mp",
    "DEFAULT_DPS",
]

#: Decimal digits used by the ``*_mp`` functions unless told otherwise.
DEFAULT_DPS = 50


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _setting_arrays(setting, where: str):
    """``(d, L, sigma2)`` of an isotropic (possibly array-valued) setting as float64 arrays."""
    setting = as_setting(setting)
    setting.require_isotropic(where)
    return (
        np.asarray(setting.d, dtype=np.float64),
        np.asarray(setting.L, dtype=np.float64),
        np.asarray(setting.sigma2, dtype=np.float64),
    )


def _check_debiased_L(L, debiased: bool) -> None:
    if debiased and np.any(np.asarray(L) < 2):
        bad = np.asarray(L)[np.asarray(L) < 2].ravel()[0] if np.ndim(L) else L
        raise ValueError(
            f"`L` must be an integer >= 2 for the optimal step of debiased GD (at L = 1 its prediction is 0 for every step), got {int(bad)!r}"
        )


#: Domain of ``σ²`` (besides 0 where allowed) and ``ξ`` of the proportional-limit functions:
#: every ``Setting`` lies inside (``ξ = d/L ∈ [1e-9, 1e5]``, ``σ² <= 1e12``); beyond it the
#: float64 formulas overflow, underflow or lose the ratio's deviation from 1 entirely.
LIMIT_RANGE = (1e-15, 1e15)

#: Largest allowed ``|eta|`` of :func:`gd_risk` (beyond it the risk overflows).
ETA_MAX = 1e12


def _reject_complex(name: str, value):
    if isinstance(value, complex) or np.iscomplexobj(value):
        raise ValueError(f"`{name}` must be real, got a complex value")


def _finite_array(name: str, value, *, bound=None) -> np.ndarray:
    """``value`` as a non-empty float64 array of finite reals (``|value| <= bound`` if given)."""
    _reject_complex(name, value)
    allowed = "a finite real number" if bound is None else f"a finite real number with |{name}| <= {bound:g}"
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be {allowed} (or an array of them), got {value!r}") from None
    if arr.size == 0 or not np.all(np.isfinite(arr)) or (bound is not None and np.any(np.abs(arr) > bound)):
        raise ValueError(f"`{name}` must be {allowed} (or an array of them), got {value!r}")
    return arr


def _as_param_array(name: str, value, *, allow_zero: bool) -> np.ndarray:
    """``value`` as a float64 array in :data:`LIMIT_RANGE` (or 0 when ``allow_zero``)."""
    _reject_complex(name, value)
    lo, hi = LIMIT_RANGE
    allowed = f"{'0 or ' if allow_zero else ''}a finite number in [{lo:g}, {hi:g}]"
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be {allowed}, got {value!r}") from None
    if arr.size == 0:
        raise ValueError(f"`{name}` must be {allowed}, got an empty array")
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(arr) & (arr >= lo) & (arr <= hi)
        if allow_zero:
            ok |= arr == 0
    if not np.all(ok):
        first = arr[~ok].ravel()[0] if arr.ndim else arr
        raise ValueError(f"`{name}` must be {allowed}, got {float(first)!r}")
    return arr


def _limit_params(sigma2, xi, *, allow_zero_sigma2: bool):
    """Validated ``(σ², ξ)`` broadcast together (ValueError naming the argument otherwise)."""
    s = _as_param_array("sigma2", sigma2, allow_zero=allow_zero_sigma2)
    x = _as_param_array("xi", xi, allow_zero=False)
    try:
        return np.broadcast_arrays(s, x)
    except ValueError:
        raise ValueError(f"`sigma2` and `xi` must broadcast together, got shapes {s.shape} and {x.shape}") from None


def _out(arr):
    arr = np.asarray(arr)
    return float(arr) if arr.ndim == 0 else arr


# ---------------------------------------------------------------------------
# exact finite-(d, L) risks of one-step GD
# ---------------------------------------------------------------------------


def _gd_coefficients(d, L, sigma2, debiased: bool):
    r"""``(b, c)`` with risk ``= 1 + σ² − 2 b η + c η²`` (see :func:`gd_risk`); broadcasts."""
    if debiased:
        b = (L - 1.0) / L
        c = (L - 1.0) * (L + d + sigma2 * d) / (L * L)
    else:
        b = np.ones_like(L)
        c = (L + d + 1.0 + sigma2 * d) / L
    return b, c


def gd_risk(eta, setting, *, debiased=False):
    r"""Exact finite-(d, L) risk of one-step GD (vanilla or debiased).

    .. math::

        \text{vanilla:}\quad R(\eta) = 1 + \sigma^2 - 2\eta
            + \eta^2\,\frac{L + d + 1 + \sigma^2 d}{L}, \\
        \text{debiased:}\quad R(\eta) = 1 + \sigma^2 - 2\eta\,\frac{L-1}{L}
            + \eta^2\,\frac{(L-1)(L + d + \sigma^2 d)}{L^2}.

    Derivation. Write the predictor as ``ŷ = η wᵀx_q`` with
    ``w = (1/L) Xᵀ M y``, ``X ∈ R^{L×d}`` the covariates, ``y = Xβ + ε`` and
    ``M = I_L`` (vanilla) or the centring matrix ``M = C = I − 11ᵀ/L``
    (debiased: ``Σ_l y_l (x_l − x̄) = XᵀCy``). Averaging over the independent
    ``x_q`` and ``ε_q`` gives ``R = σ² + E|β − ηw|²``, and

    * ``E βᵀw = (1/L) E βᵀ A β = (1/(Ld)) E tr A`` with ``A = XᵀMX``;
    * ``E|w|² = (1/L²)[(1/d) E tr A² + σ² E tr(XᵀM²X)]``.

    Vanilla: ``A = XᵀX`` is Wishart ``W_d(L, I)``, ``E A = L I``,
    ``E A² = L(L+d+1) I``, ``E tr XᵀX = Ld``.
    Debiased: ``C`` is an orthogonal projection of rank ``L − 1`` and ``X`` is
    rotation invariant on the left, so ``A = XᵀCX ~ W_d(L−1, I)``:
    ``E A = (L−1) I``, ``E A² = (L−1)(L+d) I``, ``E tr XᵀC²X = (L−1)d``.
    Substituting gives the two formulas (the noise–signal cross term has
    mean 0). Both are checked against Monte Carlo in the tests.

    Parameters
    ----------
    eta : float or array_like
        Step size, ``|eta| <= 1e12``.
    setting : Setting
        Isotropic data model. Array-valued fields broadcast against ``eta``.
        At ``L = 1`` debiased GD predicts 0 (the centred covariates vanish)
        and the formula gives its risk ``1 + σ²`` exactly, so every ``L >= 1``
        is accepted, as by ``reduced-dynamics risk`` and ``check``; the
        optimal step (:func:`gd_optimal_eta`) needs ``L >= 2``.
    debiased : bool
        Use centred covariates ``x_l − x̄``.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``eta`` and ``setting.shape``; a float when both are scalar.

    References
    ----------
    docs/theory.md#predictors and docs/theory.md#theorem-1.

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> round(gd_risk(0.5, Setting(d=5, L=40, sigma2=0.1), debiased=True), 6)
    0.402266
    >>> gd_risk([0.5, 1.0], Setting(d=5, L=40, sigma2=0.1)).round(4)
    array([0.3906, 0.2625])
    """
    d, L, sigma2 = _setting_arrays(setting, "gd_risk")
    eta = _finite_array("eta", eta, bound=ETA_MAX)
    debiased = _check_debiased(debiased)
    b, c = _gd_coefficients(d, L, sigma2, debiased)
    return _out(1.0 + sigma2 - 2.0 * b * eta + c * eta * eta)


def gd_optimal_eta(setting, *, debiased=False):
    r"""Risk-minimising step of one-step GD at finite (d, L).

    The risk of :func:`gd_risk` is ``1 + σ² − 2bη + cη²``, minimised at
    ``η = b/c``:

    .. math::

        \eta_{\rm vanilla} = \frac{L}{L + d + 1 + \sigma^2 d}
            = \frac{\eta^*}{1 + \eta^*/L}, \qquad
        \eta_{\rm debiased} = \frac{L}{L + (1 + \sigma^2) d} = \eta^*.

    So the optimal step of debiased GD is **exactly**
    ``η* = 1/(1 + (1+σ²)d/L)`` (docs/theory.md#gradient-flow) at every ``L >= 2``
    (it is computed as ``setting.eta_star``) — the difference is 0, not merely
    ``o(1)``; vanilla GD's optimal step differs from ``η*`` by
    ``−η*²/(L + η*) = O(1/L)``. Both tend to ``1/(1 + (1+σ²)ξ)`` when ``d/L → ξ``.

    Parameters
    ----------
    setting : Setting
        Isotropic data model (``L >= 2`` if ``debiased``); may be array-valued.
    debiased : bool

    Returns
    -------
    float or ndarray, shape ``setting.shape``

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> s = Setting(d=5, L=40, sigma2=0.1)
    >>> gd_optimal_eta(s, debiased=True) == s.eta_star
    True
    """
    d, L, sigma2 = _setting_arrays(setting, "gd_optimal_eta")
    debiased = _check_debiased(debiased)
    _check_debiased_L(setting.L, debiased)
    if debiased:
        return _out(np.asarray(setting.eta_star, dtype=np.float64))
    return _out(L / (L + d + 1.0 + sigma2 * d))


def gd_optimal_risk(setting, *, debiased=False):
    r"""Minimum over η of the exact GD risk: ``1 + σ² − b²/c``.

    .. math::

        R_{\rm vanilla}^{\min} = 1 + \sigma^2 - \frac{L}{L + d + 1 + \sigma^2 d}, \qquad
        R_{\rm debiased}^{\min} = 1 + \sigma^2 - \frac{L-1}{L + (1+\sigma^2) d}
            = 1 + \sigma^2 - \eta^*\Bigl(1 - \frac1L\Bigr).

    With ``d = ξL`` exactly, ``R_debiased^min − gd_risk_limit(sigma2=σ², xi=ξ) = η*/L``.

    Parameters
    ----------
    setting : Setting
        Isotropic data model (``L >= 2`` if ``debiased``); may be array-valued.
    debiased : bool

    Returns
    -------
    float or ndarray, shape ``setting.shape``

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> round(gd_optimal_risk(Setting(d=5, L=40, sigma2=0.1), debiased=True), 6)
    0.242857
    """
    d, L, sigma2 = _setting_arrays(setting, "gd_optimal_risk")
    debiased = _check_debiased(debiased)
    _check_debiased_L(setting.L, debiased)
    b, c = _gd_coefficients(d, L, sigma2, debiased)
    return _out(1.0 + sigma2 - b * b / c)


# ---------------------------------------------------------------------------
# proportional limit L -> oo, d/L -> xi
# ---------------------------------------------------------------------------


def gd_risk_limit(*, sigma2, xi):
    r"""Limit of the debiased-GD risk at ``η*`` as ``L → ∞``, ``d/L → ξ``.

    .. math:: \mathcal E_{\rm gd}(\sigma^2, \xi) = 1 + \sigma^2 - \eta^*,
              \qquad \eta^* = \frac{1}{1 + (1+\sigma^2)\xi}.

    Derivation: from :func:`gd_optimal_risk`,
    ``1 + σ² − (L−1)/(L + (1+σ²)d) → 1 + σ² − 1/(1 + (1+σ²)ξ)``; the error at
    ``d = ξL`` is exactly ``η*/L``. This agrees with docs/theory.md#theorem-1. Vanilla GD
    has the same limit (its extra ``(1+…)/L`` terms vanish). Evaluated as
    ``σ² + (1+σ²)ξ/(1 + (1+σ²)ξ)``, a sum of positive terms (no cancellation).

    Parameters
    ----------
    sigma2 : float or array_like, 0 or in [1e-15, 1e15]
        Noise variance σ².
    xi : float or array_like, in [1e-15, 1e15]
        Aspect ratio ``ξ = lim d/L``; broadcast against ``sigma2``.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``sigma2`` and ``xi``.

    References
    ----------
    docs/theory.md#theorem-1

    Examples
    --------
    >>> round(gd_risk_limit(sigma2=0.1, xi=0.125), 6)
    0.220879
    """
    s, x = _limit_params(sigma2, xi, allow_zero_sigma2=True)
    k = (1.0 + s) * x
    return _out(s + k / (1.0 + k))


def bayes_risk_limit(*, sigma2, xi):
    r"""Limiting Bayes (optimal ridge, ``λ = σ²d``) risk as ``L → ∞``, ``d/L → ξ``.

    .. math::

        \mathcal E_{\rm Bayes}(\sigma^2, \xi) = \tfrac12\Bigl(\sigma^2 + \tfrac{\xi-1}{\xi}
            + \sqrt{4\sigma^2 + (\sigma^2 + \tfrac{1-\xi}{\xi})^2}\Bigr),

    the positive root of ``B² − (σ² + 1 − 1/ξ) B − σ²/ξ = 0``.

    Derivation. Under the prior ``β ~ N(0, I/d)`` and Gaussian noise the
    posterior of β given ``(X, y)`` is Gaussian with covariance
    ``S = (XᵀX/σ² + d I)⁻¹ = σ²(XᵀX + σ²d I)⁻¹`` and mean the ridge estimate
    with ``λ = σ²d``; the posterior-mean predictor has risk
    ``σ² + E tr S = σ² + σ² E tr((XᵀX + σ²d I)⁻¹)``. Put ``W = XᵀX/L``, whose
    spectrum tends to Marchenko–Pastur with ratio ξ, and ``λ = σ²ξ``:
    ``σ² tr((LW + σ²d I)⁻¹) = σ² (d/L) · (1/d) tr((W + λI)⁻¹) → σ²ξ m(−λ)``,
    where the MP Stieltjes transform ``m(z) = ∫ dμ(t)/(t − z)`` solves
    ``ξ z m² + (z + ξ − 1) m + 1 = 0``. At ``z = −λ`` the positive root is
    ``m = [−(1 + λ − ξ) + √((1 + λ − ξ)² + 4ξλ)]/(2ξλ)``, hence
    ``B = σ² + [−(1 + λ − ξ) + √((1+λ−ξ)² + 4ξλ)]/(2ξ)``, which rearranges to
    the displayed formula — docs/theory.md#theorem-1 is confirmed.

    Numerics: with ``a = σ² + 1 − 1/ξ`` and ``r = √(a² + 4σ²/ξ)``, use
    ``(a + r)/2`` if ``a >= 0`` and ``(2σ²/ξ)/(r − a)`` if ``a < 0`` (no
    cancellation in either branch).

    ``σ² = 0`` is accepted as the noiseless limit: the formula is continuous
    there and gives ``max(0, 1 − 1/ξ)`` — exact recovery when ``ξ ≤ 1``, and
    for ``ξ > 1`` the unconstrained ``(d − L)/d`` fraction of ``|β|²``.

    Parameters
    ----------
    sigma2 : float or array_like, 0 or in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``sigma2`` and ``xi``.

    References
    ----------
    docs/theory.md#bayes-ratio

    Examples
    --------
    >>> round(bayes_risk_limit(sigma2=0.1, xi=0.125), 6)
    0.114057
    >>> bayes_risk_limit(sigma2=0.0, xi=2.0)
    0.5
    """
    s, x = _limit_params(sigma2, xi, allow_zero_sigma2=True)
    a = s + 1.0 - 1.0 / x
    q = s / x
    r = np.hypot(a, 2.0 * np.sqrt(q))
    with np.errstate(divide="ignore", invalid="ignore"):
        neg = 2.0 * q / (r - a)
    out = np.where(a >= 0, 0.5 * (a + r), neg)
    return _out(out)


def risk_ratio_limit(*, sigma2, xi):
    r"""Limiting ratio ``r = gd_risk_limit / bayes_risk_limit`` (left side of Theorem 1(c)).

    ``r > 1`` for every ``σ² > 0, ξ > 0``. It is evaluated as
    ``1 + (r − 1)`` with ``r − 1`` from :func:`risk_ratio_excess`, so it is
    never below 1; where ``r − 1`` is below about ``1e-16`` (``ξ`` large, or
    ``ξ`` and ``σ²`` both large) it rounds to exactly 1 (the plain quotient
    ``G/B`` rounded to just below 1 there). **Take** ``r − 1`` **from**
    :func:`risk_ratio_excess` (cancellation-free, correct to ~1e-15 relative)
    and the distance to the bound from :func:`bound_slack`, never from
    ``risk_ratio_limit(...) - 1``.

    Parameters
    ----------
    sigma2 : float or array_like, in [1e-15, 1e15]
        At ``σ² = 0`` and ``ξ <= 1`` the Bayes risk is 0, so ``σ² > 0`` is required.
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``sigma2`` and ``xi``.

    References
    ----------
    docs/theory.md#bayes-ratio

    Examples
    --------
    >>> round(risk_ratio_limit(sigma2=0.1, xi=0.125), 6)
    1.936573
    """
    s, x, eta, G, B = _ratio_parts(sigma2, xi)
    return _out(1.0 + eta * eta / (G * B + s / x))


def risk_ratio_bound(*, sigma2, xi):
    r"""Right side of Theorem 1(c): ``U = 1 + σ⁻² {(1 + ξσ²)(1 + σ² + 1/ξ)}⁻¹``.

    The paper states it for ``σ² > 0`` and ``σ² + 1/ξ > 1``; see
    :mod:`proofs_check.bayes` for the proof that
    ``risk_ratio_limit <= risk_ratio_bound`` for **all** ``σ² > 0, ξ > 0``.

    Parameters
    ----------
    sigma2 : float or array_like, in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``sigma2`` and ``xi``.

    References
    ----------
    docs/theory.md#bayes-ratio

    Examples
    --------
    >>> round(risk_ratio_bound(sigma2=0.1, xi=0.125), 6)
    2.085334
    """
    s, x = _limit_params(sigma2, xi, allow_zero_sigma2=False)
    return _out(1.0 + 1.0 / (s * (1.0 + x * s) * (1.0 + s + 1.0 / x)))


def _ratio_parts(sigma2, xi):
    """``(σ², ξ, η*, G, B)`` as broadcast float64 arrays (σ² > 0)."""
    s, x = _limit_params(sigma2, xi, allow_zero_sigma2=False)
    k = (1.0 + s) * x
    eta = 1.0 / (1.0 + k)
    G = np.asarray(gd_risk_limit(sigma2=s, xi=x), dtype=np.float64)
    B = np.asarray(bayes_risk_limit(sigma2=s, xi=x), dtype=np.float64)
    return s, x, eta, G, B


def risk_ratio_excess(*, sigma2, xi):
    r"""``r − 1`` of :func:`risk_ratio_limit`, computed without cancellation.

    .. math:: r - 1 = \frac{\eta^{*2}}{G B + \sigma^2/\xi} > 0,

    with ``G`` = :func:`gd_risk_limit`, ``B`` = :func:`bayes_risk_limit`,
    ``η* = 1/(1 + (1+σ²)ξ)`` (identity 1 of :mod:`proofs_check.bayes`, proved
    there and checked by sympy). Every term is positive, so the float64 value
    has a relative error of a few ulp even where ``risk_ratio_limit`` rounds
    to 1.

    Parameters
    ----------
    sigma2 : float or array_like, in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``sigma2`` and ``xi``; always ``> 0``.

    References
    ----------
    docs/theory.md#bayes-ratio

    Examples
    --------
    >>> risk_ratio_limit(sigma2=1000.0, xi=1000.0) - 1  # r − 1 lost to rounding
    0.0
    >>> float(f"{risk_ratio_excess(sigma2=1000.0, xi=1000.0):.6g}")
    9.96007e-19
    """
    s, x, eta, G, B = _ratio_parts(sigma2, xi)
    return _out(eta * eta / (G * B + s / x))


def bound_relative_slack(*, sigma2, xi):
    r"""Relative slack of Theorem 1(c): ``1 − ρ = (U − r)/(U − 1)``, cancellation-free.

    .. math:: 1 - \rho = \frac{\xi\,(G B + \sigma^2\eta^*)}{\sigma^2 + \xi G B} \in (0, 1)

    (derived in :mod:`proofs_check.bayes`). It tends to 0 only as ``ξ → 0``,
    like ``(1+σ²)ξ``.

    Parameters
    ----------
    sigma2 : float or array_like, in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``sigma2`` and ``xi``.

    References
    ----------
    docs/theory.md#bayes-ratio

    Examples
    --------
    >>> round(bound_relative_slack(sigma2=1.0, xi=1e-6) / 2e-6, 4)  # → (1+σ²)ξ as ξ → 0
    1.0
    """
    s, x, eta, G, B = _ratio_parts(sigma2, xi)
    return _out(x * (G * B + s * eta) / (s + x * G * B))


def bound_slack(*, sigma2, xi):
    r"""Absolute slack of Theorem 1(c), ``U − r > 0``, cancellation-free.

    .. math:: U - r = \frac{\xi\eta^*}{\sigma^2(1+\xi\sigma^2)}\,(1 - \rho),

    a product of positive factors (``U − 1`` and :func:`bound_relative_slack`;
    derived in :mod:`proofs_check.bayes`). Use it instead of
    ``risk_ratio_bound(...) - risk_ratio_limit(...)``, which cancels.

    Parameters
    ----------
    sigma2 : float or array_like, in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``sigma2`` and ``xi``; always ``> 0``.

    References
    ----------
    docs/theory.md#bayes-ratio

    Examples
    --------
    >>> round(bound_slack(sigma2=0.1, xi=0.125), 6)
    0.148761
    """
    s, x, eta, G, B = _ratio_parts(sigma2, xi)
    u1 = x * eta / (s * (1.0 + x * s))
    return _out(u1 * x * (G * B + s * eta) / (s + x * G * B))


# --- mpmath versions --------------------------------------------------------


#: Largest ``dps`` of the ``*_mp`` functions (beyond it mpmath's time and memory explode).
DPS_MAX = 1000


def _check_dps(dps) -> int:
    dps = check_positive_int("dps", dps)
    if not 16 <= dps <= DPS_MAX:
        raise ValueError(f"`dps` must be an integer in [16, {DPS_MAX}], got {dps!r}")
    return dps


def _check_debiased(debiased) -> bool:
    if not isinstance(debiased, (bool, np.bool_)):
        raise ValueError(f"`debiased` must be True or False, got {debiased!r}")
    return bool(debiased)


def _mp_broadcast(scalar_func, sigma2, xi, *, allow_zero_sigma2: bool, dps):
    """Apply ``scalar_func(σ², ξ, dps)`` (floats in, ``mpf`` out) elementwise.

    Scalars give an ``mpmath.mpf``; arrays give an object ndarray of ``mpf`` of
    the broadcast shape. Each float is converted to ``mpf`` exactly.
    """
    dps = _check_dps(dps)
    s, x = _limit_params(sigma2, xi, allow_zero_sigma2=allow_zero_sigma2)
    if s.ndim == 0:
        return scalar_func(float(s), float(x), dps)
    out = np.empty(s.shape, dtype=object)
    for idx in np.ndindex(s.shape):
        out[idx] = scalar_func(float(s[idx]), float(x[idx]), dps)
    return out


def _gd_risk_limit_mp(sigma2: float, xi: float, dps: int):
    import mpmath  # on first use: the float64 closed forms do not need it

    with mpmath.workdps(dps):
        s, x = mpmath.mpf(sigma2), mpmath.mpf(xi)
        k = (1 + s) * x
        return +(s + k / (1 + k))


def _bayes_risk_limit_mp(sigma2: float, xi: float, dps: int):
    import mpmath  # on first use: the float64 closed forms do not need it

    with mpmath.workdps(dps + 20):  # guard digits absorb the cancellation of the ½(a + r) form
        s, x = mpmath.mpf(sigma2), mpmath.mpf(xi)
        val = (s + (x - 1) / x + mpmath.sqrt(4 * s + (s + (1 - x) / x) ** 2)) / 2
    with mpmath.workdps(dps):
        return +val


def _risk_ratio_limit_mp(sigma2: float, xi: float, dps: int):
    import mpmath

    with mpmath.workdps(dps + 20):
        val = _gd_risk_limit_mp(sigma2, xi, dps + 20) / _bayes_risk_limit_mp(sigma2, xi, dps + 20)
    with mpmath.workdps(dps):
        return +val


def _risk_ratio_bound_mp(sigma2: float, xi: float, dps: int):
    import mpmath  # on first use: the float64 closed forms do not need it

    with mpmath.workdps(dps):
        s, x = mpmath.mpf(sigma2), mpmath.mpf(xi)
        return +(1 + 1 / (s * (1 + x * s) * (1 + s + 1 / x)))


def gd_risk_limit_mp(*, sigma2, xi, dps=DEFAULT_DPS):
    """:func:`gd_risk_limit` in mpmath with ``dps`` decimal digits.

    Parameters
    ----------
    sigma2 : float or array_like, 0 or in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.
    dps : int, in [16, 1000]
        Decimal digits of the result.

    Returns
    -------
    mpmath.mpf or ndarray of object
        An ``mpf`` for scalar ``sigma2`` and ``xi``; else an object array of
        ``mpf`` of their broadcast shape. Each float is converted to ``mpf``
        exactly.
    """
    return _mp_broadcast(_gd_risk_limit_mp, sigma2, xi, allow_zero_sigma2=True, dps=dps)


def bayes_risk_limit_mp(*, sigma2, xi, dps=DEFAULT_DPS):
    """:func:`bayes_risk_limit` in mpmath (the closed form of docs/theory.md#bayes-ratio, evaluated at ``dps`` digits).

    Parameters
    ----------
    sigma2 : float or array_like, 0 or in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.
    dps : int, in [16, 1000]
        Decimal digits of the result.

    Returns
    -------
    mpmath.mpf or ndarray of object
        An ``mpf`` for scalar ``sigma2`` and ``xi``; else an object array of
        ``mpf`` of their broadcast shape. Each float is converted to ``mpf``
        exactly.
    """
    return _mp_broadcast(_bayes_risk_limit_mp, sigma2, xi, allow_zero_sigma2=True, dps=dps)


def risk_ratio_limit_mp(*, sigma2, xi, dps=DEFAULT_DPS):
    """:func:`risk_ratio_limit` in mpmath.

    Parameters
    ----------
    sigma2 : float or array_like, in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.
    dps : int, in [16, 1000]
        Decimal digits of the result.

    Returns
    -------
    mpmath.mpf or ndarray of object
        An ``mpf`` for scalar ``sigma2`` and ``xi``; else an object array of
        ``mpf`` of their broadcast shape. Each float is converted to ``mpf``
        exactly.
    """
    return _mp_broadcast(_risk_ratio_limit_mp, sigma2, xi, allow_zero_sigma2=False, dps=dps)


def risk_ratio_bound_mp(*, sigma2, xi, dps=DEFAULT_DPS):
    """:func:`risk_ratio_bound` in mpmath.

    Parameters
    ----------
    sigma2 : float or array_like, in [1e-15, 1e15]
    xi : float or array_like, in [1e-15, 1e15]
        Broadcast against ``sigma2``.
    dps : int, in [16, 1000]
        Decimal digits of the result.

    Returns
    -------
    mpmath.mpf or ndarray of object
        An ``mpf`` for scalar ``sigma2`` and ``xi``; else an object array of
        ``mpf`` of their broadcast shape. Each float is converted to ``mpf``
        exactly.
    """
    return _mp_broadcast(_risk_ratio_bound_mp, sigma2, xi, allow_zero_sigma2=False, dps=dps)


# ---------------------------------------------------------------------------
# finite-(d, L) Bayes risk by Rao–Blackwellised Monte Carlo
# ---------------------------------------------------------------------------


def bayes_risk_finite(setting, *, n_prompts, seed, batch_size=None) -> RiskEstimate:
    r"""Finite-(d, L) Bayes risk by Monte Carlo over X, Rao–Blackwellised over β, ε, x_q.

    .. math::

        \mathcal E_{\rm Bayes}(d, L, \sigma^2)
          = \sigma^2 + \sigma^2\,\mathbb E_X \operatorname{tr}\bigl((X^\top X + \sigma^2 d I)^{-1}\bigr)
          = \sigma^2 + \mathbb E_X \sum_{j=1}^{d} \frac{1}{\lambda_j/\sigma^2 + d},

    ``λ_j`` the eigenvalues of ``XᵀX``. Derivation: given ``X``, ``y`` the
    posterior of β is ``N(m, S)`` with ``S = (XᵀX/σ² + dI)⁻¹``; for the
    posterior mean ``ŷ = mᵀx_q``, ``E[(y_q − ŷ)² | X, y] = σ² + tr S`` (average
    over the independent ``x_q ~ N(0, I)`` and ``ε_q``), and ``S`` depends on
    ``X`` only. So only ``X`` is sampled. Eigenvalues come from batched
    ``eigvalsh`` of the smaller Gram matrix (``XᵀX`` if ``d <= L``, else
    ``XXᵀ`` plus ``d − L`` zero eigenvalues, each contributing ``1/d``).

    ``σ² = 0`` (noiseless) returns the deterministic value
    ``max(0, d − L)/d`` with standard error 0 (the ``σ² → 0`` limit, by
    dominated convergence since each term lies in ``[0, 1/d]``).

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic data model.
    n_prompts : int, in [2, 1e9]
        Number of sampled prompts (one covariate matrix ``X`` each).
    seed : int or numpy.random.Generator
        Required.
    batch_size : int, optional
        Matrices per batch, at most (default keeps each batch near 4·10⁶
        numbers; fewer when the batch would exceed the memory budget,
        :data:`~reduced_dynamics.estimation.prompts.CHUNK_BUDGET`). The
        matrices are the same whatever the batch size (one stream); memory
        does not grow with ``n_prompts``.

    Returns
    -------
    RiskEstimate
        ``risk`` (sample mean), ``stderr`` (``std/√n_prompts``), ``n`` (= ``n_prompts``), ``name="bayes_ridge"``.

    References
    ----------
    docs/theory.md#bayes-ratio

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> est = bayes_risk_finite(Setting(d=5, L=40, sigma2=0.1), n_prompts=2000, seed=0)
    >>> abs(est.risk - 0.114) < 0.005
    True
    """
    setting = as_setting(setting, "bayes_risk_finite").require_isotropic("bayes_risk_finite")
    d, L, sigma2 = setting.d, setting.L, setting.sigma2
    n_prompts = check_n_prompts(n_prompts)
    rng = as_generator(seed)
    if sigma2 == 0.0:
        return RiskEstimate(risk=max(0, d - L) / d, stderr=0.0, n=n_prompts, name="bayes_ridge")
    if batch_size is None:
        batch_size = max(1, int(4_000_000 // (L * d)))
    batch_size = check_positive_int("batch_size", batch_size)
    k = min(d, L)
    n_zero = d - k
    # memory per matrix: X, the Gram matrix and its workspace; the chunks also respect the budget
    sizes = chunk_sizes(n_prompts, 8 * (L * d + 3 * k * k + 2 * k), setting=setting, cap=batch_size)
    mom = _Moments(1)
    with single_blas_thread():  # batched small eigenproblems: a threaded BLAS only synchronises
        for b in sizes:
            X = rng.standard_normal((b, L, d))
            gram = np.matmul(np.swapaxes(X, 1, 2), X) if d <= L else np.matmul(X, np.swapaxes(X, 1, 2))
            del X
            lam = np.linalg.eigvalsh(gram)
            lam = np.clip(lam, 0.0, None)  # round-off can give tiny negatives
            mom.add(np.sum(1.0 / (lam / sigma2 + d), axis=1) + n_zero / d)
    risk = sigma2 + float(mom.mean[0])
    return RiskEstimate(risk=risk, stderr=mom.stderr(0), n=n_prompts, name="bayes_ridge")


@dataclass(frozen=True)
class RatioEstimate(FrozenResult):
    """Finite-L risk ratio of :func:`risk_ratio_finite`.

    Attributes
    ----------
    ratio : float
        Exact optimal debiased-GD risk over the Monte Carlo Bayes risk.
    stderr : float
        Delta-method standard error ``ratio · se(B̂)/B̂`` (the numerator is exact).
    gd_risk : float
        The exact numerator, :func:`gd_optimal_risk` with ``debiased=True``.
    bayes : RiskEstimate
        The Monte Carlo denominator (:func:`bayes_risk_finite`).
    """

    ratio: float
    stderr: float
    gd_risk: float
    bayes: RiskEstimate


def risk_ratio_finite(setting, *, n_prompts, seed) -> RatioEstimate:
    r"""Finite-L risk ratio: exact optimal debiased-GD risk / Monte Carlo Bayes risk.

    ``ratio = gd_optimal_risk(setting, debiased=True) / B̂`` with ``B̂`` from
    :func:`bayes_risk_finite`; delta-method standard error
    ``ratio · se(B̂)/B̂`` (the numerator is exact).

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic, with ``sigma2 > 0`` and ``L >= 2``.
    n_prompts : int, in [2, 1e9]
        Number of sampled prompts (one covariate matrix each).
    seed : int or numpy.random.Generator
        Required.

    Returns
    -------
    RatioEstimate

    References
    ----------
    docs/theory.md#finite-l-results
    """
    setting = as_setting(setting, "risk_ratio_finite").require_isotropic("risk_ratio_finite")
    if setting.sigma2 <= 0:
        raise ValueError(f"`sigma2` must be a finite number > 0 for the risk ratio, got {setting.sigma2!r}")
    _check_debiased_L(setting.L, True)
    g = gd_optimal_risk(setting, debiased=True)
    b = bayes_risk_finite(setting, n_prompts=n_prompts, seed=seed)
    ratio = g / b.risk
    return RatioEstimate(ratio=ratio, stderr=ratio * b.stderr / b.risk, gd_risk=g, bayes=b)
