r"""Small-γ expansion of the exact finite-L risk on the solution manifold (docs/theory.md#exact-risk).

On the two-sign manifold (p positive heads at :math:`\omega_h = +\gamma` with
total OV mass :math:`M`, n negative heads at :math:`-\gamma` with total mass
:math:`-M`, no dummy head) the reduced predictor depends on the heads only
through :math:`(\gamma, M)`, and at fixed effective step :math:`\eta = 2\gamma M`
its exact finite-L risk has the expansion

.. math::

    \mathcal E(\gamma;\eta) = R_{\rm dgd}(\eta) + A_2(\eta)\gamma^2 + A_4(\eta)\gamma^4 + O(\gamma^6),

with :math:`R_{\rm dgd}` the exact risk of debiased GD (docs/theory.md#finite-l-results)
and, **exactly for every** :math:`L \ge 2`, :math:`d \ge 1`, :math:`\sigma^2 \ge 0`,

.. math::

    A_2 = -\frac{2\eta(L-1)(d+2)}{L^3}\Big[\big(L + (1+\sigma^2)d + 2\big)\eta - L\Big],

    A_4 = \frac{\eta(L-1)(d+2)(d+4)}{6L^4}\Big[L^2\big(k\eta - 3\eta + 6\big)
          - 12L(k\eta + 3) + 54k\eta + 216\eta\Big], \qquad k = (1+\sigma^2)d .

(p and n do not enter: heads of one sign add.) At :math:`\eta^* = L/(L+k)`,
where :math:`L(1-\eta^*) = k\eta^*`, the bracket of :math:`A_2` reduces to
:math:`2\eta^*` and

.. math:: A_2(\eta^*) = -\frac{4\eta^{*2}(L-1)(d+2)}{L^3} < 0 .

Derivation (:func:`derive_manifold_expansion` does it with sympy; nothing below is typed
in except the final closed forms, which the tests prove equal to the derived ones).

1. *Reduction.* Given the covariates, β and ε integrate out
   (docs/theory.md#measuring-risks): with :math:`r = |x_q|`, :math:`s_l = r g_l`,
   :math:`g_l` iid N(0, 1) given :math:`r`, :math:`r^2\sim\chi^2_d`, the
   conditional risk of weights :math:`w` is
   :math:`(r - w^\top g)^2/d + \sigma^2 + ((d-1)/d + \sigma^2)|w|^2`.
2. *Softmax series.* With :math:`b_l = g_l - \bar g`, :math:`B_k = \sum_l b_l^k`
   (:math:`B_0 = L`, :math:`B_1 = 0`) and :math:`\tau = \gamma r`,
   :math:`L\,\mathrm{softmax}_l(\tau g) = f(\tau; b_l) = e^{\tau b_l}/(1 + \sum_{k\ge2}\tau^k B_k/(L\,k!))`,
   a power series :math:`\sum_k f_k(b_l)\tau^k` whose coefficients are polynomials in
   :math:`b_l` and the :math:`B_k/L` (:math:`f_1 = b`, :math:`f_3 = b^3/6 - b B_2/(2L) - B_3/(6L)`).
   The weights :math:`w = M(p(\gamma) - p(-\gamma))` keep the odd orders:
   :math:`w_l = \tfrac{\eta}{L}\sum_j \gamma^{2j} r^{2j+1} f_{2j+1}(b_l)`; the dependence of
   the OV mass :math:`M = \eta/(2\gamma)` on γ is what turns :math:`\tau^{2j+1}` into
   :math:`\gamma^{2j}`. Since :math:`\sum_l w_l = 0`, :math:`w^\top g = w^\top b`.
3. *Collect.* With :math:`Q_j = \tfrac1L\sum_l f_{2j+1}(b_l) b_l` and
   :math:`P_{jk} = \sum_l f_{2j+1}(b_l) f_{2k+1}(b_l)` (polynomials in the :math:`B_k`),
   the conditional risk is
   :math:`\sigma^2 + \tfrac{r^2}{d}(1 - \eta\sum_j(\gamma r)^{2j}Q_j)^2
   + (\tfrac{d-1}{d}+\sigma^2)\tfrac{\eta^2}{L^2}\sum_{jk}\gamma^{2(j+k)}r^{2(j+k)+2}P_{jk}`;
   every term of order :math:`\gamma^{2n}` carries :math:`r^{2n+2}`, averaged exactly by
   :math:`E r^{2m} = d(d+2)\cdots(d+2m-2)`.
4. *Gaussian averages for symbolic L.* :math:`B_k = \sum_j \binom kj P_j(-P_1/L)^{k-j}` in the
   raw power sums :math:`P_j = \sum_l g_l^j`, and
   :math:`E\prod_i P_{k_i} = \sum_\pi (L)_{|\pi|}\prod_{\beta\in\pi} m_{\sum_{i\in\beta}k_i}`
   over the set partitions π of the factors (indices equal within a block, distinct
   across blocks), :math:`m_n = E g^n = (n-1)!!` for even n, 0 for odd n, and
   :math:`(L)_j` the falling factorial (:func:`power_sum_moment`).

The expansion is a Taylor expansion of a smooth function of γ (the softmax weights
are bounded and their τ-derivatives are bounded by polynomials in :math:`\max_l|g_l|`),
so the coefficients are the Taylor coefficients of the exact risk at γ = 0; the
series itself is asymptotic.

Consistency (tested): the :math:`\gamma^0` term is :math:`R_{\rm dgd}(\eta)`; the
:math:`1/L` parts of :math:`A_2, A_4` are the corrected loss's
:math:`a_2/L = 2(d+2)(1-\eta)\eta/L` and :math:`a_4/L`
(:func:`reduced_dynamics.dynamics.corrected_loss.corrected_manifold_coefficients`). At
:math:`\eta^*` the corrected :math:`a_2/L` is :math:`+2(d+2)k\eta^{*2}/L^2`, while the
exact :math:`A_2` also has the :math:`O(L^{-2})` term :math:`-2(d+2)(k+2)\eta^{*2}/L^2`
the corrected loss drops; the sum is negative.

Along :math:`S_\gamma` proper (L̃'s OV mass, :math:`\eta_{\rm eff}(\gamma) = \eta^* - O(\gamma^4)`)
the same coefficients apply at :math:`\eta^*`, because :math:`R_{\rm dgd}'(\eta^*) = 0`
exactly: the γ-dependence of the mass enters at :math:`O(\gamma^6)`.

References
----------
docs/theory.md#exact-risk, docs/theory.md#solution-manifold, docs/theory.md#corrected-loss.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_finite_float, check_positive_int
from reduced_dynamics.estimation.closed_forms import gd_risk
from reduced_dynamics.setting import as_setting

if TYPE_CHECKING:  # sympy is imported by the symbolic functions when they run, not with the module
    import sympy as sp

__all__ = [
    "MAX_SYMBOLIC_ORDER",
    "ExpansionSymbols",
    "SymbolicManifoldExpansion",
    "ExactManifoldCoefficients",
    "ManifoldMinimiser",
    "expansion_symbols",
    "power_sum_moment",
    "softmax_series_coefficients",
    "derive_manifold_expansion",
    "closed_form_coefficients",
    "exact_manifold_coefficients",
    "dgd_risk",
    "manifold_minimiser_estimate",
    "pathwise_gamma_coefficients",
]

#: Largest order in γ that :func:`derive_manifold_expansion` accepts (γ⁶ takes about a minute).
MAX_SYMBOLIC_ORDER = 6


# ------------------------------------------------------------------ symbols


@dataclass(frozen=True)
class ExpansionSymbols(FrozenResult):
    """The sympy symbols of the expansion (all positive).

    Attributes
    ----------
    L, d, sigma2, eta : sympy.Symbol
        Prompt length, dimension, noise variance, effective step η = 2γM.
    """

    L: sp.Symbol
    d: sp.Symbol
    sigma2: sp.Symbol
    eta: sp.Symbol


@functools.cache
def expansion_symbols() -> ExpansionSymbols:
    """The symbols ``L, d, sigma2, eta`` used by every expression of this module.

    Returns
    -------
    ExpansionSymbols
    """
    import sympy as sp

    L, d, s2, eta = sp.symbols("L d sigma2 eta", positive=True)
    return ExpansionSymbols(L=L, d=d, sigma2=s2, eta=eta)


@functools.cache
def _x_tau():
    """The symbols ``x`` (b_l, a centred sample) and ``tau`` (τ = γ r)."""
    import sympy as sp

    return sp.Symbol("x"), sp.Symbol("tau")


def _B(k):
    import sympy as sp

    return sp.Symbol(f"B{k}")


def _P(k):
    import sympy as sp

    return sp.Symbol(f"P{k}")


# ------------------------------------------------- Gaussian power-sum moments


def _gauss_moment(n: int) -> int:
    """E g^n for g ~ N(0, 1)."""
    return 0 if n % 2 else math.prod(range(n - 1, 0, -2))


@functools.cache
def _falling_poly(j: int) -> tuple[int, ...]:
    """Coefficients (ascending powers of L) of L − j."""
    return (-j, 1)


def _pmul(a, b):
    out = [0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        if x:
            for j, y in enumerate(b):
                out[i + j] += x * y
    return out


def _padd(a, b):
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


@functools.cache
def _moment_rec(ms: tuple[tuple[int, int], ...], j: int) -> tuple[int, ...]:
    """Σ over set partitions of the multiset ``ms`` of Π_blocks m(block) × (L−j)(L−j−1)⋯ (ascending L-coefficients).

    The block of the first element (smallest k) is chosen as that element plus a
    sub-multiset of the rest, counted with binomial multiplicities.
    """
    if not ms:
        return (1,)
    k0, c0 = ms[0]
    rest = list(ms)
    rest[0] = (k0, c0 - 1)
    total = [0]
    ranges = [range(c + 1) for _, c in rest]

    def rec(i, chosen, weight, ksum):
        nonlocal total
        if i == len(rest):
            mom = _gauss_moment(k0 + ksum)
            if mom == 0:
                return
            remaining = tuple((k, c - t) for (k, c), t in zip(rest, chosen) if c - t > 0)
            sub = _moment_rec(remaining, j + 1)
            term = _pmul(_falling_poly(j), sub)
            total = _padd(total, [weight * mom * x for x in term])
            return
        k, c = rest[i]
        for t in ranges[i]:
            rec(i + 1, chosen + (t,), weight * math.comb(c, t), ksum + t * k)

    rec(0, (), 1, 0)
    return tuple(total)


def power_sum_moment(ks) -> sp.Expr:
    r"""Exact :math:`E\prod_i P_{k_i}` for the power sums :math:`P_k = \sum_{l=1}^L g_l^k`, g iid N(0, 1).

    A polynomial in the symbol ``L`` of :func:`expansion_symbols`, valid for every
    integer L ≥ 1 (module docstring, step 4).

    Parameters
    ----------
    ks : sequence of int, each >= 1
        The powers (a multiset; order does not matter), at most 16 of them.

    Returns
    -------
    sympy.Expr
        Polynomial in L.

    Examples
    --------
    >>> power_sum_moment([2, 2])   # E (Σ g²)² = L(L + 2)
    L**2 + 2*L
    """
    import sympy as sp

    if isinstance(ks, (str, bytes, dict)) or not isinstance(ks, (list, tuple, np.ndarray)) or np.ndim(ks) != 1:
        raise ValueError(f"`ks` must be a sequence of integers >= 1, got {ks!r}")
    ks = [check_positive_int("ks", k, hi=64) for k in ks]
    if len(ks) > 16:
        raise ValueError(f"`ks` must have at most 16 entries, got {len(ks)}")
    counts: dict[int, int] = {}
    for k in ks:
        counts[k] = counts.get(k, 0) + 1
    coeffs = _moment_rec(tuple(sorted(counts.items())), 0)
    L = expansion_symbols().L
    return sp.expand(sum(c * L**i for i, c in enumerate(coeffs)))


# ------------------------------------------------------------ softmax series


def softmax_series_coefficients(order: int) -> tuple[sp.Expr, ...]:
    r"""Coefficients :math:`f_k(x)`, k = 0..order, of :math:`L\,\mathrm{softmax}_l(\tau g) = \sum_k f_k(b_l)\tau^k`.

    :math:`f(\tau; x) = e^{\tau x}/(1 + \sum_{k\ge2}\tau^k B_k/(L\,k!))` with the
    centred power sums :math:`B_k` as symbols ``B2, B3, ...`` and ``x`` standing for
    :math:`b_l = g_l - \bar g`.

    Parameters
    ----------
    order : int, in [1, 9]

    Returns
    -------
    tuple of sympy.Expr, length ``order + 1``
    """
    return _softmax_series_coefficients(check_positive_int("order", _hashable_int(order), hi=9))


def _hashable_int(value):
    """``value`` unchanged unless it is unhashable (an array, a list): those fail the integer checks anyway."""
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


@functools.cache
def _softmax_series_coefficients(order: int) -> tuple[sp.Expr, ...]:
    import sympy as sp

    _X, _T = _x_tau()
    L = expansion_symbols().L
    den = 1 + sum(_T**k * _B(k) / (L * sp.factorial(k)) for k in range(2, order + 1))
    f = sp.expand(sp.series(sp.exp(_T * _X) / den, _T, 0, order + 1).removeO())
    return tuple(sp.expand(f.coeff(_T, k)) for k in range(order + 1))


def _sum_over_l(poly) -> sp.Expr:
    """Σ_l of a polynomial in x = b_l (coefficients in the B's): x^m → B_m, B_0 = L, B_1 = 0."""
    import sympy as sp

    _X, _T = _x_tau()
    L = expansion_symbols().L
    p = sp.Poly(sp.expand(poly), _X)
    out = 0
    for (m,), c in p.terms():
        out += c * (L if m == 0 else (0 if m == 1 else _B(m)))
    return sp.expand(out)


def _expect_in_g(expr) -> sp.Expr:
    """E over the iid N(0,1) g of a polynomial in the centred power sums B_k (coefficients may contain L)."""
    import sympy as sp

    L = expansion_symbols().L
    bsyms = sorted((s for s in expr.free_symbols if s.name.startswith("B")), key=lambda s: int(s.name[1:]))
    sub = {}
    for s in bsyms:
        k = int(s.name[1:])
        sub[s] = sum(sp.binomial(k, j) * (L if j == 0 else _P(j)) * (-_P(1) / L) ** (k - j) for j in range(k + 1))
    expr = sp.expand(expr.subs(sub))
    psyms = sorted((s for s in expr.free_symbols if s.name.startswith("P")), key=lambda s: int(s.name[1:]))
    if not psyms:
        return expr
    poly = sp.Poly(expr, *psyms)
    out = 0
    for mon, c in poly.terms():
        ks = []
        for s, e in zip(psyms, mon):
            ks += [int(s.name[1:])] * e
        out += c * power_sum_moment(ks)
    return sp.expand(out)


# ------------------------------------------------------------ the derivation


@dataclass(frozen=True)
class SymbolicManifoldExpansion(FrozenResult):
    r"""The derived coefficients of :math:`\mathcal E(\gamma;\eta) = \sum_n A_{2n}\gamma^{2n}` (sympy).

    Attributes
    ----------
    order : int
        Highest power of γ derived (even).
    coefficients : tuple of sympy.Expr
        ``coefficients[n]`` is :math:`A_{2n}` in the symbols of :func:`expansion_symbols`
        (``coefficients[0]`` is the exact debiased-GD risk :math:`R_{\rm dgd}(\eta)`), factored.
    """

    order: int
    coefficients: tuple

    def to_dict(self):
        """JSON-friendly: the coefficients as strings."""
        return {"order": self.order, "coefficients": [str(c) for c in self.coefficients]}


def derive_manifold_expansion(order: int = 4) -> SymbolicManifoldExpansion:
    r"""Derive :math:`A_0 = R_{\rm dgd}(\eta), A_2, \dots, A_{\rm order}` exactly (symbolic L, d, σ², η).

    Steps 1–4 of the module docstring; cached. Order 4 takes a few seconds, order 6 about a minute.

    Parameters
    ----------
    order : int, even, in [0, MAX_SYMBOLIC_ORDER]

    Returns
    -------
    SymbolicManifoldExpansion
    """
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 0:
        raise ValueError(f"`order` must be an even integer in [0, {MAX_SYMBOLIC_ORDER}], got {order!r}")
    order = int(order)
    if order % 2 or order > MAX_SYMBOLIC_ORDER:
        raise ValueError(f"`order` must be an even integer in [0, {MAX_SYMBOLIC_ORDER}], got {order!r}")
    return _derive_manifold_expansion(order)


@functools.cache
def _derive_manifold_expansion(order: int) -> SymbolicManifoldExpansion:
    import sympy as sp

    _X, _T = _x_tau()
    S = expansion_symbols()
    L, d, s2, eta = S.L, S.d, S.sigma2, S.eta
    nmax = order // 2
    f = softmax_series_coefficients(max(2 * nmax + 1, 1))
    Q = [_sum_over_l(f[2 * j + 1] * _X) / L for j in range(nmax + 1)]

    def P(j, k):
        return _sum_over_l(f[2 * j + 1] * f[2 * k + 1])

    coeffs = []
    for n in range(nmax + 1):
        # (1 - η Σ_j z^j Q_j)², z = (γr)²: coefficient of z^n
        first = (-2 * eta * Q[n] if n > 0 else 1 - 2 * eta * Q[0]) + eta**2 * sum(Q[j] * Q[n - j] for j in range(n + 1))
        second = sum(P(j, n - j) for j in range(n + 1))
        g_part = _expect_in_g(first) + (d - 1 + s2 * d) * eta**2 / L**2 * _expect_in_g(second)
        # E r^{2n+2}/d = (d+2)(d+4)...(d+2n)
        r_fac = sp.Mul(*[d + 2 * i for i in range(1, n + 1)])
        A = r_fac * g_part + (s2 if n == 0 else 0)
        coeffs.append(sp.factor(sp.simplify(A)))
    return SymbolicManifoldExpansion(order=order, coefficients=tuple(coeffs))


def closed_form_coefficients() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    r"""The typed closed forms :math:`(R_{\rm dgd}, A_2, A_4)` of the module docstring (sympy).

    The tests prove each equal to :func:`derive_manifold_expansion`'s.

    Returns
    -------
    tuple of three sympy.Expr
    """
    S = expansion_symbols()
    L, d, s2, eta = S.L, S.d, S.sigma2, S.eta
    k = (1 + s2) * d
    R0 = 1 + s2 - 2 * eta * (L - 1) / L + eta**2 * (L - 1) * (L + d + s2 * d) / L**2
    A2 = -2 * eta * (L - 1) * (d + 2) * ((L + k + 2) * eta - L) / L**3
    A4 = (
        eta
        * (L - 1)
        * (d + 2)
        * (d + 4)
        * (L**2 * (k * eta - 3 * eta + 6) - 12 * L * (k * eta + 3) + 54 * k * eta + 216 * eta)
        / (6 * L**4)
    )
    return R0, A2, A4


# ------------------------------------------------------------ numeric forms


@dataclass(frozen=True)
class ExactManifoldCoefficients(FrozenResult):
    r"""Numeric :math:`R_{\rm dgd}(\eta), A_2(\eta), A_4(\eta)` (:func:`exact_manifold_coefficients`).

    Attributes
    ----------
    a0 : float or ndarray
        :math:`R_{\rm dgd}(\eta)`, the exact risk of debiased GD with step η.
    a2 : float or ndarray
        :math:`A_2(\eta)`.
    a4 : float or ndarray
        :math:`A_4(\eta)`.

    Each has the broadcast shape of ``eta`` and ``setting.shape``.
    """

    a0: float | np.ndarray
    a2: float | np.ndarray
    a4: float | np.ndarray


def _out(x):
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def _arrays(setting):
    setting = as_setting(setting)
    setting.require_isotropic("exact_manifold_coefficients").require_softmax("exact_manifold_coefficients")
    shape = setting.shape
    return tuple(
        np.broadcast_to(np.asarray(v, dtype=np.float64), shape) for v in (setting.d, setting.L, setting.sigma2)
    )


def _eta_arg(eta, setting):
    if eta is None:
        d, L, s2 = _arrays(setting)
        return L / (L + (1.0 + s2) * d)
    eta = check_finite_array("eta", eta)
    if np.any(np.abs(eta) > 1e6):
        raise ValueError(f"`eta` must be finite with |eta| <= 1e6 (an effective step), got {eta!r}")
    return eta


def dgd_risk(eta, setting):
    r"""Exact finite-L risk of debiased GD with step η, :math:`A_0` of the expansion.

    :math:`1 + \sigma^2 - 2\eta(L-1)/L + \eta^2(L-1)(L+d+\sigma^2 d)/L^2`
    (docs/theory.md#finite-l-results), evaluated by the library's one implementation,
    :func:`reduced_dynamics.estimation.closed_forms.gd_risk` with ``debiased=True``; this
    function adds the expansion's conventions (``eta=None`` means η*, ``|eta| <= 1e6``, softmax).

    Parameters
    ----------
    eta : float or array_like, |eta| <= 1e6
    setting : Setting
        Isotropic; may be array-valued (the result broadcasts).

    Returns
    -------
    float or ndarray
    """
    _arrays(setting)  # validates: isotropic, softmax
    return _out(gd_risk(_eta_arg(eta, setting), setting, debiased=True))


def exact_manifold_coefficients(eta, setting) -> ExactManifoldCoefficients:
    r"""Exact :math:`R_{\rm dgd}(\eta)`, :math:`A_2(\eta)`, :math:`A_4(\eta)` at finite L (module docstring).

    Parameters
    ----------
    eta : float, array_like or None
        Effective step :math:`\eta = 2\gamma M`, |eta| <= 1e6; ``None`` means
        :math:`\eta^* = L/(L + (1+\sigma^2)d)`.
    setting : Setting
        Isotropic; may be array-valued (the result broadcasts).

    Returns
    -------
    ExactManifoldCoefficients

    References
    ----------
    docs/theory.md#exact-risk

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> c = exact_manifold_coefficients(None, Setting(d=5, L=40, sigma2=0.1))
    >>> c.a2 < 0 < c.a4
    True
    """
    d, L, s2 = _arrays(setting)
    eta = _eta_arg(eta, setting)
    k = (1 + s2) * d
    a0 = gd_risk(eta, setting, debiased=True)  # R_dgd(η), the library's one implementation
    a2 = -2 * eta * (L - 1) * (d + 2) * ((L + k + 2) * eta - L) / L**3
    a4 = (
        eta
        * (L - 1)
        * (d + 2)
        * (d + 4)
        * (L**2 * (k * eta - 3 * eta + 6) - 12 * L * (k * eta + 3) + 54 * k * eta + 216 * eta)
        / (6 * L**4)
    )
    return ExactManifoldCoefficients(a0=_out(a0), a2=_out(a2), a4=_out(a4))


@dataclass(frozen=True)
class ManifoldMinimiser(FrozenResult):
    r"""Leading-order minimiser of the exact risk on the manifold (:func:`manifold_minimiser_estimate`).

    Attributes
    ----------
    gamma : float or ndarray
        :math:`\gamma_{\min} = \sqrt{-A_2(\eta^*)/(2A_4(\eta^*))}`.
    eta : float or ndarray
        :math:`\eta_{\min} = \eta^* - A_2'(\eta^*)\gamma_{\min}^2/R_{\rm dgd}''(\eta^*)`.
    depth : float or ndarray
        :math:`\mathcal E_{\min} - R_{\rm dgd}(\eta^*) \approx -A_2^2/(4A_4)` (negative).
    risk : float or ndarray
        :math:`R_{\rm dgd}(\eta^*) + \text{depth}`.
    """

    gamma: float | np.ndarray
    eta: float | np.ndarray
    depth: float | np.ndarray
    risk: float | np.ndarray


def manifold_minimiser_estimate(setting) -> ManifoldMinimiser:
    r"""Where the exact risk is smallest on the manifold, to leading order in γ².

    Minimising :math:`R_{\rm dgd}(\eta) + A_2(\eta)\gamma^2 + A_4(\eta)\gamma^4` over η at fixed
    γ moves η by :math:`-A_2'(\eta^*)\gamma^2/R_{\rm dgd}''` and changes the value only at
    :math:`O(\gamma^4)`; minimising :math:`A_2(\eta^*)\gamma^2 + A_4(\eta^*)\gamma^4` over γ
    then gives :math:`\gamma_{\min}^2 = -A_2/(2A_4) = O(1/L)` and the depth
    :math:`-A_2^2/(4A_4) = O(L^{-3})`. Both are leading-order estimates (the
    :math:`O(\gamma^6)` terms and the η-shift correct them at relative :math:`O(1/L)`); the
    exact minimiser is found with the exact evaluator
    (:func:`reduced_dynamics.exact.drift.exact_manifold_minimum`).

    Parameters
    ----------
    setting : Setting
        Isotropic; may be array-valued.

    Returns
    -------
    ManifoldMinimiser

    References
    ----------
    docs/theory.md#exact-risk
    """
    d, L, s2 = _arrays(setting)
    if np.any(L < 2):
        raise ValueError(f"`L` must be >= 2 for the manifold minimiser (at L = 1 A_2 and A_4 vanish), got {L!r}")
    es = L / (L + (1.0 + s2) * d)
    c = exact_manifold_coefficients(None, setting)
    a2, a4 = np.asarray(c.a2), np.asarray(c.a4)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        g2 = -a2 / (2 * a4)
    if not np.all(np.isfinite(g2) & (g2 > 0)):
        raise ValueError(
            f"`setting` (d = {d!r}, L = {L!r}, sigma2 = {s2!r}) has no interior minimiser on the manifold: "
            "A_2(η*) < 0 < A_4(η*) does not hold in float64 there"
        )
    k = (1 + s2) * d
    # dA2/dη at η*: A2 = -2(L-1)(d+2)/L³ · [ (L+k+2)η² - Lη ]
    da2 = -2 * (L - 1) * (d + 2) / L**3 * (2 * (L + k + 2) * es - L)
    r2 = 2 * (L - 1) * (L + d + s2 * d) / L**2
    eta = es - da2 * g2 / r2
    depth = -(a2**2) / (4 * a4)
    return ManifoldMinimiser(
        gamma=_out(np.sqrt(g2)), eta=_out(eta), depth=_out(depth), risk=_out(np.asarray(c.a0) + depth)
    )


# --------------------------------------------------------- pathwise check


def pathwise_gamma_coefficients(g, r2, eta, setting, *, order=4):
    r"""Per-prompt Taylor coefficients in γ of the conditional risk, from the symbolic series.

    For given scores :math:`g_1..g_L` (the :math:`s_l/r`) and :math:`r^2 = |x_q|^2`,
    evaluates the coefficients of :math:`\gamma^0, \gamma^2, \dots` of
    :math:`(r - w^\top g)^2/d + \sigma^2 + ((d-1)/d + \sigma^2)|w|^2` with
    :math:`w = \tfrac{\eta}{2\gamma}(\mathrm{softmax}(\gamma r g) - \mathrm{softmax}(-\gamma r g))`
    as the polynomials of :func:`softmax_series_coefficients`. Used by the tests to
    check the series step against the softmax itself (finite differences in γ),
    separately from the Gaussian averaging step.

    Parameters
    ----------
    g : array_like, shape (n, L)
        Scores over |x_q|, per prompt.
    r2 : array_like, shape (n,)
        :math:`|x_q|^2` per prompt, > 0.
    eta : float
    setting : Setting
        Scalar and isotropic; ``setting.L`` must equal ``g.shape[1]``.
    order : int, even, in [0, 6]

    Returns
    -------
    ndarray, shape (order // 2 + 1, n)
    """
    import sympy as sp

    _X, _T = _x_tau()
    setting = as_setting(setting, "pathwise_gamma_coefficients")
    setting.require_scalar("pathwise_gamma_coefficients")
    setting.require_isotropic("pathwise_gamma_coefficients").require_softmax("pathwise_gamma_coefficients")
    g = check_finite_array("g", g, ndim=2)
    r2 = check_finite_array("r2", r2, ndim=1)
    if g.shape[1] != setting.L or g.shape[0] != r2.shape[0]:
        raise ValueError(f"`g` must have shape (n, setting.L) and `r2` shape (n,), got {g.shape}, {r2.shape}")
    if np.any(r2 <= 0):
        raise ValueError("`r2` must be > 0")
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 0 or order % 2 or order > 6:
        raise ValueError(f"`order` must be an even integer in [0, 6], got {order!r}")
    nmax = int(order) // 2
    d, L, s2 = setting.d, setting.L, setting.sigma2
    eta = float(_eta_arg(check_finite_float("eta", eta), setting))
    f = softmax_series_coefficients(2 * nmax + 1)
    Lsym = expansion_symbols().L
    bsyms = [_B(k) for k in range(2, 2 * nmax + 2)]
    funcs = [sp.lambdify((_X, Lsym, *bsyms), f[2 * j + 1], "numpy") for j in range(nmax + 1)]
    b = g - g.mean(axis=1, keepdims=True)
    Bv = [np.sum(b**k, axis=1, keepdims=True) for k in range(2, 2 * nmax + 2)]
    c = [np.broadcast_to(fn(b, float(L), *Bv), b.shape) for fn in funcs]  # c_j(b_l): w_l = η/L Σ_j (γ²)^j r^{2j+1} c_j
    Qj = [np.sum(cj * b, axis=1) / L for cj in c]
    r = np.sqrt(r2)
    out = np.zeros((nmax + 1, g.shape[0]))
    for n in range(nmax + 1):
        first = -2 * eta * Qj[n] if n > 0 else 1 - 2 * eta * Qj[0]
        first = first + eta**2 * sum(Qj[j] * Qj[n - j] for j in range(n + 1))
        second = sum(np.sum(c[j] * c[n - j], axis=1) for j in range(n + 1))
        out[n] = r2 ** (n + 1) / d * first + ((d - 1) / d + s2) * eta**2 / L**2 * r2 ** (n + 1) * second
        if n == 0:
            out[n] += s2
    del r
    return out
