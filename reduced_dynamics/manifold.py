r"""Closed-form landmarks of the approximate loss (THEORY.md §5).

These are the predictions the flow is compared against; each is re-derived in
the docstring and checked in ``tests/reduced_dynamics/test_manifold.py`` by
direct numerical minimisation of :func:`reduced_dynamics.approx_loss`.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_positive_float, check_problem

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
    g = np.asarray(gamma, dtype=np.float64)
    if g.size == 0 or not np.all(np.isfinite(g)) or np.any(g <= 0):
        raise ValueError(f"`gamma` must be finite and > 0, got {gamma!r}")
    c = (1.0 + sigma2) / L
    out = g / (2.0 * (g * g + c * np.sinh(d * g * g)))
    return float(out) if out.ndim == 0 else out


def manifold_loss(gamma, *, d, L, sigma2):
    r"""Minimum of :math:`\tilde L` over :math:`S_\gamma`: :math:`1+\sigma^2 - \gamma^2/(\gamma^2 + c\sinh(d\gamma^2))`."""
    d, L, sigma2 = check_problem(d, L, sigma2)
    g = np.asarray(gamma, dtype=np.float64)
    if g.size == 0 or not np.all(np.isfinite(g)) or np.any(g <= 0):
        raise ValueError(f"`gamma` must be finite and > 0, got {gamma!r}")
    c = (1.0 + sigma2) / L
    # γ²/(γ² + c sinh(dγ²)) = 1/(1 + c sinh(dγ²)/γ²), stable for small γ
    x = d * g * g
    ratio = np.where(x < 1e-8, d * (1.0 + x * x / 6.0), np.sinh(x) / np.where(g == 0, 1.0, g * g))
    out = 1.0 + sigma2 - 1.0 / (1.0 + c * ratio)
    return float(out) if out.ndim == 0 else out


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
    p, n = int(n_positive), int(n_negative)
    if p < 1 or n < 1:
        raise ValueError(f"`n_positive` and `n_negative` must be >= 1, got {p} and {n}")
    c = (1.0 + sigma2) / L
    out = (16.0 * c * d**3 * (p * n / (p + n)) * np.asarray(t, dtype=float)) ** (-1.0 / 6.0)
    return float(out) if out.ndim == 0 else out


def flow_eta_gap(gamma, *, d, L, sigma2):
    r"""Leading-order ``η* − η_eff ≃ η*² c d³ γ⁴ / 2`` along the flow's slow manifold."""
    es = eta_star(d, L, sigma2)
    return es * es * (1.0 + sigma2) / L * d**3 * np.asarray(gamma, dtype=float) ** 4 / 2.0


def flow_manifold_gap(gamma, *, d, L, sigma2):
    r"""Leading-order relative gap ``(μ_γ − M₊)/μ_γ ≃ η* c d³ γ⁴ / 3`` of the flow's OV mass."""
    return eta_star(d, L, sigma2) * (1.0 + sigma2) / L * d**3 * np.asarray(gamma, dtype=float) ** 4 / 3.0


def residual_sum_mu(gamma, eta, *, d, n_positive, n_negative):
    r"""Quasi-steady ``Σμ = d³ η γ⁵ (p − n) / (3H)`` (0 when p = n)."""
    p, n = int(n_positive), int(n_negative)
    return d**3 * eta * np.asarray(gamma, dtype=float) ** 5 * (p - n) / (3.0 * (p + n))
