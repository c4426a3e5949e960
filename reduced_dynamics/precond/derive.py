r"""Symbolic derivation of the approximate loss of the preconditioned reduced model (x ~ N(0, Σ)).

The reduced model with a shared KQ matrix (docs/theory.md#non-isotropic-covariates) is

.. math:: \hat y = \sum_h \mu_h \sum_l y_l\,\mathrm{softmax}_l(\omega_h\, x_l^\top W x_q),

(``KQ_h = ω_h W``; the option ``per_head=True`` gives every head its own ``W_h`` and
``KQ_h = ω_h W_h``). Its approximate loss is *derived* here from the same three moment
statements as the isotropic :math:`\tilde L` (docs/theory.md#approximate-loss), written in
the whitened coordinates ``x = C z``, ``z ~ N(0, I_d)``, ``C Cᵀ = Σ`` (``C`` a generic
lower-triangular matrix of symbols), where the softmax weight ``e^{ω_h xᵀ W x_q} = e^{b_hᵀ z}``
with ``b_h = ω_h Cᵀ W_h x_q`` factorises over the coordinates of ``z``:

1. **Tilt.** Under the weight ``e^{b_j z_j}`` the mean of ``z_j`` is ``b_j``
   (:func:`reduced_dynamics.derive.symbolic.tilted_mean`, one coordinate at a time), so the
   softmax average of ``x`` tends to ``C b_h = ω_h Σ W_h x_q`` and head ``h`` passes
   ``μ_h ω_h βᵀ Σ W_h x_q``. The error of the mean prediction is ``βᵀ(I − ΣΓ)x_q`` with
   ``Γ = Σ_h μ_h ω_h W_h``; averaging over ``β ~ N(0, I/d)`` and ``x_q = C z_q`` with the
   Gaussian moments ``E z_i z_j = δ_ij`` gives the systematic part
   ``σ² + (1/d) tr[(I − ΣΓ) Σ (I − ΣΓ)ᵀ]``.
2. **Fluctuation.** Heads ``h, k`` fluctuate with covariance
   ``Var(y)/L · Π_j E[f_h f_k]/(E f_h E f_k)`` per whitened coordinate
   (:func:`reduced_dynamics.derive.symbolic.fluctuation_kernel` with unit variance):
   ``exp(b_hᵀ b_k) = exp(ω_h ω_k x_qᵀ W_hᵀ Σ W_k x_q)``. The response variance taken without
   tilt is ``E y² = E(βᵀx)² + σ² = tr Σ / d + σ²`` (same moment rules).
3. **Typical query.** The quadratic form of ``x_q`` in the exponent is replaced by its mean,
   ``x_qᵀ A x_q → tr(A Σ)`` (for ``Σ = I``, ``A = I`` this is ``|x_q|² → d``).

The result, proved equal to :func:`closed_form_precond_loss` by the tests (sympy, generic
``C`` and ``W``, ``d = 2, 3``, ``H = 1, 2``), is

.. math::

    \tilde L_\Sigma(\omega, \mu, W) = \sigma^2
      + \tfrac1d \operatorname{tr}\big[(I - \Sigma\Gamma)\Sigma(I - \Sigma\Gamma)^\top\big]
      + c_\Sigma \sum_{h,k}\mu_h\mu_k\, e^{\omega_h\omega_k \tau_{hk}},

with ``Γ = Σ_h μ_h ω_h W_h`` (``= (μᵀω) W`` for a shared ``W``),
``τ_hk = tr(Σ W_hᵀ Σ W_k)`` and ``c_Σ = (tr Σ / d + σ²)/L``. At ``Σ = I``, ``W = I`` it is
exactly :math:`\tilde L` (:func:`reduction_to_isotropic`).

References
----------
docs/theory.md#non-isotropic-covariates, docs/theory.md#approximate-loss
"""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import sympy as sp

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_positive_int
from reduced_dynamics.derive.symbolic import (
    closed_form_loss,
    fluctuation_kernel,
    problem_symbols,
    state_symbols,
    tilted_mean,
)

__all__ = [
    "H_MAX",
    "D_MAX",
    "PrecondSymbols",
    "precond_symbols",
    "derive_precond_loss",
    "closed_form_precond_loss",
    "precond_loss_gradient",
    "reduction_to_isotropic",
    "difference_to_closed_form",
    "GeneratedPrecond",
    "generated_precond_functions",
]

#: Largest number of heads of the symbolic derivation.
H_MAX = 4
#: Largest dimension of the symbolic derivation (the expressions grow like d⁴ per pair of heads).
D_MAX = 4


@dataclasses.dataclass(frozen=True)
class PrecondSymbols(FrozenResult):
    """Symbols of the preconditioned reduced model (:func:`precond_symbols`).

    Attributes
    ----------
    omega, mu : tuple of sympy.Symbol, length H
        The state symbols of :func:`reduced_dynamics.derive.symbolic.state_symbols`.
    W : tuple of sympy.Matrix
        The KQ matrices, each (d × d) of real symbols: one shared matrix, or H of them
        (``per_head=True``).
    C : sympy.Matrix, (d × d)
        Lower-triangular Cholesky factor of ``Σ = C Cᵀ`` (positive diagonal symbols).
    L, sigma2 : sympy.Symbol
    theta : tuple of sympy.Symbol
        The state in gradient order: ω, μ, then the entries of each ``W`` row-major.
    per_head : bool
    """

    omega: tuple
    mu: tuple
    W: tuple
    C: object
    L: object
    sigma2: object
    theta: tuple
    per_head: bool

    @property
    def Sigma(self) -> sp.Matrix:
        """``C Cᵀ``."""
        return self.C * self.C.T

    @property
    def d(self) -> int:
        """The dimension."""
        return int(self.C.shape[0])


def _check(H, n_features):
    return check_positive_int("H", H, hi=H_MAX), check_positive_int("n_features", n_features, hi=D_MAX)


@cache
def _symbols(H: int, d: int, per_head: bool) -> PrecondSymbols:
    st = state_symbols(H)
    ps = problem_symbols()
    n_w = H if per_head else 1

    def wmat(prefix):
        return sp.Matrix(d, d, lambda i, j: sp.Symbol(f"{prefix}_{i + 1}{j + 1}", real=True))

    W = tuple(wmat(f"w{h + 1}" if per_head else "w") for h in range(n_w))
    C = sp.Matrix(
        d,
        d,
        lambda i, j: (
            sp.Symbol(f"C_{i + 1}{j + 1}", positive=True)
            if i == j
            else (sp.Symbol(f"C_{i + 1}{j + 1}", real=True) if i > j else sp.Integer(0))
        ),
    )
    theta = (*st.omega, *st.mu, *(s for Wm in W for s in Wm))
    return PrecondSymbols(
        omega=st.omega, mu=st.mu, W=W, C=C, L=ps.L, sigma2=ps.sigma2, theta=theta, per_head=bool(per_head)
    )


def precond_symbols(H: int, n_features: int, *, per_head: bool = False) -> PrecondSymbols:
    """Symbols for ``H`` heads in dimension ``n_features`` (shared ``W`` or one per head).

    Parameters
    ----------
    H : int, in [1, 4]
    n_features : int, in [1, 4]
        The dimension ``d`` (numbers, not a symbol: the matrices have explicit entries).
    per_head : bool, default False

    Returns
    -------
    PrecondSymbols
    """
    H, d = _check(H, n_features)
    return _symbols(H, d, bool(per_head))


def _gaussian_mean(expr, zs):
    """E over independent ``z_i ~ N(0, 1)`` of a polynomial of degree <= 2 in ``zs``: ``E z_i z_j = δ_ij``."""
    poly = sp.Poly(sp.expand(expr), *zs)
    out = sp.Integer(0)
    for monom, coeff in poly.terms():
        if sum(monom) == 0:
            out += coeff
        elif sum(monom) == 2 and max(monom) == 2:
            out += coeff  # E z_i² = 1
        elif sum(monom) > 2:
            raise ValueError("only polynomials of degree <= 2 are averaged here")
        # odd monomials and z_i z_j (i != j) have mean 0
    return out


def _beta_mean(expr, betas, d):
    """E over ``β ~ N(0, I/d)`` of a quadratic form in ``betas``: ``E β_i β_j = δ_ij / d``."""
    b = sp.symbols(f"bw_1:{d + 1}", real=True)
    scaled = sp.expand(expr.subs({betas[i]: b[i] / sp.sqrt(d) for i in range(d)}, simultaneous=True))
    return _gaussian_mean(scaled, b)


def _canonical(expr):
    """Expand every exponent (so that equal exponents compare equal) and the whole expression."""
    return sp.expand(expr.replace(sp.exp, lambda a: sp.exp(sp.expand(a))))


@cache
def _derive(H: int, d: int, per_head: bool):
    sy = _symbols(H, d, per_head)
    C = sy.C
    Wh = [sy.W[h if per_head else 0] for h in range(H)]
    z_q = sp.Matrix(sp.symbols(f"zq_1:{d + 1}", real=True))
    beta = sp.Matrix(sp.symbols(f"beta_1:{d + 1}", real=True))
    x_q = C * z_q
    # statement 1: tilt, one whitened coordinate at a time
    k, r = sp.Symbol("k", real=True), sp.Symbol("r", positive=True)
    w = sp.Symbol("omega", real=True)
    tilt = sp.simplify(tilted_mean().subs(w, k / r) * r)  # tilted mean of N(0,1) under e^{k a}
    mean_pred = sp.Integer(0)
    b = []
    for h in range(H):
        b_h = sy.omega[h] * C.T * Wh[h] * x_q  # logit ω_h xᵀ W_h x_q = b_hᵀ z
        b.append(b_h)
        tilted_z = sp.Matrix([tilt.subs(k, b_h[j]) for j in range(d)])
        mean_pred += sy.mu[h] * (beta.T * (C * tilted_z))[0, 0]
    err = (beta.T * x_q)[0, 0] - mean_pred
    bias = sy.sigma2 + _gaussian_mean(_beta_mean(err**2, list(beta), d), list(z_q))
    # statement 2: fluctuation kernel, a product over the whitened coordinates
    wh, wk, v = sp.Symbol("wh", real=True), sp.Symbol("wk", real=True), sp.Symbol("v", positive=True)
    pair = fluctuation_kernel(wh, wk, v)
    z = sp.Matrix(sp.symbols(f"z_1:{d + 1}", real=True))
    var_y = _gaussian_mean(_beta_mean(((beta.T * C * z)[0, 0]) ** 2, list(beta), d), list(z)) + sy.sigma2
    fluct = sp.Integer(0)
    for h in range(H):
        for kk in range(H):
            kern = sp.Integer(1)
            for j in range(d):
                kern *= pair.subs({wh: b[h][j], wk: b[kk][j], v: 1})
            exponent = sp.expand(sp.expand_log(sp.log(sp.powsimp(kern, force=True)), force=True))
            # statement 3: typical query, the quadratic form in x_q replaced by its mean
            fluct += sy.mu[h] * sy.mu[kk] * sp.exp(_gaussian_mean(exponent, list(z_q)))
    return bias + var_y / sy.L * fluct


def derive_precond_loss(H: int, n_features: int, *, per_head: bool = False) -> sp.Expr:
    r"""Derive :math:`\tilde L_\Sigma(\omega, \mu, W)` from the moment statements (module docstring).

    Parameters
    ----------
    H : int, in [1, 4]
    n_features : int, in [1, 4]
    per_head : bool, default False
        One ``W_h`` per head instead of the shared ``W``.

    Returns
    -------
    sympy.Expr
        In the symbols of :func:`precond_symbols` (``Σ`` through its Cholesky factor ``C``).
    """
    H, d = _check(H, n_features)
    return _derive(H, d, bool(per_head))


def closed_form_precond_loss(H: int, n_features: int, *, per_head: bool = False) -> sp.Expr:
    r"""The closed form ``σ² + tr[(I−ΣΓ)Σ(I−ΣΓ)ᵀ]/d + c_Σ Σ_hk μ_hμ_k exp(ω_hω_k tr(ΣW_hᵀΣW_k))``.

    ``Σ = C Cᵀ`` in the symbols of :func:`precond_symbols`, ``Γ = Σ_h μ_h ω_h W_h``,
    ``c_Σ = (tr Σ/d + σ²)/L``.
    """
    H, d = _check(H, n_features)
    sy = _symbols(H, d, bool(per_head))
    S = sy.Sigma
    Wh = [sy.W[h if per_head else 0] for h in range(H)]
    G = sp.zeros(d, d)
    for h in range(H):
        G += sy.mu[h] * sy.omega[h] * Wh[h]
    P = sp.eye(d) - S * G
    bias = sy.sigma2 + (P * S * P.T).trace() / d
    c = (S.trace() / d + sy.sigma2) / sy.L
    fluct = sum(
        sy.mu[h] * sy.mu[k] * sp.exp(sy.omega[h] * sy.omega[k] * (S * Wh[h].T * S * Wh[k]).trace())
        for h in range(H)
        for k in range(H)
    )
    return bias + c * fluct


def precond_loss_gradient(H: int, n_features: int, *, per_head: bool = False) -> sp.Matrix:
    """Symbolic gradient of :func:`derive_precond_loss` in the order of ``precond_symbols(...).theta``."""
    H, d = _check(H, n_features)
    sy = _symbols(H, d, bool(per_head))
    expr = _derive(H, d, bool(per_head))
    return sp.Matrix([sp.diff(expr, s) for s in sy.theta])


def difference_to_closed_form(H: int, n_features: int, *, per_head: bool = False) -> sp.Expr:
    """``derive_precond_loss − closed_form_precond_loss`` after expanding (0 when the derivation holds)."""
    H, d = _check(H, n_features)
    return _canonical(derive_precond_loss(H, d, per_head=per_head) - closed_form_precond_loss(H, d, per_head=per_head))


def reduction_to_isotropic(H: int, n_features: int, *, per_head: bool = False) -> sp.Expr:
    r"""The derived loss at ``Σ = I`` and ``W = I`` (every ``W_h = I``) minus the isotropic :math:`\tilde L`.

    :math:`\tilde L` is :func:`reduced_dynamics.derive.symbolic.closed_form_loss` with its symbol
    ``d`` set to ``n_features``. Returns the expanded difference: 0 when the reduction is exact.

    Parameters
    ----------
    H : int, in [1, 4]
    n_features : int, in [1, 4]
    per_head : bool, default False

    Returns
    -------
    sympy.Expr
    """
    H, d = _check(H, n_features)
    sy = _symbols(H, d, bool(per_head))
    subs = {s: (1 if i == j else 0) for Wm in sy.W for (i, j), s in np.ndenumerate(np.array(Wm))}
    subs.update({sy.C[i, j]: (1 if i == j else 0) for i in range(d) for j in range(i + 1)})
    derived = derive_precond_loss(H, d, per_head=per_head).subs(subs)
    iso = closed_form_loss(H).subs(problem_symbols().d, d)
    return _canonical(derived - iso)


@dataclasses.dataclass(frozen=True)
class GeneratedPrecond(FrozenResult):
    """Numpy code generated from the derived loss (:func:`generated_precond_functions`).

    Attributes
    ----------
    H, d : int
    per_head : bool
    loss : callable
        ``loss(omega, mu, W, Sigma, L, sigma2) -> float`` with ``omega, mu`` (H,), ``W`` (d, d)
        or (H, d, d) when ``per_head``, ``Sigma`` (d, d) symmetric positive definite.
    gradient : callable
        Same arguments -> ndarray of shape ``(2H + n_W d²,)`` in the order of ``theta``.
    """

    H: int
    d: int
    per_head: bool
    loss: object
    gradient: object


@cache
def _generated(H: int, d: int, per_head: bool) -> GeneratedPrecond:
    sy = _symbols(H, d, per_head)
    c_syms = [sy.C[i, j] for i in range(d) for j in range(i + 1)]
    args = (*sy.theta, *c_syms, sy.L, sy.sigma2)
    expr = _derive(H, d, per_head)
    f = sp.lambdify(args, expr, modules="numpy", cse=True)
    g = sp.lambdify(args, precond_loss_gradient(H, d, per_head=per_head), modules="numpy", cse=True)
    n_w = H if per_head else 1

    def _vals(omega, mu, W, Sigma, L, sigma2):
        omega = np.asarray(omega, dtype=float)
        mu = np.asarray(mu, dtype=float)
        W = np.asarray(W, dtype=float).reshape(n_w, d, d)
        Cn = np.linalg.cholesky(np.asarray(Sigma, dtype=float))
        cs = [Cn[i, j] for i in range(d) for j in range(i + 1)]
        return (*omega, *mu, *W.ravel(), *cs, L, sigma2)

    def loss(omega, mu, W, Sigma, L, sigma2):
        return float(f(*_vals(omega, mu, W, Sigma, L, sigma2)))

    def gradient(omega, mu, W, Sigma, L, sigma2):
        return np.asarray(g(*_vals(omega, mu, W, Sigma, L, sigma2)), dtype=float).ravel()

    return GeneratedPrecond(H=H, d=d, per_head=per_head, loss=loss, gradient=gradient)


def generated_precond_functions(H: int, n_features: int, *, per_head: bool = False) -> GeneratedPrecond:
    """Lambdify :func:`derive_precond_loss` and its gradient (the independent route for the tests)."""
    H, d = _check(H, n_features)
    return _generated(H, d, bool(per_head))
