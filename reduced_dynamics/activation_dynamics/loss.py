r"""Approximate loss of the reduced model with an attention activation ``f`` (docs/theory.md#other-activations).

The reduced H-head model with activation ``f`` predicts

.. math::

    \hat y = \sum_h \mu_h \sum_l y_l \frac{f(\omega_h s_l)}{\sum_j f(\omega_h s_j)}, \qquad s_l = x_l^\top x_q ,

(``f = exp`` is the softmax of docs/theory.md#reduced-model). Its large-L risk is approximated by

.. math::

    \tilde L_f(\omega, \mu) = 1 + \sigma^2 - 2\mu^\top T_1 + \mu^\top\big(T_2 + c\,K\big)\mu ,
    \qquad c = \frac{1+\sigma^2}{L},

derived exactly as :math:`\tilde L` (docs/theory.md#approximate-loss) from the two moment
statements of a weighted average, with ``ρ = |x_q|²/d ~ χ²_d/d`` and ``a ~ N(0, 1)``:

* **Tilt.** As ``L → ∞`` head ``h`` tends to ``βᵀ E[x f(ω_h s)]/E[f(ω_h s)]``; only the
  component of ``x`` along ``x_q`` is tilted, so the limit is ``τ_h(ρ) βᵀx_q`` with

  .. math:: \tau_h(\rho) = \frac{m_f(\omega_h r)}{r}, \quad r = \sqrt{d\rho},\qquad
            m_f(t) = \frac{E[a f(ta)]}{E[f(ta)]} = t\,\frac{E[f'(ta)]}{E[f(ta)]}\ \text{(Stein)} .

  The systematic part of the risk, averaged over the query norm, is
  ``σ² + E_ρ[ρ (1 − Σ_h μ_h τ_h(ρ))²]``, i.e. ``T_1 = E_ρ[ρ τ(ρ)]`` and
  ``T_2 = E_ρ[ρ τ(ρ) τ(ρ)ᵀ]``. For ``exp``, ``m(t) = t`` so ``τ_h = ω_h`` for every query and the
  average is exact (``E ρ = 1``): ``T_1 = ω``, ``T_2 = ωωᵀ``.
* **Fluctuation.** By the delta method, with response variance ``1 + σ²``, the weighted averages
  of heads ``h, k`` over ``L`` samples have covariance ``(1+σ²)/L · K_hk`` with

  .. math:: K_{hk} = \frac{E[f(t_h a) f(t_k a)]}{E[f(t_h a)]\,E[f(t_k a)]}, \qquad t_h = \omega_h\sqrt d

  at the typical query norm ``|x_q|² = d`` (as in :math:`\tilde L`). For ``exp`` the Gaussian
  moment generating function gives ``K = e^{d ω_h ω_k}``.

So :math:`\tilde L_{\exp} = \tilde L` **exactly**. Closed forms (``p_h = C ω_h √d``):

=========  ==============================  ==============================================================
f          ``m_f(t)``                      ``K_hk``
=========  ==============================  ==============================================================
exp        ``t``                           ``exp(d ω_h ω_k)``
affine     ``C t``                         ``1 + C² d ω_h ω_k``
square     ``2Ct / (1 + C²t²)``            ``(1 + p_h² + p_k² + 4 p_h p_k + 3 p_h² p_k²) / ((1+p_h²)(1+p_k²))``
tanh       quadrature                      quadrature
=========  ==============================  ==============================================================

``tanh`` (and every ``f`` with ``method="quadrature"``) uses a trapezoidal rule in ``a`` on
``[-12, 12]`` with step ``h = 0.02`` (exponentially accurate for ``f`` analytic in a strip: the error of
``1 + tanh`` is ``~exp(-π²/(h |t|))``, below 3e-13 for ``|t| ≤ 17``, larger ``|t|`` raise). For ``tanh`` the
step grows as the largest argument of the call shrinks, keeping ``h max|t| ≤ 0.24`` (``h = 0.02 · 2^k``,
``k ≤ 4``: 77 instead of 1,201 nodes for ``max|t| ≤ 0.75``), where the coarser rule is at least as accurate
as the finest at ``|t| = 17`` (measured against an adaptive quadrature); the
average over ``ρ`` is a Gauss rule for ``χ²_d`` (generalised Laguerre, Golub–Welsch,
:data:`QUERY_NODES` nodes; nodes with ``w_j ρ_j < 1e-17`` dropped), exact for ``exp`` and
``affine``, whose ``τ`` does not depend on ``ρ``. Its error (measured against 300 nodes) is below
1e-9 at ``d ≥ 5`` for ``C|ω|√d ≤ 2.7``; it grows for ``d = 1`` with a large ``C|ω|`` (``square``,
``C ω = 2.4``: 2e-3), where the integrand has a pole near ``ρ = 0``.

**Small ω.** With ``f(x)/f(0) = 1 + C_f x + a_2 x² + …`` (``C_f = f'(0)/f(0)``),
``τ_h = C_f ω_h + O(ω³)`` and ``K_hk = 1 + C_f² d ω_h ω_k + O(ω⁴)``, so to leading order
:math:`\tilde L_f = \sigma^2 + (1 - C_f\mu^\top\omega)^2 + c(\sum_h\mu_h)^2 + c\,C_f^2 d(\mu^\top\omega)^2`:
the softmax's loss with ``ω → C_f ω``. The limit predictor is debiased GD with step
``η = C_f μᵀω = 2 C_f γ μ₊`` on the two-sign manifold, optimal at ``η* = 1/(1 + cd)``.

References
----------
docs/theory.md#other-activations, docs/theory.md#approximate-loss
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.activations import Activation, as_activation
from reduced_dynamics.dynamics.loss import MAX_EXPONENT, LossGradient, LossOverflowError
from reduced_dynamics.estimation.prompts import as_generator, check_n_prompts, iter_prompts
from reduced_dynamics.estimation.risk import RiskEstimate, _Moments
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "QUERY_NODES",
    "ActTerms",
    "ValueAndSlope",
    "tilt_ratio",
    "fluctuation_kernel",
    "act_terms",
    "act_loss",
    "act_loss_grad",
    "act_mc_risk",
]

#: Gauss nodes of the average over the query norm ``ρ = |x_q|²/d ~ χ²_d/d``.
QUERY_NODES = 48
#: Trapezoidal rule in ``a ~ N(0, 1)`` for the quadrature route: half-width and step.
GRID_HALF_WIDTH, GRID_STEP = 12.0, 0.02
#: Largest ``|t|`` accepted by the quadrature route (trapezoid error ~exp(-π²/(0.02 |t|)) < 3e-13).
T_MAX = 17.0
#: Query-norm nodes whose weight ``w_j ρ_j`` is below this are dropped (their contribution is below it).
NODE_CUTOFF = 1e-17
#: The tanh rule's step doubles up to this many times at small arguments, keeping ``h · max|t| ≤ COARSE_HT``
#: (:func:`_a_rule_for`).
STEP_DOUBLINGS, COARSE_HT = 4, 0.24
METHODS = ("auto", "closed", "quadrature")


@dataclass(frozen=True)
class ValueAndSlope(FrozenResult):
    """A function's value and its derivative in the first argument (:func:`tilt_ratio`, :func:`fluctuation_kernel`).

    Attributes
    ----------
    value : ndarray
    slope : ndarray
        Same shape as ``value``.
    """

    value: np.ndarray
    slope: np.ndarray


@functools.lru_cache(maxsize=64)
def _query_rule(d: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``ρ_j`` and weights ``w_j`` (sum 1) of the Gauss rule for ``ρ = χ²_d / d`` (Golub–Welsch).

    ``r² = 2x`` with ``x`` Gamma(d/2): the generalised Laguerre weight ``x^α e^{-x}``, ``α = d/2 − 1``.
    The Jacobi matrix has diagonal ``2i + α + 1`` and off-diagonal ``sqrt(i (i + α))``; the weights are
    the squared first components of its eigenvectors (no Gamma function, so any d works).
    """
    alpha = d / 2.0 - 1.0
    i = np.arange(n, dtype=np.float64)
    diag = 2.0 * i + alpha + 1.0
    off = np.sqrt(i[1:] * (i[1:] + alpha))
    J = np.diag(diag) + np.diag(off, 1) + np.diag(off, -1)
    x, V = np.linalg.eigh(J)
    w = V[0] ** 2
    w /= w.sum()
    rho = 2.0 * x / d
    for a in (rho, w):
        a.setflags(write=False)
    return rho, w


@functools.lru_cache(maxsize=8)
def _a_rule(step: float = GRID_STEP) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoidal nodes ``a`` and weights ``φ(a) h`` (renormalised to sum 1) for ``E[g(a)]``, ``a ~ N(0,1)``,
    step ``h = step`` on ``[-12, 12]`` (to the nearest whole number of steps)."""
    n = int(round(GRID_HALF_WIDTH / step))
    a = np.arange(-n, n + 1) * step  # symmetric: a[n + k] = -a[n - k] exactly
    w = np.exp(-0.5 * a * a)
    w /= w.sum()
    for v in (a, w):
        v.setflags(write=False)
    return a, w


def _a_rule_for(t, activation: Activation) -> tuple[np.ndarray, np.ndarray]:
    """The trapezoidal rule of the quadrature route at arguments ``t`` (already within :data:`T_MAX`).

    ``1 + tanh``: the rule's error is ``~exp(-π²/(h |t|))`` (poles of ``tanh(ta)`` at ``|Im a| = π/(2|t|)``), so a
    smaller largest argument allows a larger step: ``h = GRID_STEP · 2^k`` with the largest ``k ≤``
    :data:`STEP_DOUBLINGS` such that ``h · max|t| ≤`` :data:`COARSE_HT` (``k = 0`` serves every ``|t| ≤ T_MAX``,
    ``h |t| ≤ 0.34``, as before). Measured against scipy's adaptive ``quad`` at each level's largest argument
    (tests/reduced_dynamics/activation_dynamics/test_loss.py), the coarser levels are at least as accurate as
    the finest one at ``|t| = 17`` (relative errors of ``m`` and ``m'``: at most 3e-16 and 4e-14, against 8e-15 and
    8e-11); ``h ≤ 0.32`` keeps the Gaussian's own trapezoid error ``~exp(-2π²/h²)`` below 1e-80. Other
    activations keep :data:`GRID_STEP`.
    """
    if activation.name != "tanh":
        return _a_rule()
    tmax = float(np.max(np.abs(t))) if np.size(t) else 0.0
    k = 0
    while k < STEP_DOUBLINGS and GRID_STEP * 2.0 ** (k + 1) * tmax <= COARSE_HT:
        k += 1
    return _a_rule(GRID_STEP * 2.0**k)


def _check_method(method: str, act: Activation) -> str:
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"`method` must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "closed" and act.name == "tanh":
        raise ValueError("`method` 'closed' is not available for activation 'tanh' (no closed form); use 'quadrature'")
    if method == "auto":
        return "quadrature" if act.name == "tanh" else "closed"
    return method


def _f_df(x, activation: Activation):
    """``f(x)`` and ``f'(x)`` (for tanh from one ``tanh`` evaluation: ``1 + th``, ``1 − th²``)."""
    if activation.name == "tanh":
        th = np.tanh(x)
        return 1.0 + th, 1.0 - th * th
    return activation._f(x), activation._df(x)


def _check_t(t, where):
    tmax = float(np.max(np.abs(t))) if np.size(t) else 0.0
    if not tmax <= T_MAX:
        raise ValueError(
            f"{where}: |ω|·√(d ρ) reached {tmax:.3g} > {T_MAX:g}, outside the accurate range of the quadrature; "
            "use a smaller `omega`"
        )


def tilt_ratio(t, activation: Activation, *, method: str = "auto") -> ValueAndSlope:
    r"""The tilt ``m_f(t) = E[a f(ta)]/E[f(ta)]`` and its derivative ``m_f'(t)``, ``a ~ N(0, 1)``.

    A head's weighted average of ``x`` tends to ``m_f(ω|x_q|) x_q/|x_q|`` (docs/theory.md#other-activations).

    Parameters
    ----------
    t : array_like, any shape
    activation : Activation
    method : {"auto", "closed", "quadrature"}
        ``auto``: the closed form where there is one (exp, affine, square), else the quadrature.

    Returns
    -------
    ValueAndSlope
        ``value = m_f(t)``, ``slope = m_f'(t)``, shape of ``t``.
    """
    t = check_finite_array("t", t, min_ndim=0)
    activation = as_activation(activation)
    with np.errstate(over="ignore", invalid="ignore"):
        m, dm = _tilt(t, activation, method)
    return ValueAndSlope(value=_finite_terms(m, "t"), slope=_finite_terms(dm, "t"))


def _finite_terms(x, names: str) -> np.ndarray:
    x = np.asarray(x)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"`{names}` too large: the terms are not finite in float64; use smaller values")
    return x


def _tilt(t, activation: Activation, method: str):
    t = np.asarray(t, dtype=np.float64)
    method = _check_method(method, activation)
    if method == "closed":
        c = activation.c
        if activation.name == "exp":
            return t.copy(), np.ones_like(t)
        if activation.name == "affine":
            return c * t, np.full_like(t, c)
        q = 1.0 + (c * t) ** 2  # square
        return 2.0 * c * t / q, 2.0 * c * (2.0 - q) / q**2
    _check_t(t, "tilt_ratio")
    a, w = _a_rule_for(t, activation)
    if activation.name == "tanh":
        # 1 + tanh = 1 + odd: on the symmetric grid E f(ta) = 1 and E a f'(ta) = 0 exactly, so
        # m = E[a tanh(ta)] and m' = E[a² sech²(ta)], each twice the sum over a > 0 (half the work)
        h = a.size // 2
        ap, wp = a[h + 1 :], 2.0 * w[h + 1 :]
        with np.errstate(over="ignore"):
            th = t[..., None] * ap
            np.tanh(th, out=th)
        # in place, the same operations as ((1 - th²) a²) @ wp: two (..., 600) arrays instead of five
        y = th * ap
        m = y @ wp
        np.multiply(th, th, out=y)
        np.subtract(1.0, y, out=y)
        y *= ap * ap
        return m, y @ wp
    ta = t[..., None] * a
    with np.errstate(over="ignore"):
        F, dF = _f_df(ta, activation)
    Q = F @ w  # E f(ta)
    N = (F * a) @ w  # E a f(ta)
    dQ = (dF * a) @ w  # d/dt E f(ta) = E a f'(ta)
    dN = (dF * (a * a)) @ w  # d/dt E a f(ta) = E a² f'(ta)
    return N / Q, (dN * Q - N * dQ) / Q**2


def fluctuation_kernel(t1, t2, activation: Activation, *, method: str = "auto") -> ValueAndSlope:
    r"""``K(t_1, t_2) = E[f(t_1 a) f(t_2 a)] / (E f(t_1 a) E f(t_2 a))`` and ``∂K/∂t_1``, ``a ~ N(0, 1)``.

    Parameters
    ----------
    t1, t2 : array_like, broadcasting together
    activation : Activation
    method : {"auto", "closed", "quadrature"}

    Returns
    -------
    ValueAndSlope
        ``value = K``, ``slope = ∂K/∂t_1``, the broadcast shape.
    """
    t1 = check_finite_array("t1", t1, min_ndim=0)
    t2 = check_finite_array("t2", t2, min_ndim=0)
    try:
        np.broadcast_shapes(t1.shape, t2.shape)
    except ValueError:
        raise ValueError(f"`t1` and `t2` must broadcast together, got shapes {t1.shape} and {t2.shape}") from None
    activation = as_activation(activation)
    with np.errstate(over="ignore", invalid="ignore"):
        K, dK = _kernel(t1, t2, activation, method)
    return ValueAndSlope(value=_finite_terms(K, "t1` or `t2"), slope=_finite_terms(dK, "t1` or `t2"))


def _kernel(t1, t2, activation: Activation, method: str):
    t1, t2 = np.broadcast_arrays(np.asarray(t1, dtype=np.float64), np.asarray(t2, dtype=np.float64))
    method = _check_method(method, activation)
    if method == "closed":
        c = activation.c
        if activation.name == "exp":
            K = np.exp(t1 * t2)
            return K, t2 * K
        if activation.name == "affine":
            return 1.0 + c * c * t1 * t2, np.broadcast_to(c * c * t2, t1.shape).copy()
        p, q = c * t1, c * t2  # square: E[((1+pa)(1+qa))²] = 1 + p² + q² + 4pq + 3p²q²
        num = 1.0 + p * p + q * q + 4.0 * p * q + 3.0 * p * p * q * q
        den = (1.0 + p * p) * (1.0 + q * q)
        dnum = 2.0 * p + 4.0 * q + 6.0 * p * q * q
        dden = 2.0 * p * (1.0 + q * q)
        return num / den, c * (dnum * den - num * dden) / den**2
    both = np.concatenate([t1.ravel(), t2.ravel()])
    _check_t(both, "fluctuation_kernel")
    a, w = _a_rule_for(both, activation)
    with np.errstate(over="ignore"):
        F1, dF1 = _f_df(t1[..., None] * a, activation)
        F2 = activation._f(t2[..., None] * a)
    return _kernel_sums(F1, dF1, F2, a, w)


def _kernel_sums(F1, dF1, F2, a, w):
    """``K`` and ``∂K/∂t_1`` from ``f(t_1 a)``, ``f'(t_1 a)``, ``f(t_2 a)`` on the nodes ``a`` (weights ``w``)."""
    Q1, Q2 = F1 @ w, F2 @ w
    G = (F1 * F2) @ w
    dG = (dF1 * F2 * a) @ w
    dQ1 = (dF1 * a) @ w
    K = G / (Q1 * Q2)
    return K, (dG * Q1 - G * dQ1) / (Q1 * Q1 * Q2)


@dataclass(frozen=True)
class ActTerms(FrozenResult):
    r"""The pieces of :math:`\tilde L_f` at a state ``ω`` (docs/theory.md#other-activations).

    Attributes
    ----------
    T1 : ndarray, shape (..., H)
        ``E_ρ[ρ τ_h(ρ)]``, the tilt (``C_f ω`` to first order; ``ω`` for exp).
    T2 : ndarray, shape (..., H, H)
        ``E_ρ[ρ τ_h(ρ) τ_k(ρ)]``.
    K : ndarray, shape (..., H, H)
        The fluctuation kernel at ``t = ω√d``.
    dT1 : ndarray, shape (..., H)
        ``∂T1_h/∂ω_h``.
    dT2 : ndarray, shape (..., H, H)
        ``E_ρ[ρ τ_h'(ρ) τ_k(ρ)]`` (``∂T2_hk/∂ω_h`` for ``h ≠ k``; half of it for ``h = k``).
    dK : ndarray, shape (..., H, H)
        ``∂K_hk/∂ω_h`` (``√d ∂_1K``).
    """

    T1: np.ndarray
    T2: np.ndarray
    K: np.ndarray
    dT1: np.ndarray
    dT2: np.ndarray
    dK: np.ndarray


def _setting(setting, where) -> Setting:
    return as_setting(setting, where).require_isotropic(where)


def act_terms(omega, setting: Setting, *, method: str = "auto", query_nodes: int = QUERY_NODES) -> ActTerms:
    """Tilt and fluctuation terms of :math:`\\tilde L_f` at ``omega`` (shape ``(..., H)``), activation of ``setting``.

    Parameters
    ----------
    omega : array_like, shape (..., H)
    setting : Setting
        Scalar, isotropic; ``setting.activation_fn`` is ``f``.
    method : {"auto", "closed", "quadrature"}
        See :func:`tilt_ratio`.
    query_nodes : int, in [2, 400]
        Gauss nodes of the ``ρ`` average (ignored for exp and affine in closed form: exact).

    Returns
    -------
    ActTerms

    Raises
    ------
    LossOverflowError
        ``exp``: ``d max ω²`` beyond ``reduced_dynamics.dynamics.loss.MAX_EXPONENT`` (600).
    """
    setting = _setting(setting, "act_terms")
    omega = check_finite_array("omega", omega, min_ndim=1)
    if isinstance(query_nodes, bool) or not isinstance(query_nodes, (int, np.integer)) or not 2 <= query_nodes <= 400:
        raise ValueError(f"`query_nodes` must be an integer in [2, 400], got {query_nodes!r}")
    act = setting.activation_fn
    return _terms(omega, act, _check_method(method, act), setting.d, int(query_nodes))


def _kernel_pairs(t, act: Activation, m: str):
    """:func:`_kernel` of every pair ``(t_h, t_k)`` of ``t`` (..., H): each ``f(t_h a)`` evaluated once (the
    quadrature evaluated it for every pair), the arrays and sums of :func:`_kernel` otherwise, bit for bit."""
    t1, t2 = t[..., :, None], t[..., None, :]
    if m == "closed":
        return _kernel(t1, t2, act, m)
    t1, t2 = np.broadcast_arrays(t1, t2)
    both = np.concatenate([t1.ravel(), t2.ravel()])
    _check_t(both, "fluctuation_kernel")
    a, w = _a_rule_for(both, act)
    with np.errstate(over="ignore"):
        F, dF = _f_df(t[..., None] * a, act)  # (..., H, A): f(t_h a), f'(t_h a)
        F2 = act._f(t[..., None] * a)
    shape = t1.shape + a.shape
    F1 = np.ascontiguousarray(np.broadcast_to(F[..., :, None, :], shape))
    dF1 = np.ascontiguousarray(np.broadcast_to(dF[..., :, None, :], shape))
    F2 = np.ascontiguousarray(np.broadcast_to(F2[..., None, :, :], shape))
    return _kernel_sums(F1, dF1, F2, a, w)


def _terms(omega, act: Activation, m: str, d: int, query_nodes: int) -> ActTerms:
    """:func:`act_terms` of a checked ``omega`` and method (the integrator's kernel calls it directly)."""
    sd = math.sqrt(d)
    if act.name == "exp":
        worst = d * float(np.max(omega * omega))
        if worst > MAX_EXPONENT:
            raise LossOverflowError(
                f"exp(d·ω_h·ω_k) overflows: d·max(ω²) = {worst:.4g} exceeds {MAX_EXPONENT:g}; reduce |omega|"
            )
    with np.errstate(over="ignore", invalid="ignore"):  # the closed forms overflow at a huge omega: refused below
        t = omega * sd
        K, dK1 = _kernel_pairs(t, act, m)
        dK = dK1 * sd
        if m == "closed" and act.name in ("exp", "affine"):  # τ = C ω for every query: the ρ average is exact
            cf = 1.0 if act.name == "exp" else act.c
            T1 = cf * omega
            T2 = cf * cf * omega[..., :, None] * omega[..., None, :]
            dT1 = np.full_like(omega, cf)
            dT2 = cf * cf * np.broadcast_to(omega[..., None, :], T2.shape).copy()
        else:
            rho, w = _query_rule(int(d), query_nodes)
            keep = w * rho >= NODE_CUTOFF
            rho, w = rho[keep], w[keep]
            r = np.sqrt(d * rho)  # (J,)
            mt, dmt = _tilt(omega[..., None] * r, act, m)  # (..., H, J)
            tau = mt / r
            wr = w * rho
            T1 = tau @ wr
            dT1 = dmt @ wr
            T2 = np.einsum("...hj,...kj,j->...hk", tau, tau, wr)
            dT2 = np.einsum("...hj,...kj,j->...hk", dmt, tau, wr)
    if not all(np.all(np.isfinite(a)) for a in (T1, T2, K, dT1, dT2, dK)):
        raise LossOverflowError(
            f"act_terms: the tilt and fluctuation terms of {act.name!r} are not finite in float64 at "
            f"max |omega| = {float(np.max(np.abs(omega))):.4g}; reduce |omega|"
        )
    return ActTerms(T1=T1, T2=T2, K=K, dT1=dT1, dT2=dT2, dK=dK)


def _pair(omega, mu):
    omega = check_finite_array("omega", omega, min_ndim=1)
    mu = check_finite_array("mu", mu, min_ndim=1)
    if omega.shape[-1] != mu.shape[-1]:
        raise ValueError(
            f"`omega` and `mu` must have the same number of heads H (last axis), got shapes {omega.shape} and {mu.shape}"
        )
    try:
        return np.broadcast_arrays(omega, mu)
    except ValueError:
        raise ValueError(
            f"`omega` and `mu` must broadcast over their leading axes, got shapes {omega.shape} and {mu.shape}"
        ) from None


def _out(a):
    a = np.asarray(a)
    if not np.all(np.isfinite(a)):
        raise LossOverflowError("act_loss is not finite: |mu| or |omega| too large for float64")
    return float(a) if a.ndim == 0 else a


def act_loss(omega, mu, setting: Setting, *, method: str = "auto", query_nodes: int = QUERY_NODES):
    r"""The approximate loss :math:`\tilde L_f(\omega, \mu)` with the activation of ``setting``.

    .. math:: \tilde L_f = 1 + \sigma^2 - 2\mu^\top T_1 + \mu^\top(T_2 + cK)\mu

    (module docstring; equals :func:`reduced_dynamics.approx_loss` for ``exp``).

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
        The state; leading axes broadcast.
    setting : Setting
        Scalar, isotropic.
    method : {"auto", "closed", "quadrature"}
    query_nodes : int
        See :func:`act_terms`.

    Returns
    -------
    float or ndarray, shape (...)

    Examples
    --------
    >>> s = Setting(d=5, L=40, sigma2=0.1, activation="square", activation_c=0.5)
    >>> round(act_loss([0.1, -0.1], [4.0, -4.0], s), 6)
    0.231557
    """
    setting = _setting(setting, "act_loss")
    omega, mu = _pair(omega, mu)
    T = act_terms(omega, setting, method=method, query_nodes=query_nodes)
    with np.errstate(over="ignore", invalid="ignore"):
        A = T.T2 + setting.c * T.K
        out = 1.0 + setting.sigma2 - 2.0 * np.sum(mu * T.T1, axis=-1) + np.einsum("...h,...hk,...k->...", mu, A, mu)
    return _out(out)


def act_loss_grad(omega, mu, setting: Setting, *, method: str = "auto", query_nodes: int = QUERY_NODES) -> LossGradient:
    r"""Gradient of :math:`\tilde L_f` in ``(ω, μ)``.

    .. math::

        \partial_{\mu}\tilde L_f = -2T_1 + 2(T_2 + cK)\mu, \qquad
        \partial_{\omega_h}\tilde L_f = -2\mu_h T_{1,h}' + 2\mu_h\sum_k \mu_k\big(E_\rho[\rho\,\tau_h'\tau_k]
            + c\,\partial_{\omega_h}K_{hk}\big)

    (``K`` and ``T_2`` are symmetric, so the diagonal terms carry the same factor 2).

    Parameters
    ----------
    omega, mu : array_like, shape (..., H)
    setting : Setting
    method, query_nodes
        See :func:`act_terms`.

    Returns
    -------
    LossGradient
        ``omega`` and ``mu`` parts, shape ``(..., H)``.
    """
    setting = _setting(setting, "act_loss_grad")
    omega, mu = _pair(omega, mu)
    gom, gmu = _grad_of_terms(act_terms(omega, setting, method=method, query_nodes=query_nodes), mu, setting.c)
    return LossGradient(omega=gom, mu=gmu)


def _grad_of_terms(T: ActTerms, mu, c):
    """``(∂_ω, ∂_μ)`` of :math:`\\tilde L_f` from its terms at ``ω`` (:func:`act_loss_grad`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        gmu = -2.0 * T.T1 + 2.0 * np.einsum("...hk,...k->...h", T.T2 + c * T.K, mu)
        gom = -2.0 * mu * T.dT1 + 2.0 * mu * np.einsum("...hk,...k->...h", T.dT2 + c * T.dK, mu)
    for a in (gmu, gom):
        if not np.isfinite(a).all():
            raise LossOverflowError("act_loss_grad is not finite: |mu| or |omega| too large for float64")
    return gom, gmu


def act_mc_risk(omega, mu, setting: Setting, *, n_prompts: int = 200_000, seed) -> RiskEstimate:
    r"""Monte Carlo risk of the reduced model with the activation of ``setting`` (its true risk at finite L).

    Rao–Blackwellised over β, the noise and the frame orthogonal to ``x_q``
    (:func:`reduced_dynamics.estimation.predictors.conditional_loss` on the statistics ``s_l, |x_q|²``).

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
        One state.
    setting : Setting
        Scalar, isotropic.
    n_prompts : int, in [2, 1e9]
    seed : int or Generator
        Required.

    Returns
    -------
    RiskEstimate

    Raises
    ------
    ValueError
        An ``affine`` normaliser ``Σ_j f(ω s_j)`` that is not safely positive on some prompt
        (the model's risk is then undefined: its weights blow up).

    Notes
    -----
    For ``affine`` the risk is, strictly, infinite for every ``ω ≠ 0``: the normaliser
    ``L + Cω Σ_l s_l`` has a positive density at 0 and ``ŷ`` grows like its inverse. For moderate
    ``Cω`` the event is astronomically rare (``Cω = 0.075``, ``d = 5``, ``L = 40``: about ``1e-36``), so the
    estimate is the risk on the event that the normaliser stays positive; a prompt where it does not
    raises instead of being averaged in.
    """
    from reduced_dynamics.estimation.predictors import conditional_loss
    from reduced_dynamics.model.attention import _weights

    setting = _setting(setting, "act_mc_risk")
    omega, mu = _pair(omega, mu)
    if omega.ndim != 1:
        raise ValueError(f"`omega` and `mu` must be one state of shape (H,), got {omega.shape}")
    n_prompts = check_n_prompts(n_prompts)
    act = setting.activation_fn
    H, L = omega.size, setting.L
    mom = _Moments(1)
    per = 8 * L * (4 * H + 6) + 64
    for pr in iter_prompts(
        n_prompts, setting, seed=as_generator(seed), per_prompt_bytes=per, stats_only=True, covariates_only=True
    ):
        S = pr.scores[:, None, :] * omega[None, :, None]  # (n, H, L)
        if act.name == "exp":  # stable softmax
            S -= S.max(axis=-1, keepdims=True)
            F = np.exp(S)
            norm = F.sum(axis=-1)
        else:
            F, _, norm = _weights(S, act, "act_mc_risk")
        w = np.einsum("nhl,h->nl", F / norm[..., None], mu)
        try:
            mom.add(conditional_loss(pr, w, setting=setting))
        except ValueError:  # the losses overflow float64: the state is too large
            raise ValueError(
                f"act_mc_risk: the risk at max |mu| = {float(np.max(np.abs(mu))):.3g} overflows float64; reduce |mu|"
            ) from None
    return RiskEstimate(risk=float(mom.mean[0]), stderr=mom.stderr(0), n=n_prompts, name=f"reduced[{act.name}]")
