r"""Closed-form landmarks of the approximate loss (docs/theory.md#gradient-flow).

These are the predictions the flow is compared against; each is re-derived in
the docstring and checked in ``tests/reduced_dynamics/test_manifold.py`` by
direct numerical minimisation of :func:`reduced_dynamics.approx_loss`.
"""

from __future__ import annotations

import numpy as np

from reduced_dynamics._validation import check_finite_float, check_positive_int, check_problem

__all__ = [
    "eta_star",
    "inf_loss",
    "mu_gamma",
    "manifold_loss",
    "single_head_optimum",
    "drift_law_gamma",
    "flow_eta_gap",
    "flow_manifold_gap",
    "residual_sum_mu",
]


def _positive_array(name, value, *, allow_empty=False) -> np.ndarray:
    """``value`` as a float64 array of finite numbers > 0 (ValueError naming ``name`` otherwise)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be finite and > 0, got {value!r}") from None
    if (arr.size == 0 and not allow_empty) or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"`{name}` must be finite and > 0, got {value!r}")
    return arr


def _out(arr: np.ndarray):
    return float(arr) if arr.ndim == 0 else arr


def eta_star(d, L, sigma2) -> float:
    r"""Optimal effective step :math:`\eta^* = 1/(1 + (1+\sigma^2) d / L)`.

    The infimum of :math:`\tilde L` over the solution manifold, approached as
    :math:`\gamma\to0^+`: on :math:`S_\gamma`, :math:`\tilde L = 1 + \sigma^2 -
    \gamma^2/(\gamma^2 + c\sinh(d\gamma^2))` (see :func:`manifold_loss`) and
    :math:`\sinh(d\gamma^2)/\gamma^2 \to d`.
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    return 1.0 / (1.0 + (1.0 + sigma2) * d / L)


def inf_loss(d, L, sigma2) -> float:
    r"""Infimum of :math:`\tilde L` for ``H >= 2``: :math:`1 + \sigma^2 - \eta^*`."""
    d, L, sigma2 = check_problem(d, L, sigma2)
    return 1.0 + sigma2 - eta_star(d, L, sigma2)


def mu_gamma(gamma, *, d, L, sigma2):
    r"""Total positive OV mass on the solution manifold :math:`S_\gamma`.

    .. math:: \mu_\gamma = \frac{\gamma}{2(\gamma^2 + c\,\sinh(d\gamma^2))}, \quad c = (1+\sigma^2)/L.

    Derivation: on :math:`S_\gamma` with positive mass :math:`M` and negative
    mass :math:`-M`, :math:`\mu^\top\omega = 2\gamma M`, and
    :math:`\mu^\top e^{\circ d\omega\omega^\top}\mu = 2M^2(e^{d\gamma^2} - e^{-d\gamma^2})`,
    so :math:`\tilde L = 1 + \sigma^2 - 4\gamma M + 4M^2(\gamma^2 + c\sinh d\gamma^2)`,
    minimised at :math:`M = \mu_\gamma`.

    Parameters
    ----------
    gamma : float or array_like, > 0
    d, L, sigma2 : problem constants

    Returns
    -------
    float or ndarray, same shape as ``gamma``
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    g = _positive_array("gamma", gamma)
    c = (1.0 + sigma2) / L
    with np.errstate(over="ignore"):  # sinh(dγ²) = inf for dγ² > 710: the mass is then 0 (its limit)
        out = g / (2.0 * (g * g + c * np.sinh(d * g * g)))
    return _out(out)


def manifold_loss(gamma, *, d, L, sigma2):
    r"""Minimum of :math:`\tilde L` over :math:`S_\gamma`: :math:`1+\sigma^2 - \gamma^2/(\gamma^2 + c\sinh(d\gamma^2))`."""
    d, L, sigma2 = check_problem(d, L, sigma2)
    g = _positive_array("gamma", gamma)
    c = (1.0 + sigma2) / L
    # γ²/(γ² + c sinh(dγ²)) = 1/(1 + c sinh(dγ²)/γ²), stable for small γ
    x = d * g * g
    with np.errstate(over="ignore"):  # sinh = inf for x > 710: the loss is then 1 + σ² (its limit)
        ratio = np.where(x < 1e-8, d * (1.0 + x * x / 6.0), np.sinh(x) / (g * g))
    out = 1.0 + sigma2 - 1.0 / (1.0 + c * ratio)
    return _out(out)


def single_head_optimum(d, L, sigma2) -> tuple[float, float, float]:
    r"""Finite minimiser of :math:`\tilde L` for ``H = 1`` (positive branch).

    :math:`\omega = 1/\sqrt d`, :math:`\mu = \sqrt d / (1 + (1+\sigma^2)(d/L)e)`;
    the negative branch is :math:`(-\omega, -\mu)`.

    Derivation: minimising over μ gives :math:`\tilde L = 1+\sigma^2 - v/(v + c e^{dv})`
    with :math:`v = \omega^2`; :math:`\partial_v (c e^{dv}/v) = 0` at :math:`v = 1/d`.

    Returns
    -------
    omega, mu, loss : float
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    c = (1.0 + sigma2) / L
    omega = 1.0 / np.sqrt(d)
    mu = np.sqrt(d) / (1.0 + c * d * np.e)
    loss = 1.0 + sigma2 - (1.0 / d) / (1.0 / d + c * np.e)
    return float(omega), float(mu), float(loss)


# --- slow drift along the solution manifold (derived in README, "Derivations") ---
#
# On the slow manifold with p positive and n negative non-dummy heads (H = p + n)
# the Taylor form of L̃ gives, to leading order in γ,
#     dμ_h/dt = (2/3) c d³ η γ⁵ sign μ_h − 2c Σμ,   η = 2γM,  M = Σ_{h∈H+} μ_h,
# with Σμ in quasi-equilibrium; hence dM/dt = (4/3)(pn/H) c d³ η γ⁵ and, with
# γ = η/(2M), γ(t) ≃ (16 c d³ (pn/H) t)^(−1/6), independent of η.


def drift_law_gamma(t, *, d, L, sigma2, n_positive=1, n_negative=1):
    r"""Asymptotic drift law :math:`\gamma(t) = (16 c d^3 (pn/H) t)^{-1/6}`.

    Parameters
    ----------
    t : float or ndarray, > 0
    d, L, sigma2 : problem constants
    n_positive, n_negative : int
        Numbers p and n of positive and negative non-dummy heads (each >= 1).

    Returns
    -------
    float or ndarray, like ``t``
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    p, n = _head_counts(n_positive, n_negative)
    t = _positive_array("t", t, allow_empty=True)
    c = (1.0 + sigma2) / L
    out = (16.0 * c * d**3 * (p * n / (p + n)) * t) ** (-1.0 / 6.0)
    return _out(out)


def _head_counts(n_positive, n_negative) -> tuple[int, int]:
    """Validate the numbers p, n of positive and negative heads (integers >= 1)."""

    def ok(v):
        return (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1) or (
            isinstance(v, float) and v.is_integer() and v >= 1
        )

    if not (ok(n_positive) and ok(n_negative)):
        raise ValueError(f"`n_positive` and `n_negative` must be integers >= 1, got {n_positive!r} and {n_negative!r}")
    return int(n_positive), int(n_negative)


def flow_eta_gap(gamma, *, d, L, sigma2):
    r"""Leading-order ``η* − η_eff ≃ η*² c d³ γ⁴ / 2`` along the flow's slow manifold.

    Derivation: with homogeneous ``|ω_h| = γ``, positive and negative OV masses
    of total size ``A`` and ``Σμ = 0``, the closed form gives
    ``L̃ = σ² + (1 − γA)² + cA² sinh(dγ²)``. The flow sits where ``∂L̃/∂γ = 0``
    at fixed ``A`` (γ is the stiff direction), i.e.
    ``η(1 + cd + cd³γ⁴/2 + O(γ⁸)) = 1`` for ``η = γA``, hence
    ``η* − η ≃ η*² c d³ γ⁴ / 2`` (on S_γ, which minimises over ``A``
    instead, the factor is 1/6).

    Parameters
    ----------
    gamma : float or array_like, > 0
    d, L, sigma2 : problem constants

    Returns
    -------
    float or ndarray, like ``gamma``
    """
    es = eta_star(d, L, sigma2)
    g = _positive_array("gamma", gamma, allow_empty=True)
    return _out(es * es * (1.0 + sigma2) / L * d**3 * g**4 / 2.0)


def flow_manifold_gap(gamma, *, d, L, sigma2):
    r"""Leading-order relative gap ``(μ_γ − M₊)/μ_γ ≃ η* c d³ γ⁴ / 3`` of the flow's OV mass.

    Ratio of the flow's ``η`` (:func:`flow_eta_gap`) to ``2γμ_γ = 1/(1 + cd + cd³γ⁴/6 + …)``.

    Parameters
    ----------
    gamma : float or array_like, > 0
    d, L, sigma2 : problem constants

    Returns
    -------
    float or ndarray, like ``gamma``
    """
    es = eta_star(d, L, sigma2)
    g = _positive_array("gamma", gamma, allow_empty=True)
    return _out(es * (1.0 + sigma2) / L * d**3 * g**4 / 3.0)


def residual_sum_mu(gamma, eta, *, d, n_positive, n_negative):
    r"""Quasi-steady ``Σμ = d³ η γ⁵ (p − n) / (3H)`` (0 when p = n).

    From ``dΣμ/dt = (p − n)(2/3) c d³ η γ⁵ − 2cH Σμ`` (see the comment above
    :func:`drift_law_gamma`) set to 0.

    Parameters
    ----------
    gamma : float or array_like, > 0
    eta : float
        Effective step ``μᵀω``.
    d : int
    n_positive, n_negative : int
        Numbers p and n of positive and negative heads (each >= 1).

    Returns
    -------
    float or ndarray, like ``gamma``
    """
    d = check_positive_int("d", d)
    p, n = _head_counts(n_positive, n_negative)
    g = _positive_array("gamma", gamma, allow_empty=True)
    eta = check_finite_float("eta", eta)
    return _out(d**3 * eta * g**5 * (p - n) / (3.0 * (p + n)))
