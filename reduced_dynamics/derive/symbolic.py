r"""Symbolic derivation of the approximate loss and its derivatives (sympy).

The approximate loss is *derived* here from the moment statements of
docs/theory.md#reduced-model, not typed in:

1. **Gaussian tilt.** For ``x ~ N(0, I_d)``, the softmax-weighted average of
   ``x`` tilts it toward the query: ``E[x e^{ω xᵀx_q}] / E[e^{ω xᵀx_q}] = ω x_q``.
   Components orthogonal to ``x_q`` are unaffected (mean 0); along
   ``x_q/|x_q|`` the component ``a ~ N(0, 1)`` has tilted mean
   ``∫ a e^{ω r a} φ(a) da / ∫ e^{ω r a} φ(a) da`` with ``r = |x_q|``; sympy
   evaluates both integrals. (:func:`tilted_mean`.)
2. **Signal.** Hence the mean prediction is ``Σ_h μ_h ω_h βᵀx_q`` and the bias
   part of the risk is ``E[(βᵀx_q)²](1 − μᵀω)² + σ²`` with
   ``E[(βᵀx_q)²] = tr(Cov β) = 1``.
3. **Fluctuation.** A softmax average over L samples fluctuates; by the delta
   method the covariance of heads h, k is ``(1+σ²)/L · E[e^{(ω_h+ω_k)s}] /
   (E[e^{ω_h s}] E[e^{ω_k s}])`` with ``s | x_q ~ N(0, v)``, ``v = |x_q|² → d``.
   The moment generating function is computed by sympy integration
   (:func:`gaussian_mgf`).

:func:`derive_approx_loss` assembles these; the tests prove that the result
minus :func:`closed_form_loss` simplifies to 0 for H = 1..4 and that
:func:`taylor_form_loss` agrees to the order checked.

Numpy code is generated once per H and cached (:func:`sympy2numpy`,
:func:`generated_loss_functions`).

Call convention of the generated code: a :class:`GeneratedFunction` is called
like the rest of the package, ``f(omega, mu, setting)`` with a single state
``omega, mu`` of shape ``(H,)`` and a scalar :class:`~reduced_dynamics.setting.Setting`.
The raw lambdified function, with the numeric signature
``f.func(omega_1, ..., omega_H, mu_1, ..., mu_H, d, L, sigma2)`` (the order of
:func:`state_symbols` then :func:`problem_symbols`), stays available as
``f.func`` for code that works with bare numbers.

References
----------
docs/theory.md#approximate-loss
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import sympy as sp

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_nonnegative_int, check_positive_int
from reduced_dynamics.setting import as_setting

__all__ = [
    "H_MAX",
    "ProblemSymbols",
    "StateSymbols",
    "GeneratedLossFunctions",
    "problem_symbols",
    "state_symbols",
    "tilted_mean",
    "gaussian_mgf",
    "fluctuation_kernel",
    "derive_approx_loss",
    "closed_form_loss",
    "taylor_form_loss",
    "loss_gradient",
    "loss_hessian",
    "GeneratedFunction",
    "sympy2numpy",
    "generated_loss_functions",
]


#: Largest number of heads of the symbolic derivation (sympy's cost grows fast with H).
H_MAX = 8


def _check_H(H) -> int:
    return check_positive_int("H", H, hi=H_MAX)


def _cached_by_H(fn):
    """``functools.cache`` keyed by a validated ``H`` (a ValueError naming `H` before any hashing)."""
    cached = cache(fn)

    @functools.wraps(fn)
    def wrapper(H):
        return cached(_check_H(H))

    wrapper.cache_clear = cached.cache_clear
    return wrapper


@dataclass(frozen=True)
class ProblemSymbols(FrozenResult):
    """The sympy symbols of the data model (:func:`problem_symbols`).

    Attributes
    ----------
    d : sympy.Symbol
        Covariate dimension (positive).
    L : sympy.Symbol
        Prompt length (positive).
    sigma2 : sympy.Symbol
        Noise variance (non-negative).
    """

    d: sp.Symbol
    L: sp.Symbol
    sigma2: sp.Symbol


@dataclass(frozen=True)
class StateSymbols(FrozenResult):
    """The sympy symbols of the reduced state of H heads (:func:`state_symbols`).

    Attributes
    ----------
    omega : tuple of sympy.Symbol, length H
        ``omega_1 .. omega_H`` (real).
    mu : tuple of sympy.Symbol, length H
        ``mu_1 .. mu_H`` (real).

    Notes
    -----
    :attr:`theta` is ``omega + mu``, the coordinate order of the gradient and Hessian.
    """

    omega: tuple
    mu: tuple

    @property
    def theta(self) -> tuple:
        """``(omega_1..omega_H, mu_1..mu_H)``."""
        return (*self.omega, *self.mu)


def problem_symbols() -> ProblemSymbols:
    """The problem symbols ``d`` (positive), ``L`` (positive), ``sigma2`` (non-negative)."""
    return ProblemSymbols(
        d=sp.Symbol("d", positive=True),
        L=sp.Symbol("L", positive=True),
        sigma2=sp.Symbol("sigma2", nonnegative=True),
    )


def state_symbols(H: int) -> StateSymbols:
    """The real state symbols ``omega_1..omega_H`` and ``mu_1..mu_H`` (``1 <= H <= H_MAX``)."""
    H = _check_H(H)
    omega = sp.symbols(f"omega_1:{H + 1}", real=True)
    mu = sp.symbols(f"mu_1:{H + 1}", real=True)
    return StateSymbols(omega=tuple(omega), mu=tuple(mu))


def _symbols(H: int):
    ps, ss = problem_symbols(), state_symbols(H)
    return ps.d, ps.L, ps.sigma2, ss.omega, ss.mu


@cache
def tilted_mean() -> sp.Expr:
    r"""Tilted mean of the component of x along x_q, divided by ``|x_q|``.

    Computes ``E[a e^{ω r a}] / (r E[e^{ω r a}])`` for ``a ~ N(0, 1)`` by
    integration; the result is ``ω`` (so the tilted mean vector is ``ω x_q``).
    """
    a = sp.Symbol("a", real=True)
    w = sp.Symbol("w", real=True)
    r = sp.Symbol("r", positive=True)
    phi = sp.exp(-(a**2) / 2) / sp.sqrt(2 * sp.pi)
    num = sp.integrate(a * sp.exp(w * r * a) * phi, (a, -sp.oo, sp.oo), conds="none")
    den = sp.integrate(sp.exp(w * r * a) * phi, (a, -sp.oo, sp.oo), conds="none")
    return sp.simplify(num / (r * den)).subs(w, sp.Symbol("omega", real=True))


@cache
def gaussian_mgf() -> sp.Expr:
    r"""``E[e^{t s}]`` for ``s ~ N(0, v)``, by integration: ``exp(t² v / 2)``."""
    s = sp.Symbol("s", real=True)
    t = sp.Symbol("t", real=True)
    v = sp.Symbol("v", positive=True)
    dens = sp.exp(-(s**2) / (2 * v)) / sp.sqrt(2 * sp.pi * v)
    return sp.simplify(sp.integrate(sp.exp(t * s) * dens, (s, -sp.oo, sp.oo), conds="none"))


def fluctuation_kernel(omega_h, omega_k, v) -> sp.Expr:
    r"""``E[e^{(ω_h+ω_k)s}] / (E[e^{ω_h s}] E[e^{ω_k s}])`` for ``s ~ N(0, v)``."""
    mgf = gaussian_mgf()
    t, vv = sp.Symbol("t", real=True), sp.Symbol("v", positive=True)
    m = lambda x: mgf.subs({t: x, vv: v})  # noqa: E731
    return sp.simplify(sp.powsimp(m(omega_h + omega_k) / (m(omega_h) * m(omega_k)), force=True))


@_cached_by_H
def derive_approx_loss(H: int) -> sp.Expr:
    r"""Derive :math:`\tilde L(\omega, \mu)` for ``H`` heads from the moment statements.

    Parameters
    ----------
    H : int
        Number of heads, in ``[1, H_MAX]`` (``H_MAX = 8``).

    Returns
    -------
    sympy.Expr
        In the symbols of :func:`problem_symbols` and :func:`state_symbols`.
    """
    d, L, sigma2, omega, mu = _symbols(H)
    tilt = tilted_mean()  # coefficient of x_q in the tilted mean of x, as function of omega
    w = sp.Symbol("omega", real=True)
    signal_gain = sum(mu[h] * tilt.subs(w, omega[h]) for h in range(H))  # E[ŷ | β, x_q] / βᵀx_q
    beta_var = sp.Integer(1)  # E[(βᵀx_q)²] = tr(I_d/d · I_d) = 1
    bias = beta_var * (1 - signal_gain) ** 2 + sigma2
    v = sp.Symbol("v", positive=True)
    fluct = sum(mu[h] * mu[k] * fluctuation_kernel(omega[h], omega[k], v) for h in range(H) for k in range(H))
    return bias + (1 + sigma2) / L * fluct.subs(v, d)  # |x_q|² → d


@_cached_by_H
def closed_form_loss(H: int) -> sp.Expr:
    r"""docs/theory.md#reduced-model closed form ``1 + σ² − 2μᵀω + μᵀ(ωωᵀ + (1+σ²)/L exp∘(d ωωᵀ))μ``."""
    d, L, sigma2, omega, mu = _symbols(H)
    w, m = sp.Matrix(omega), sp.Matrix(mu)
    E = sp.Matrix(H, H, lambda i, j: sp.exp(d * omega[i] * omega[j]))
    quad = (m.T * (w * w.T + (1 + sigma2) / L * E) * m)[0, 0]
    return 1 + sigma2 - 2 * (m.T * w)[0, 0] + quad


def taylor_form_loss(H: int, order: int) -> sp.Expr:
    r"""docs/theory.md#reduced-model Taylor form truncated after ``k = order``.

    ``σ² + (1 − ⟨μ,ω⟩)² + c⟨μ,1⟩² + c Σ_{k=1}^{order} d^k/k! ⟨μ, ω^k⟩²``.
    """
    H = _check_H(H)
    order = check_nonnegative_int("order", order, hi=50)
    d, L, sigma2, omega, mu = _symbols(H)
    c = (1 + sigma2) / L
    inner = lambda k: sum(mu[h] * omega[h] ** k for h in range(H))  # noqa: E731
    out = sigma2 + (1 - inner(1)) ** 2 + c * inner(0) ** 2
    for k in range(1, order + 1):
        out += c * d**k / sp.factorial(k) * inner(k) ** 2
    return out


@_cached_by_H
def loss_gradient(H: int) -> sp.Matrix:
    """Symbolic gradient of :func:`derive_approx_loss`: a (2H × 1) column in ``(ω_1..ω_H, μ_1..μ_H)`` order."""
    expr = derive_approx_loss(H)
    return sp.Matrix([sp.diff(expr, s) for s in state_symbols(H).theta])


@_cached_by_H
def loss_hessian(H: int) -> sp.Matrix:
    """Symbolic Hessian (2H × 2H) of :func:`derive_approx_loss`."""
    return sp.hessian(derive_approx_loss(H), state_symbols(H).theta)


@dataclass(frozen=True)
class GeneratedFunction:
    """A numpy callable generated from a sympy expression.

    Call it as ``f(omega, mu, setting)`` with ``omega, mu`` of shape ``(H,)``
    and a scalar :class:`~reduced_dynamics.setting.Setting` (the package's
    argument order). The raw lambdified function keeps its numeric signature
    ``f.func(omega_1..omega_H, mu_1..mu_H, d, L, sigma2)``. ``repr`` shows the
    expression it was generated from.

    Attributes
    ----------
    expr : sympy.Expr or sympy.Matrix
        The expression.
    func : callable
        The raw lambdified function (numeric signature above).
    H : int
        Number of heads.
    """

    expr: object
    func: Callable
    H: int

    def __call__(self, omega, mu, setting):
        """Evaluate at one state ``omega, mu`` (shape (H,)) in ``setting`` (scalar).

        Returns
        -------
        ndarray
            Shape ``()`` for a scalar expression, the matrix shape otherwise
            (``(2H, 1)`` for the gradient, ``(2H, 2H)`` for the Hessian).
        """
        setting = as_setting(setting, "GeneratedFunction")
        omega = check_finite_array("omega", omega)
        mu = check_finite_array("mu", mu)
        if omega.shape != (self.H,) or mu.shape != (self.H,):
            raise ValueError(f"`omega` and `mu` must have shape ({self.H},), got {omega.shape} and {mu.shape}")
        with np.errstate(all="ignore"):
            out = np.asarray(self.func(*omega, *mu, setting.d, setting.L, setting.sigma2), dtype=np.float64)
        if not np.all(np.isfinite(out)):
            from reduced_dynamics.dynamics.loss import LossOverflowError

            raise LossOverflowError(
                "the generated function is not finite in float64: exp(d ω ωᵀ) or |mu| too large; reduce `omega` or `mu`"
            )
        return out

    def __repr__(self) -> str:
        text = str(self.expr)
        if len(text) > 200:
            text = text[:197] + "..."
        return f"GeneratedFunction(H={self.H}, expr={text})"


def sympy2numpy(expr, H: int) -> GeneratedFunction:
    """Generate a numpy callable from ``expr`` in the symbols of :func:`state_symbols` and :func:`problem_symbols`.

    Common subexpressions are shared (``cse=True``). The result is called as
    ``f(omega, mu, setting)``; its raw form ``f.func(ω_1..ω_H, μ_1..μ_H, d, L, σ²)``.

    Parameters
    ----------
    expr : sympy.Expr or sympy.Matrix
        Expression in ``omega_1..omega_H, mu_1..mu_H, d, L, sigma2``.
    H : int, >= 1
        Number of heads.

    Returns
    -------
    GeneratedFunction
    """
    d, L, sigma2, omega, mu = _symbols(H)  # validates H
    if not isinstance(expr, (sp.Expr, sp.MatrixBase)):
        raise ValueError(f"`expr` must be a sympy expression or matrix, got {type(expr).__name__}")
    extra = set(expr.free_symbols) - {d, L, sigma2, *omega, *mu}
    if extra:
        raise ValueError(
            f"`expr` may use only omega_1..omega_{H}, mu_1..mu_{H}, d, L, sigma2 (`H` = {H}), got {sorted(map(str, extra))}"
        )
    if isinstance(expr, sp.Expr) and expr.is_number and not expr.is_finite:
        raise ValueError(f"`expr` must be finite, got {expr}")
    func = sp.lambdify((*omega, *mu, d, L, sigma2), expr, modules="numpy", cse=True)
    return GeneratedFunction(expr=expr, func=func, H=H)


@dataclass(frozen=True)
class GeneratedLossFunctions(FrozenResult):
    """Numpy code generated from the derived loss for H heads (:func:`generated_loss_functions`).

    Attributes
    ----------
    loss : GeneratedFunction
        ``loss(omega, mu, setting)`` -> ndarray of shape ``()``.
    gradient : GeneratedFunction
        ``gradient(omega, mu, setting)`` -> ndarray of shape ``(2H, 1)`` in ``(ω, μ)`` order.
    hessian : GeneratedFunction
        ``hessian(omega, mu, setting)`` -> ndarray of shape ``(2H, 2H)``.
    """

    loss: GeneratedFunction
    gradient: GeneratedFunction
    hessian: GeneratedFunction


@_cached_by_H
def generated_loss_functions(H: int) -> GeneratedLossFunctions:
    """Numpy callables (loss, gradient, Hessian) generated from the derived loss; cached per H.

    Parameters
    ----------
    H : int, in [1, H_MAX]

    Returns
    -------
    GeneratedLossFunctions
        Each function is called as ``f(omega, mu, setting)``.

    Examples
    --------
    >>> from reduced_dynamics.setting import Setting
    >>> fns = generated_loss_functions(1)
    >>> round(float(fns.loss([0.0], [0.0], Setting(d=5, L=40, sigma2=0.1))), 12)
    1.1
    """
    expr = derive_approx_loss(H)
    return GeneratedLossFunctions(
        loss=sympy2numpy(expr, H),
        gradient=sympy2numpy(loss_gradient(H), H),
        hessian=sympy2numpy(loss_hessian(H), H),
    )
