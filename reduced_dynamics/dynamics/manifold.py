r"""Closed-form landmarks of the approximate loss (docs/theory.md#solution-manifold).

These are the predictions the flow is compared against; each is re-derived in
the docstring and checked in ``tests/reduced_dynamics/dynamics/test_manifold.py`` by
direct numerical minimisation of :func:`reduced_dynamics.approx_loss`.

Every function takes the data model as a :class:`~reduced_dynamics.setting.Setting`
right after the mathematical state (``mu_gamma(gamma, setting)``,
``eta_star(setting)``) and broadcasts over array-valued settings and over its
positional arrays (numpy rules): a scalar setting and scalar state give a Python
``float``, anything else an ndarray of the broadcast shape.

Time convention: the drift laws are stated in the time of the flow
:math:`\dot\theta = -\nabla\tilde L` integrated by
:func:`reduced_dynamics.integrate`. Code that descends
:math:`\tilde L/2` (as the authors' code does) runs at half that speed: its time
:math:`\tau` (learning rate × steps) is :math:`2t`, so
:math:`\gamma = (16 c d^3 (pn/H) t)^{-1/6}` reads
:math:`(8 c d^3 (pn/H) \tau)^{-1/6}` there (docs/theory.md#drift-law).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.setting import as_setting

__all__ = [
    "eta_star",
    "inf_loss",
    "mu_gamma",
    "manifold_loss",
    "SingleHeadOptimum",
    "single_head_optimum",
    "drift_law_gamma",
    "flow_eta_gap",
    "flow_manifold_gap",
    "residual_sum_mu",
]


def _positive_array(name, value, *, allow_empty=False, against=None) -> np.ndarray:
    """``value`` as a float64 array of finite numbers > 0 (ValueError naming ``name`` otherwise).

    ``against``: an array of the setting's shape the value must broadcast with.
    """
    if np.iscomplexobj(value):
        raise ValueError(f"`{name}` must be finite and > 0 (complex numbers are not accepted), got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be finite and > 0, got {value!r}") from None
    if (arr.size == 0 and not allow_empty) or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"`{name}` must be finite and > 0, got {value!r}")
    if against is not None:
        try:
            np.broadcast_shapes(arr.shape, np.shape(against))
        except ValueError:
            raise ValueError(
                f"`{name}` (shape {arr.shape}) must broadcast against the shape {np.shape(against)} of `setting`"
            ) from None
    return arr


def _out(arr):
    arr = np.asarray(arr)
    return float(arr) if arr.ndim == 0 else arr


def _finite_out(arr, name, value):
    """``_out(arr)``, or a ValueError naming ``name`` if the closed form overflowed float64."""
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` is too large or too small: the result overflows float64, got {value!r}")
    return _out(arr)


def _constants(setting):
    """``(d, c, sigma2)`` of a (possibly array-valued) setting as float arrays of shape ``setting.shape``."""
    setting = as_setting(setting)
    shape = setting.shape  # every result has at least the setting's full broadcast shape
    return tuple(
        np.broadcast_to(np.asarray(v, dtype=np.float64), shape) for v in (setting.d, setting.c, setting.sigma2)
    )


def eta_star(setting):
    r"""Optimal effective step :math:`\eta^* = 1/(1 + (1+\sigma^2) d / L)`.

    The infimum of :math:`\tilde L` over the solution manifold, approached as
    :math:`\gamma\to0^+`: on :math:`S_\gamma`, :math:`\tilde L = 1 + \sigma^2 -
    \gamma^2/(\gamma^2 + c\sinh(d\gamma^2))` (see :func:`manifold_loss`) and
    :math:`\sinh(d\gamma^2)/\gamma^2 \to d`.

    Parameters
    ----------
    setting : Setting

    Returns
    -------
    float or ndarray, shape ``setting.shape``

    References
    ----------
    docs/theory.md#solution-manifold

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> round(eta_star(Setting(d=5, L=40, sigma2=0.1)), 6)
    0.879121
    """
    d, c, _ = _constants(setting)
    return _out(1.0 / (1.0 + c * d))


def inf_loss(setting):
    r"""Infimum of :math:`\tilde L` for ``H >= 2``: :math:`1 + \sigma^2 - \eta^*`.

    Parameters
    ----------
    setting : Setting

    Returns
    -------
    float or ndarray, shape ``setting.shape``

    References
    ----------
    docs/theory.md#solution-manifold
    """
    d, c, s2 = _constants(setting)
    return _out(1.0 + s2 - 1.0 / (1.0 + c * d))


def mu_gamma(gamma, setting):
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
        Common KQ scale :math:`|\omega_h|` of the non-dummy heads.
    setting : Setting

    Returns
    -------
    float or ndarray
        Broadcast shape of ``gamma`` and ``setting.shape``.

    References
    ----------
    docs/theory.md#solution-manifold
    """
    d, c, _ = _constants(setting)
    g = _positive_array("gamma", gamma, against=d)
    with np.errstate(all="ignore"):  # sinh(dγ²) = inf for dγ² > 710: the mass is then 0 (its limit)
        out = g / (2.0 * (g * g + c * np.sinh(d * g * g)))
    return _finite_out(out, "gamma", gamma)


def manifold_loss(gamma, setting):
    r"""Minimum of :math:`\tilde L` over :math:`S_\gamma`: :math:`1+\sigma^2 - \gamma^2/(\gamma^2 + c\sinh(d\gamma^2))`.

    Parameters
    ----------
    gamma : float or array_like, > 0
    setting : Setting

    Returns
    -------
    float or ndarray
        Broadcast shape of ``gamma`` and ``setting.shape``.

    References
    ----------
    docs/theory.md#solution-manifold
    """
    d, c, s2 = _constants(setting)
    g = _positive_array("gamma", gamma, against=d)
    # γ²/(γ² + c sinh(dγ²)) = 1/(1 + c sinh(dγ²)/γ²), stable for small γ
    with np.errstate(all="ignore"):  # sinh = inf for x > 710: the loss is then 1 + σ² (its limit)
        x = d * g * g
        ratio = np.where(x < 1e-8, d * (1.0 + x * x / 6.0), np.where(x > 700.0, np.inf, np.sinh(x) / (g * g)))
        out = 1.0 + s2 - 1.0 / (1.0 + c * ratio)
    return _finite_out(out, "gamma", gamma)


@dataclass(frozen=True)
class SingleHeadOptimum(FrozenResult):
    r"""The finite minimiser of :math:`\tilde L` for one head (positive branch).

    The negative branch is :math:`(-\omega, -\mu)` with the same loss.

    Attributes
    ----------
    omega : float or ndarray, shape ``setting.shape``
        :math:`\omega = 1/\sqrt d`.
    mu : float or ndarray, shape ``setting.shape``
        :math:`\mu = \sqrt d / (1 + (1+\sigma^2)(d/L)e)`.
    loss : float or ndarray, shape ``setting.shape``
        :math:`\tilde L` there, :math:`1 + \sigma^2 - (1/d)/(1/d + c e)`.

    Notes
    -----
    :attr:`eta_eff` is the effective step :math:`\omega\mu = 1/(1 + c d e)`.
    """

    omega: float | np.ndarray
    mu: float | np.ndarray
    loss: float | np.ndarray

    @property
    def eta_eff(self):
        """Effective step ``omega * mu``."""
        return _out(np.asarray(self.omega) * np.asarray(self.mu))


def single_head_optimum(setting) -> SingleHeadOptimum:
    r"""Finite minimiser of :math:`\tilde L` for ``H = 1`` (positive branch).

    :math:`\omega = 1/\sqrt d`, :math:`\mu = \sqrt d / (1 + (1+\sigma^2)(d/L)e)`;
    the negative branch is :math:`(-\omega, -\mu)`.

    Derivation: minimising over μ gives :math:`\tilde L = 1+\sigma^2 - v/(v + c e^{dv})`
    with :math:`v = \omega^2`; :math:`\partial_v (c e^{dv}/v) = 0` at :math:`v = 1/d`.

    Parameters
    ----------
    setting : Setting

    Returns
    -------
    SingleHeadOptimum
        ``omega``, ``mu``, ``loss`` (floats, or arrays of shape ``setting.shape``).

    References
    ----------
    docs/theory.md#single-head

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> opt = single_head_optimum(Setting(d=5, L=40, sigma2=0.1))
    >>> round(opt.omega, 6), round(opt.mu, 6), round(opt.loss, 6)
    (0.447214, 1.627695, 0.372073)
    """
    d, c, s2 = _constants(setting)
    omega = 1.0 / np.sqrt(d)
    mu = np.sqrt(d) / (1.0 + c * d * np.e)
    loss = 1.0 + s2 - (1.0 / d) / (1.0 / d + c * np.e)
    return SingleHeadOptimum(omega=_out(omega), mu=_out(mu), loss=_out(loss))


# --- slow drift along the solution manifold (docs/theory.md#drift-law) ---
#
# On the slow manifold with p positive and n negative non-dummy heads (H = p + n)
# the Taylor form of L̃ gives, to leading order in γ,
#     dμ_h/dt = (2/3) c d³ η γ⁵ sign μ_h − 2c Σμ,   η = 2γM,  M = Σ_{h∈H+} μ_h,
# with Σμ in quasi-equilibrium; hence dM/dt = (4/3)(pn/H) c d³ η γ⁵ and, with
# γ = η/(2M), γ(t) ≃ (16 c d³ (pn/H) t)^(−1/6), independent of η.


def drift_law_gamma(t, setting, *, n_positive=1, n_negative=1):
    r"""Asymptotic drift law :math:`\gamma(t) = (16 c d^3 (pn/H) t)^{-1/6}`.

    Time is that of :func:`reduced_dynamics.integrate` (the flow
    :math:`\dot\theta = -\nabla\tilde L`). In the time :math:`\tau = 2t` of
    code that descends :math:`\tilde L/2` (the authors'), the same law reads
    :math:`(8 c d^3 (pn/H) \tau)^{-1/6}`: call ``drift_law_gamma(tau / 2, setting)``.

    Parameters
    ----------
    t : float or array_like, > 0
        Flow time.
    setting : Setting
    n_positive, n_negative : int, >= 1
        Numbers p and n of positive and negative non-dummy heads (H = p + n).

    Returns
    -------
    float or ndarray
        Broadcast shape of ``t`` and ``setting.shape``.

    References
    ----------
    docs/theory.md#drift-law
    """
    d, c, _ = _constants(setting)
    p, n = _head_counts(n_positive, n_negative)
    t = _positive_array("t", t, allow_empty=True, against=d)
    with np.errstate(all="ignore"):
        out = (16.0 * c * d**3 * (p * n / (p + n)) * t) ** (-1.0 / 6.0)
    return _finite_out(out, "t", t)


def _head_counts(n_positive, n_negative) -> tuple[int, int]:
    """Validate the numbers p, n of positive and negative heads (integers >= 1)."""

    def ok(v):
        return (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1) or (
            isinstance(v, float) and v.is_integer() and v >= 1
        )

    if not (ok(n_positive) and ok(n_negative)):
        raise ValueError(f"`n_positive` and `n_negative` must be integers >= 1, got {n_positive!r} and {n_negative!r}")
    return int(n_positive), int(n_negative)


def flow_eta_gap(gamma, setting):
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
    setting : Setting

    Returns
    -------
    float or ndarray
        Broadcast shape of ``gamma`` and ``setting.shape``.

    References
    ----------
    docs/theory.md#drift-law
    """
    d, c, _ = _constants(setting)
    es = 1.0 / (1.0 + c * d)
    g = _positive_array("gamma", gamma, allow_empty=True, against=d)
    with np.errstate(all="ignore"):
        out = es * es * c * d**3 * g**4 / 2.0
    return _finite_out(out, "gamma", gamma)


def flow_manifold_gap(gamma, setting):
    r"""Leading-order relative gap ``(μ_γ − M₊)/μ_γ ≃ η* c d³ γ⁴ / 3`` of the flow's OV mass.

    Ratio of the flow's ``η`` (:func:`flow_eta_gap`) to ``2γμ_γ = 1/(1 + cd + cd³γ⁴/6 + …)``.

    Parameters
    ----------
    gamma : float or array_like, > 0
    setting : Setting

    Returns
    -------
    float or ndarray
        Broadcast shape of ``gamma`` and ``setting.shape``.

    References
    ----------
    docs/theory.md#drift-law
    """
    d, c, _ = _constants(setting)
    es = 1.0 / (1.0 + c * d)
    g = _positive_array("gamma", gamma, allow_empty=True, against=d)
    with np.errstate(all="ignore"):
        out = es * c * d**3 * g**4 / 3.0
    return _finite_out(out, "gamma", gamma)


def residual_sum_mu(gamma, eta, setting, *, n_positive, n_negative):
    r"""Quasi-steady ``Σμ = d³ η γ⁵ (p − n) / (3H)`` (0 when p = n).

    From ``dΣμ/dt = (p − n)(2/3) c d³ η γ⁵ − 2cH Σμ`` (see the comment above
    :func:`drift_law_gamma`) set to 0. Only ``setting.d`` enters.

    Parameters
    ----------
    gamma : float or array_like, > 0
    eta : float or array_like, finite
        Effective step ``μᵀω``; broadcasts against ``gamma``.
    setting : Setting
    n_positive, n_negative : int, >= 1
        Numbers p and n of positive and negative heads.

    Returns
    -------
    float or ndarray
        Broadcast shape of ``gamma``, ``eta`` and ``setting.shape``.

    References
    ----------
    docs/theory.md#deviations
    """
    d, _, _ = _constants(setting)
    p, n = _head_counts(n_positive, n_negative)
    g = _positive_array("gamma", gamma, allow_empty=True, against=d)
    eta_arr = check_finite_array("eta", eta)
    try:
        np.broadcast_shapes(g.shape, eta_arr.shape, d.shape)
    except ValueError:
        raise ValueError(
            f"`gamma`, `eta` and `setting` must broadcast together, got shapes {g.shape}, {eta_arr.shape}, {d.shape}"
        ) from None
    with np.errstate(all="ignore"):
        out = d**3 * eta_arr * g**5 * (p - n) / (3.0 * (p + n))
    return _finite_out(out, "gamma", gamma)
