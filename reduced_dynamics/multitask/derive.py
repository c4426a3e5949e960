r"""Symbolic derivation of the multi-task approximate loss from the moment statements.

The same three statements as for :math:`\tilde L` (docs/theory.md#approximate-loss),
applied per feature, since the logit :math:`x_l^\top\operatorname{diag}(\omega^{(h)})x_q
= \sum_j \omega^{(h)}_j x_{l,j}x_{q,j}` tilts the coordinates of :math:`x_l` independently:

1. **Tilt.** Under the weight :math:`e^{\omega_j x_{q,j} x_j}` the mean of :math:`x_j` is
   :math:`\omega_j x_{q,j}` (:func:`reduced_dynamics.derive.symbolic.tilted_mean`), so head
   :math:`h` passes :math:`\sum_{j} \beta_{n,j}\,\omega^{(h)}_j x_{q,j}` for task
   :math:`n`. With :math:`E\beta_{n,j}^2 = 1/|S_n|` on :math:`S_n` and
   :math:`E x_{q,j}^2 = 1` the systematic part is
   :math:`\sigma^2 + \frac1{|S_n|}\sum_{j\in S_n}(1-a_{nj})^2`.
2. **Fluctuation.** Heads :math:`h, k` fluctuate with covariance
   :math:`\frac{1+\sigma^2}{L}\prod_j E[f_hf_k]/(Ef_hEf_k)` per feature
   (:func:`reduced_dynamics.derive.symbolic.fluctuation_kernel` with variance
   :math:`v_j = x_{q,j}^2`): :math:`e^{\sum_j\omega^{(h)}_j\omega^{(k)}_j v_j}`; the response
   variance of every task is :math:`1 + \sigma^2` (the normalisation
   :math:`\beta_{S_n}\sim N(0, I/|S_n|)` gives :math:`E(\beta_n^\top x)^2 = 1`).
3. **Typical query.** :math:`x_{q,j}^2 \to 1` for each feature (for equal
   :math:`\omega_j` this is :math:`|x_q|^2 \to d` of the single-task derivation).

:func:`derive_mt_loss` builds the sum over tasks from these statements;
:func:`closed_form_mt_loss` types the closed form of :mod:`reduced_dynamics.multitask.loss`;
the tests prove their difference simplifies to 0 and that the reduction to one task with
equal per-feature weights is :func:`reduced_dynamics.derive.symbolic.closed_form_loss`.

References
----------
docs/theory.md#extensions
"""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import sympy as sp

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_positive_int
from reduced_dynamics.derive.symbolic import closed_form_loss, fluctuation_kernel, problem_symbols, state_symbols
from reduced_dynamics.derive.symbolic import tilted_mean as _tilted_mean
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "MultitaskSymbols",
    "mt_symbols",
    "derive_mt_loss",
    "closed_form_mt_loss",
    "mt_loss_gradient",
    "reduction_to_single_task",
    "generated_mt_functions",
    "GeneratedMultitask",
]

#: Largest H for the symbolic derivation (the expression grows like H² d).
H_MAX = 8
#: Largest d for the symbolic derivation (symbols per feature; the setting allows 1e5, which sympy never finishes).
D_MAX = 12


@dataclasses.dataclass(frozen=True)
class MultitaskSymbols(FrozenResult):
    """Symbols of the multi-task state.

    Attributes
    ----------
    omega : tuple of tuple of sympy.Symbol
        ``omega[h][j]`` = :math:`\\omega^{(h)}_j`, shape (H, d).
    mu : tuple of tuple of sympy.Symbol
        ``mu[h][n]`` = :math:`\\mu^{(h)}_n`, shape (H, N).
    L, sigma2 : sympy.Symbol
    theta : tuple of sympy.Symbol
        All state symbols, ω (row-major) then μ (row-major): the gradient's order.
    """

    omega: tuple
    mu: tuple
    L: object
    sigma2: object
    theta: tuple


def _check(H, setting):
    H = check_positive_int("H", H, hi=H_MAX)
    setting = as_setting(setting, "the multi-task derivation").require_softmax("the multi-task derivation")
    setting.require_scalar("the multi-task derivation")
    check_positive_int("setting.d", setting.d, hi=D_MAX)
    return H, setting


def mt_symbols(H: int, setting: Setting) -> MultitaskSymbols:
    """State symbols for ``H`` heads in ``setting`` (``d`` features, ``N`` tasks)."""
    H, setting = _check(H, setting)
    d, N = setting.d, setting.n_tasks
    omega = tuple(tuple(sp.Symbol(f"omega_{h + 1}_{j + 1}", real=True) for j in range(d)) for h in range(H))
    mu = tuple(tuple(sp.Symbol(f"mu_{h + 1}_{n + 1}", real=True) for n in range(N)) for h in range(H))
    ps = problem_symbols()
    theta = tuple(s for row in omega for s in row) + tuple(s for row in mu for s in row)
    return MultitaskSymbols(omega=omega, mu=mu, L=ps.L, sigma2=ps.sigma2, theta=theta)


@cache
def _derive(H, setting):
    sy = mt_symbols(H, setting)
    d = setting.d
    w = sp.Symbol("omega", real=True)
    tilt = _tilted_mean()  # tilted mean of a coordinate / x_q coordinate, as a function of omega
    v = sp.Symbol("v", positive=True)
    pair = fluctuation_kernel(sp.Symbol("wh", real=True), sp.Symbol("wk", real=True), v)
    wh, wk = sp.Symbol("wh", real=True), sp.Symbol("wk", real=True)
    xq2 = [sp.Integer(1)] * d  # statement 3: typical query, x_{q,j}^2 -> 1
    total = sp.Integer(0)
    for n, support in enumerate(setting.supports):
        size = len(support)
        beta_var = sp.Rational(1, size)  # E beta_{n,j}^2 on S_n
        # statement 1: mean prediction sum_j beta_j x_qj g_nj; E over beta and x_q of the squared error
        bias = sy.sigma2
        for j in support:
            gain = sum(sy.mu[h][n] * tilt.subs(w, sy.omega[h][j]) for h in range(H))
            bias += beta_var * xq2[j] * (1 - gain) ** 2
        # statement 2: fluctuation kernel, a product over the (independent) features
        fluct = 0
        for h in range(H):
            for k in range(H):
                kern = sp.Integer(1)
                for j in range(d):
                    kern *= pair.subs({wh: sy.omega[h][j], wk: sy.omega[k][j], v: xq2[j]})
                fluct += sy.mu[h][n] * sy.mu[k][n] * kern
        total += bias + (1 + sy.sigma2) / sy.L * fluct  # Var y_n = 1 + sigma^2
    return total


def derive_mt_loss(H: int, setting: Setting) -> sp.Expr:
    r"""Derive the multi-task approximate loss :math:`\sum_n\tilde L_n` for ``H`` heads from the moment statements.

    Parameters
    ----------
    H : int, in [1, 8]
    setting : Setting
        Scalar; its supports and ``d`` enter as numbers, ``L`` and ``sigma2`` stay symbols.

    Returns
    -------
    sympy.Expr
        In the symbols of :func:`mt_symbols` (and ``L``, ``sigma2``).
    """
    H, setting = _check(H, setting)
    return _derive(H, setting)


def closed_form_mt_loss(H: int, setting: Setting) -> sp.Expr:
    r"""The closed form :math:`\sum_n[\sigma^2 + \frac1{|S_n|}\sum_{j\in S_n}(1-a_{nj})^2 + c\,\mu_n^\top e^{\circ\Omega\Omega^\top}\mu_n]`."""
    H, setting = _check(H, setting)
    sy = mt_symbols(H, setting)
    Om = sp.Matrix(sy.omega)
    M = sp.Matrix(sy.mu)
    A = M.T * Om
    K = (Om * Om.T).applyfunc(sp.exp)
    c = (1 + sy.sigma2) / sy.L
    out = sp.Integer(0)
    for n, support in enumerate(setting.supports):
        out += sy.sigma2 + sum((1 - A[n, j]) ** 2 for j in support) / len(support)
        out += c * (M[:, n].T * K * M[:, n])[0, 0]
    return out


def mt_loss_gradient(H: int, setting: Setting) -> sp.Matrix:
    """Symbolic gradient of :func:`derive_mt_loss` in the order of ``mt_symbols(H, setting).theta``."""
    H, setting = _check(H, setting)
    expr = derive_mt_loss(H, setting)
    return sp.Matrix([sp.diff(expr, s) for s in mt_symbols(H, setting).theta])


def reduction_to_single_task(H: int, n_features: int) -> sp.Expr:
    r"""Derived loss for one task on all ``n_features`` features with :math:`\omega^{(h)}_j = \omega_h`, minus :math:`\tilde L`.

    Substitutes the single-task state symbols into :func:`derive_mt_loss` and subtracts
    :func:`reduced_dynamics.derive.symbolic.closed_form_loss` at ``d = n_features``; returns the
    simplified difference (0 when the reduction holds).

    Parameters
    ----------
    H : int, in [1, 8]
    n_features : int, in [1, 12]
        Number of features ``d`` (the symbolic expression grows with it).

    Returns
    -------
    sympy.Expr
    """
    H = check_positive_int("H", H, hi=H_MAX)
    d = check_positive_int("n_features", n_features, hi=12)
    setting = Setting(d=d, L=40, sigma2=0.1)  # L, sigma2 stay symbols in the derivation
    sy = mt_symbols(H, setting)
    st = state_symbols(H)
    subs = {sy.omega[h][j]: st.omega[h] for h in range(H) for j in range(d)}
    subs.update({sy.mu[h][0]: st.mu[h] for h in range(H)})
    derived = derive_mt_loss(H, setting).subs(subs)
    single = closed_form_loss(H).subs(problem_symbols().d, d)
    return sp.simplify(sp.expand(sp.powsimp(derived - single, force=True)))


@dataclasses.dataclass(frozen=True)
class GeneratedMultitask(FrozenResult):
    """Numpy code generated from the derived multi-task loss (:func:`generated_mt_functions`).

    Attributes
    ----------
    H : int
    setting : Setting
    loss : callable
        ``loss(omega, mu)`` with ``omega`` (H, d), ``mu`` (H, N) -> float.
    gradient : callable
        ``gradient(omega, mu)`` -> ndarray of shape ``(H*d + H*N,)`` in the order of ``theta``.
    """

    H: int
    setting: Setting
    loss: object
    gradient: object


def _finite_value(value):
    """The value of a generated function, or ``OverflowError`` (``LossOverflowError``) if float64 overflowed."""
    with np.errstate(all="ignore"):
        out = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(out)):
        from reduced_dynamics.dynamics.loss import LossOverflowError

        raise LossOverflowError(
            "the generated function is not finite in float64: exp(ω ωᵀ) or |mu| too large; reduce `omega` or `mu`"
        )
    return out


def generated_mt_functions(H: int, setting: Setting) -> GeneratedMultitask:
    """Lambdify :func:`derive_mt_loss` and :func:`mt_loss_gradient` (the independent route for the tests)."""
    H, setting = _check(H, setting)
    sy = mt_symbols(H, setting)
    args = (*sy.theta, sy.L, sy.sigma2)
    f = sp.lambdify(args, derive_mt_loss(H, setting), modules="numpy", cse=True)
    g = sp.lambdify(args, mt_loss_gradient(H, setting), modules="numpy", cse=True)

    def _vals(omega, mu):
        omega = check_finite_array("omega", omega)
        mu = check_finite_array("mu", mu)
        if omega.shape != (H, setting.d) or mu.shape != (H, setting.n_tasks):
            raise ValueError(
                f"`omega` and `mu` must have shapes ({H}, {setting.d}) and ({H}, {setting.n_tasks}), "
                f"got {omega.shape} and {mu.shape}"
            )
        return (*omega.ravel(), *mu.ravel(), setting.L, setting.sigma2)

    def loss(omega, mu):
        return float(_finite_value(f(*_vals(omega, mu))))

    def gradient(omega, mu):
        return _finite_value(np.asarray(g(*_vals(omega, mu)), dtype=float).ravel())

    return GeneratedMultitask(H=H, setting=setting, loss=loss, gradient=gradient)
