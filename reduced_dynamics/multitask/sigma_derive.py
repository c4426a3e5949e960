r"""Symbolic derivation of the composed reduced model: several tasks *and* covariates x ~ N(0, Σ).

The model (docs/_sigma_tasks_section.md; the composition of docs/theory.md#non-isotropic-covariates and
docs/theory.md#multi-task-regression) has per head ``h`` a full KQ covariate block ``B_h`` (``d × d``)
and an OV vector ``μ^(h) ∈ R^N`` (one weight per task):

.. math:: \hat y_n = \sum_h \mu^{(h)}_n \sum_l y_{l,n}\,\mathrm{softmax}_l(x_l^\top B_h x_q).

Data: ``x ~ N(0, Σ)``, ``y_n = β_nᵀx + ε_n``, ``β_n`` zero off ``S_n``, ``β_{S_n} ~ N(0, I/|S_n|)``,
independent ``N(0, σ²)`` noise. The approximate loss is *derived* here from the same three moment
statements as its two parents (:mod:`reduced_dynamics.precond.derive`,
:mod:`reduced_dynamics.multitask.derive`), in the whitened coordinates ``x = C z``, ``z ~ N(0, I_d)``,
``C Cᵀ = Σ`` (``C`` lower triangular: a generic matrix of symbols, or a given rational matrix), where
the softmax weight ``e^{x_lᵀ B_h x_q} = e^{b_hᵀ z_l}``, ``b_h = Cᵀ B_h x_q``, factorises over the
coordinates of ``z``:

1. **Tilt.** Coordinate by coordinate the tilted mean of ``z_j`` is ``b_{h,j}``
   (:func:`reduced_dynamics.derive.symbolic.tilted_mean`), so the softmax average of ``x`` tends to
   ``C b_h = Σ B_h x_q`` and head ``h`` passes ``μ^(h)_n β_nᵀ Σ B_h x_q`` for task ``n``. The error of
   the mean prediction is ``β_nᵀ(I − ΣA_n)x_q`` with ``A_n = Σ_h μ^(h)_n B_h``; averaging over
   ``β_n`` (``E β_{n,i}β_{n,j} = δ_ij [i ∈ S_n]/|S_n|``) and ``x_q = C z_q`` (``E z_i z_j = δ_ij``)
   gives the systematic part ``σ² + tr[D_n(I − ΣA_n)Σ(I − ΣA_n)ᵀ]/|S_n|``, ``D_n = diag(1[j ∈ S_n])``.
2. **Fluctuation.** Heads ``h, k`` fluctuate with covariance
   ``Var(y_n)/L · Π_j E[f_h f_k]/(E f_h E f_k)`` per whitened coordinate
   (:func:`reduced_dynamics.derive.symbolic.fluctuation_kernel`, unit variance):
   ``exp(b_hᵀb_k) = exp(x_qᵀ B_hᵀ Σ B_k x_q)``. The response variance of task ``n`` taken without
   tilt is ``E y_n² = E(β_nᵀx)² + σ² = tr(D_n Σ)/|S_n| + σ²`` (same moment rules; 1 + σ² at Σ = I).
3. **Typical query.** The quadratic form in ``x_q`` in the exponent is replaced by its mean,
   ``x_qᵀ Q x_q → tr(Q Σ)``.

The result, equal to :func:`closed_form_sigma_mt_loss` (symbolic difference 0, tests), is

.. math::

    \tilde L = \sum_n \Big[\sigma^2 + \tfrac{1}{|S_n|}\operatorname{tr}\big(D_n(I-\Sigma A_n)\Sigma(I-\Sigma A_n)^\top\big)
      + c_n\,\mu_n^\top K\mu_n\Big],\qquad
    K_{hk} = e^{\operatorname{tr}(\Sigma B_h^\top\Sigma B_k)},\quad
    c_n = \frac{\operatorname{tr}(D_n\Sigma)/|S_n| + \sigma^2}{L}.

Reductions (sympy, exact): at ``Σ = I``, ``B_h = diag(ω^(h))`` it is the multi-task loss
(:func:`reduction_to_multitask`); with one task on all features and ``B_h = ω_h W_h`` (or ``ω_h W``) it
is the preconditioned loss (:func:`reduction_to_precond`); with both, :math:`\tilde L`
(:func:`reduction_to_isotropic`). The small-``B`` limit at fixed ``A_n`` (``Σ_h μ^(h)_n = 0``) is
derived from :math:`\tilde L` itself (:func:`limit_loss_difference`) and its minimiser from the
stationarity equations (:func:`derive_limit_minimiser`).

This module imports sympy at the top; nothing in the package's eager import chain imports it.

References
----------
docs/_sigma_tasks_section.md, docs/theory.md#non-isotropic-covariates, docs/theory.md#multi-task-regression
"""

from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import sympy as sp

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_bool, check_finite_array, check_positive_int
from reduced_dynamics.derive.symbolic import (
    closed_form_loss,
    fluctuation_kernel,
    problem_symbols,
    state_symbols,
    tilted_mean,
)
from reduced_dynamics.multitask.derive import _finite_value
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "H_MAX",
    "D_MAX",
    "SigmaTasksSymbols",
    "sigma_mt_symbols",
    "rational_cholesky",
    "derive_sigma_mt_loss_per_task",
    "derive_sigma_mt_loss",
    "closed_form_sigma_mt_loss",
    "sigma_mt_loss_gradient",
    "sigma_mt_loss_hessian",
    "difference_to_closed_form",
    "reduction_to_multitask",
    "reduction_to_precond",
    "reduction_to_isotropic",
    "limit_loss_difference",
    "derive_limit_minimiser",
    "closed_form_limit_minimiser",
    "GeneratedSigmaTasks",
    "generated_sigma_mt_functions",
]

#: Largest number of heads of the symbolic derivation.
H_MAX = 4
#: Largest dimension of the symbolic derivation (the expressions grow like d⁴ per pair of heads).
D_MAX = 4


@dataclasses.dataclass(frozen=True)
class SigmaTasksSymbols(FrozenResult):
    """Symbols of the composed model (:func:`sigma_mt_symbols`).

    Attributes
    ----------
    B : tuple of sympy.Matrix, length H
        The KQ blocks, each (d × d) of real symbols ``B{h}_{i}{j}`` (1-based).
    mu : tuple of tuple of sympy.Symbol
        ``mu[h][n]`` = ``μ^(h)_n`` (named ``mu_{h}_{n}``, 1-based), shape (H, N).
    C : sympy.Matrix, (d × d)
        Lower-triangular factor of ``Σ = C Cᵀ``: generic symbols ``C_{i}{j}`` (positive diagonal,
        the symbols of :mod:`reduced_dynamics.precond.derive`), or the rational matrix given.
    L, sigma2 : sympy.Symbol
        The symbols of :func:`reduced_dynamics.derive.symbolic.problem_symbols`.
    theta : tuple of sympy.Symbol
        The state in gradient order: the entries of each ``B_h`` row-major (h outermost), then ``μ``
        row-major ``(h, n)``.
    supports : tuple of tuple of int
        The supports ``S_n`` (0-based) of the setting.
    generic_C : bool
        True when ``C`` is a matrix of symbols.
    """

    B: tuple
    mu: tuple
    C: object
    L: object
    sigma2: object
    theta: tuple
    supports: tuple
    generic_C: bool

    @property
    def Sigma(self) -> sp.Matrix:
        """``C Cᵀ``."""
        return self.C * self.C.T

    @property
    def d(self) -> int:
        """The dimension."""
        return int(self.C.shape[0])

    @property
    def H(self) -> int:
        """The number of heads."""
        return len(self.B)

    @property
    def c_symbols(self) -> tuple:
        """The free symbols of ``C`` (lower triangle, row-major), empty for a rational ``C``."""
        if not self.generic_C:
            return ()
        return tuple(self.C[i, j] for i in range(self.d) for j in range(i + 1))


def _generic_C(d):
    return sp.ImmutableMatrix(
        d,
        d,
        lambda i, j: (
            sp.Symbol(f"C_{i + 1}{j + 1}", positive=True)
            if i == j
            else (sp.Symbol(f"C_{i + 1}{j + 1}", real=True) if i > j else sp.Integer(0))
        ),
    )


def _matrix(C) -> sp.ImmutableMatrix:
    """``C`` as a square sympy matrix of real numbers (at most ``D_MAX`` rows), or ``ValueError`` naming ``C``."""
    try:
        ndim = np.ndim(C)
    except ValueError:  # a ragged list
        ndim = -1
    if isinstance(C, (str, bytes, dict, set)) or ndim != 2:
        raise ValueError(f"`C` must be a square matrix (a list of rows or a 2-d array) of rationals, got {C!r}")
    try:
        M = sp.ImmutableMatrix(C)
    except (TypeError, ValueError, sp.SympifyError):
        raise ValueError(f"`C` must be a square matrix of rationals, got {C!r}") from None
    if M.shape[0] != M.shape[1] or not 1 <= M.shape[0] <= D_MAX:
        raise ValueError(f"`C` must be a square matrix of at most {D_MAX} rows, got shape {M.shape}")
    if any(not (x.is_number and x.is_real and x.is_finite) for x in M):
        raise ValueError("`C` must have finite real (rational) entries")
    return M


def _as_C(C, d):
    """``None`` (generic symbols) or a lower-triangular matrix of rationals with positive diagonal."""
    if C is None:
        return None
    M = _matrix(C)
    if M.shape != (d, d):
        raise ValueError(f"`C` must be a ({d}, {d}) lower-triangular matrix, got shape {M.shape}")
    M = M.applyfunc(sp.nsimplify)
    if any(not x.is_Rational for x in M):
        raise ValueError("`C` must have rational entries (use None for a matrix of symbols)")
    if any(M[i, j] != 0 for i in range(d) for j in range(i + 1, d)) or any(M[i, i] <= 0 for i in range(d)):
        raise ValueError("`C` must be lower triangular with a positive diagonal")
    return M


def _check(H, setting, where):
    H = check_positive_int("H", H, hi=H_MAX)
    setting = as_setting(setting, where).require_softmax(where).require_scalar(where)
    check_positive_int("setting.d", setting.d, hi=D_MAX)
    return H, setting


def rational_cholesky(C) -> sp.ImmutableMatrix:
    """Validate a rational lower-triangular factor ``C`` (positive diagonal); ``Σ = C Cᵀ`` is then rational."""
    M = _matrix(C)
    return _as_C(M, M.shape[0])


@cache
def _symbols(H: int, d: int, supports: tuple, C) -> SigmaTasksSymbols:
    N = len(supports)
    B = tuple(
        sp.ImmutableMatrix(d, d, lambda i, j, h=h: sp.Symbol(f"B{h + 1}_{i + 1}{j + 1}", real=True)) for h in range(H)
    )
    mu = tuple(tuple(sp.Symbol(f"mu_{h + 1}_{n + 1}", real=True) for n in range(N)) for h in range(H))
    ps = problem_symbols()
    generic = C is None
    Cm = _generic_C(d) if generic else C
    theta = (*(s for Bm in B for s in Bm), *(s for row in mu for s in row))
    return SigmaTasksSymbols(
        B=B, mu=mu, C=Cm, L=ps.L, sigma2=ps.sigma2, theta=theta, supports=supports, generic_C=generic
    )


def sigma_mt_symbols(H: int, setting: Setting, *, C=None) -> SigmaTasksSymbols:
    """Symbols for ``H`` heads in ``setting`` (``d`` features, its supports); ``Σ = C Cᵀ``.

    Parameters
    ----------
    H : int, in [1, 4]
    setting : Setting
        Scalar, softmax; its ``d`` (<= 4) and ``supports`` enter as numbers (``L``, ``sigma2`` stay
        symbols; a ``Sigma`` of the setting is not used: ``Σ`` is given by ``C``).
    C : (d, d) matrix of rationals, optional
        Lower-triangular factor of ``Σ``; None (default): a matrix of symbols.

    Returns
    -------
    SigmaTasksSymbols
    """
    H, setting = _check(H, setting, "sigma_mt_symbols")
    return _symbols(H, setting.d, tuple(setting.supports), _as_C(C, setting.d))


def _gaussian_mean(expr, zs, variances=None):
    """E over independent ``z_i ~ N(0, v_i)`` of a polynomial of total degree <= 2 in ``zs``.

    The moment rules ``E z_i = 0``, ``E z_i z_j = δ_ij v_i``, applied through the exact identity
    ``E p(z) = p(0) + ½ Σ_i v_i ∂²p/∂z_i²(0)`` for such polynomials (no expansion of ``p`` is needed;
    the callers check the degree with :func:`_require_linear`).
    """
    variances = [sp.Integer(1)] * len(zs) if variances is None else list(variances)
    at0 = {z: 0 for z in zs}
    out = expr.subs(at0, simultaneous=True)
    for z, v in zip(zs, variances, strict=True):
        if v != 0:
            out += v * sp.diff(expr, z, 2).subs(at0, simultaneous=True) / 2
    return sp.expand(out)


def _require_linear(expr, zs, what):
    """Raise unless ``expr`` is affine in ``zs`` (every second derivative expands to 0)."""
    for i, a in enumerate(zs):
        for b in zs[i:]:
            if sp.expand(sp.diff(expr, a, b)) != 0:
                raise AssertionError(f"{what} is not linear in {a}, {b}: the moment rules would not be exact")


def _mean_square(lin, zs, variances=None):
    """``E[lin²]`` over independent ``z_i ~ N(0, v_i)`` for ``lin`` affine in ``zs``: ``lin(0)² + Σ_i v_i (∂lin/∂z_i)²``.

    The same moment rules as :func:`_gaussian_mean` applied to the square without expanding it.
    """
    _require_linear(lin, zs, "the averaged form")
    variances = [sp.Integer(1)] * len(zs) if variances is None else list(variances)
    at0 = {z: 0 for z in zs}
    out = lin.subs(at0, simultaneous=True) ** 2
    for z, v in zip(zs, variances, strict=True):
        out += v * sp.diff(lin, z) ** 2
    return out


def _mean_sq_beta_then_z(form, betas, support, zs):
    """``E_z E_β form²`` for ``form`` bilinear in ``(β, z)``, ``z ~ N(0, I)``, ``β_j ~ N(0, 1/|S|)`` i.i.d. on ``S``, 0 off ``S``.

    ``E_β form² = Σ_{j∈S} (∂form/∂β_j)²/|S|`` (``form`` vanishes at ``β = 0``); each ``∂form/∂β_j`` is
    affine in ``z`` and is averaged by :func:`_mean_square`.
    """
    _require_linear(form, betas, "the error of the mean prediction")
    off = {betas[j]: 0 for j in range(len(betas)) if j not in support}
    reduced = form.subs(off, simultaneous=True)
    at0 = {b: 0 for b in betas}
    if sp.expand(reduced.subs(at0, simultaneous=True)) != 0:
        raise AssertionError("the averaged form does not vanish at β = 0")
    return sum(_mean_square(sp.diff(reduced, betas[j]), zs) for j in support) / len(support)


def _canonical(expr):
    """Expand every exponent (so that equal exponents compare equal) and the whole expression."""
    return sp.expand(expr.replace(sp.exp, lambda a: sp.exp(sp.expand(a))))


@cache
def _derive_parts(sy: SigmaTasksSymbols) -> tuple:
    """Per task ``(bias, var_y, exponents)``: ``L̃_n = bias + var_y/L Σ_hk μ_hn μ_kn exp(exponents[h, k])``."""
    H, d, C = sy.H, sy.d, sy.C
    z_q = sp.Matrix(sp.symbols(f"zq_1:{d + 1}", real=True))
    beta = sp.Matrix(sp.symbols(f"beta_1:{d + 1}", real=True))
    x_q = C * z_q
    # statement 1: tilt, one whitened coordinate at a time
    k, r = sp.Symbol("k", real=True), sp.Symbol("r", positive=True)
    w = sp.Symbol("omega", real=True)
    tilt = sp.simplify(tilted_mean().subs(w, k / r) * r)  # tilted mean of N(0,1) under e^{k a}
    b = []
    passed = []  # head h passes mu_hn * beta^T C tilt(b_h) for task n
    for h in range(H):
        b_h = C.T * sy.B[h] * x_q  # logit x^T B_h x_q = b_h^T z
        for j in range(d):
            _require_linear(b_h[j], list(z_q), "the tilt b_h")
        b.append(b_h)
        tilted_z = sp.Matrix([tilt.subs(k, b_h[j]) for j in range(d)])
        passed.append((beta.T * (C * tilted_z))[0, 0])
    # statement 2: fluctuation kernel, a product over the whitened coordinates; statement 3 in the exponent
    wh, wk, v = sp.Symbol("wh", real=True), sp.Symbol("wk", real=True), sp.Symbol("v", positive=True)
    pair = fluctuation_kernel(wh, wk, v)
    kernel = {}
    for h in range(H):
        for kk in range(h, H):
            kern = sp.Integer(1)
            for j in range(d):
                kern *= pair.subs({wh: b[h][j], wk: b[kk][j], v: 1})
            exponent = sp.expand(sp.expand_log(sp.log(sp.powsimp(kern, force=True)), force=True))
            for j in range(d):  # quadratic in x_q: its first derivatives are affine
                _require_linear(sp.diff(exponent, z_q[j]), list(z_q), "the kernel exponent")
            kernel[h, kk] = kernel[kk, h] = _gaussian_mean(exponent, list(z_q))  # typical query
    z = sp.Matrix(sp.symbols(f"z_1:{d + 1}", real=True))
    out = []
    for n, support in enumerate(sy.supports):
        mean_pred = sum(sy.mu[h][n] * passed[h] for h in range(H))
        err = (beta.T * x_q)[0, 0] - mean_pred
        bias = sy.sigma2 + _mean_sq_beta_then_z(err, list(beta), support, list(z_q))
        var_y = _mean_sq_beta_then_z((beta.T * C * z)[0, 0], list(beta), support, list(z)) + sy.sigma2
        out.append((bias, var_y, kernel))
    return tuple(out)


@cache
def _derive(sy: SigmaTasksSymbols) -> tuple:
    out = []
    for n, (bias, var_y, expo) in enumerate(_derive_parts(sy)):
        fluct = sum(sy.mu[h][n] * sy.mu[k][n] * sp.exp(expo[h, k]) for h in range(sy.H) for k in range(sy.H))
        out.append(bias + var_y / sy.L * fluct)
    return tuple(out)


def derive_sigma_mt_loss_per_task(H: int, setting: Setting, *, C=None) -> tuple:
    r"""Derive the per-task losses :math:`\tilde L_n` from the moment statements (module docstring).

    Parameters
    ----------
    H : int, in [1, 4]
    setting : Setting
        Scalar; ``d`` <= 4 and the supports enter as numbers.
    C : (d, d) rational lower-triangular matrix, optional
        ``Σ = C Cᵀ``; None: generic symbols.

    Returns
    -------
    tuple of sympy.Expr, length N
        In the symbols of :func:`sigma_mt_symbols`.
    """
    H, setting = _check(H, setting, "derive_sigma_mt_loss_per_task")
    return _derive(sigma_mt_symbols(H, setting, C=C))


def derive_sigma_mt_loss(H: int, setting: Setting, *, C=None) -> sp.Expr:
    r"""The derived :math:`\tilde L = \sum_n \tilde L_n` (:func:`derive_sigma_mt_loss_per_task`)."""
    return sp.Add(*derive_sigma_mt_loss_per_task(H, setting, C=C))


def _closed(sy: SigmaTasksSymbols) -> sp.Expr:
    S = sy.Sigma
    d, H = sy.d, sy.H
    K = sp.Matrix(H, H, lambda h, k: sp.exp((S * sy.B[h].T * S * sy.B[k]).trace()))
    out = sp.Integer(0)
    for n, support in enumerate(sy.supports):
        D = sp.diag(*[1 if j in support else 0 for j in range(d)])
        A = sp.zeros(d, d)
        for h in range(H):
            A += sy.mu[h][n] * sy.B[h]
        P = sp.eye(d) - S * A
        m = sp.Matrix([sy.mu[h][n] for h in range(H)])
        c = ((D * S).trace() / len(support) + sy.sigma2) / sy.L
        out += sy.sigma2 + (D * P * S * P.T).trace() / len(support) + c * (m.T * K * m)[0, 0]
    return out


def closed_form_sigma_mt_loss(H: int, setting: Setting, *, C=None) -> sp.Expr:
    r"""The closed form ``Σ_n [σ² + tr(D_n(I−ΣA_n)Σ(I−ΣA_n)ᵀ)/|S_n| + c_n μ_nᵀKμ_n]`` (``Σ = C Cᵀ``)."""
    H, setting = _check(H, setting, "closed_form_sigma_mt_loss")
    return _closed(sigma_mt_symbols(H, setting, C=C))


def sigma_mt_loss_gradient(H: int, setting: Setting, *, C=None) -> sp.Matrix:
    """Symbolic gradient of :func:`derive_sigma_mt_loss` in the order of ``sigma_mt_symbols(...).theta``."""
    sy = sigma_mt_symbols(H, setting, C=C)
    expr = derive_sigma_mt_loss(H, setting, C=C)
    return sp.Matrix([sp.diff(expr, s) for s in sy.theta])


def sigma_mt_loss_hessian(H: int, setting: Setting, *, C=None) -> sp.Matrix:
    """Symbolic Hessian of :func:`derive_sigma_mt_loss` in the order of ``sigma_mt_symbols(...).theta``."""
    sy = sigma_mt_symbols(H, setting, C=C)
    return sp.hessian(derive_sigma_mt_loss(H, setting, C=C), sy.theta)


def difference_to_closed_form(H: int, setting: Setting, *, C=None) -> sp.Expr:
    """``derive_sigma_mt_loss − closed_form_sigma_mt_loss`` after expanding (0 when the derivation holds)."""
    return _canonical(derive_sigma_mt_loss(H, setting, C=C) - closed_form_sigma_mt_loss(H, setting, C=C))


def reduction_to_multitask(H: int, setting: Setting) -> sp.Expr:
    r"""The derived loss at ``Σ = I`` (``C = I``) and ``B_h = diag(ω^(h))`` minus the multi-task closed form.

    The multi-task loss is :func:`reduced_dynamics.multitask.derive.closed_form_mt_loss` in its own
    symbols (``ω^(h)_j``, ``μ^(h)_n``); returns the expanded difference, 0 when the reduction is exact.
    """
    from reduced_dynamics.multitask.derive import closed_form_mt_loss, mt_symbols

    H, setting = _check(H, setting, "reduction_to_multitask")
    d = setting.d
    sy = sigma_mt_symbols(H, setting, C=sp.eye(d))
    mt = mt_symbols(H, setting)
    subs = {sy.B[h][i, j]: (mt.omega[h][i] if i == j else 0) for h in range(H) for i in range(d) for j in range(d)}
    subs.update({sy.mu[h][n]: mt.mu[h][n] for h in range(H) for n in range(setting.n_tasks)})
    derived = derive_sigma_mt_loss(H, setting, C=sp.eye(d)).subs(subs, simultaneous=True)
    return _canonical(derived - closed_form_mt_loss(H, setting))


def reduction_to_precond(H: int, n_features: int, *, per_head: bool = False) -> sp.Expr:
    r"""One task on all features, ``B_h = ω_h W_h`` (or ``ω_h W``), generic ``C``: derived minus the preconditioned closed form.

    The preconditioned loss is :func:`reduced_dynamics.precond.derive.closed_form_precond_loss` in its
    own symbols (``ω_h``, ``μ_h``, ``W`` or ``W_h``, the same ``C``). Returns the expanded difference.
    """
    from reduced_dynamics.precond.derive import closed_form_precond_loss, precond_symbols

    H = check_positive_int("H", H, hi=H_MAX)
    d = check_positive_int("n_features", n_features, hi=D_MAX)
    setting = Setting(d=d, L=40, sigma2=0.1)  # one task on all features; L, sigma2 stay symbols
    sy = sigma_mt_symbols(H, setting)
    ps = precond_symbols(H, d, per_head=per_head)
    subs = {}
    for h in range(H):
        W = ps.W[h if per_head else 0]
        subs.update({sy.B[h][i, j]: ps.omega[h] * W[i, j] for i in range(d) for j in range(d)})
        subs[sy.mu[h][0]] = ps.mu[h]
    subs.update({sy.C[i, j]: ps.C[i, j] for i in range(d) for j in range(i + 1)})
    derived = derive_sigma_mt_loss(H, setting).subs(subs, simultaneous=True)
    return _canonical(derived - closed_form_precond_loss(H, d, per_head=per_head))


def reduction_to_isotropic(H: int, n_features: int) -> sp.Expr:
    r"""One task on all features, ``Σ = I``, ``B_h = ω_h I``: derived minus :math:`\tilde L` (closed form at ``d``)."""
    H = check_positive_int("H", H, hi=H_MAX)
    d = check_positive_int("n_features", n_features, hi=D_MAX)
    setting = Setting(d=d, L=40, sigma2=0.1)
    sy = sigma_mt_symbols(H, setting, C=sp.eye(d))
    st = state_symbols(H)
    subs = {sy.B[h][i, j]: (st.omega[h] if i == j else 0) for h in range(H) for i in range(d) for j in range(d)}
    subs.update({sy.mu[h][0]: st.mu[h] for h in range(H)})
    derived = derive_sigma_mt_loss(H, setting, C=sp.eye(d)).subs(subs, simultaneous=True)
    return _canonical(derived - closed_form_loss(H).subs(problem_symbols().d, d))


def _limit_loss(sy: SigmaTasksSymbols, n: int, A) -> sp.Expr:
    """``σ² + tr(D(I−ΣA)Σ(I−ΣA)ᵀ)/|S| + c_n tr(ΣAᵀΣA)`` for task ``n`` at the matrix ``A``."""
    S, d = sy.Sigma, sy.d
    support = sy.supports[n]
    D = sp.diag(*[1 if j in support else 0 for j in range(d)])
    P = sp.eye(d) - S * A
    c = ((D * S).trace() / len(support) + sy.sigma2) / sy.L
    return sy.sigma2 + (D * P * S * P.T).trace() / len(support) + c * (S * A.T * S * A).trace()


def limit_loss_difference(H: int, setting: Setting, *, C=None) -> tuple:
    r"""The small-``B`` limit of the derived :math:`\tilde L_n` at fixed ``A_n``, minus the limit loss.

    Along ``B_h → γ B_h``, ``μ → μ/γ`` the derived systematic part is unchanged (checked: it depends on
    the state only through the products ``μ^(h)_n B_h``) and every kernel exponent is homogeneous of
    degree 2 in ``B`` (checked), so the fluctuation term is
    ``var_n/L Σ_hk μ_hn μ_kn e^{γ²τ_hk}/γ² = var_n/L [γ^{-2}(Σ_h μ_hn)² + Σ_hk μ_hn μ_kn τ_hk + O(γ²)]``
    (the series of ``e^{γ²t}``, by sympy). With the last head's ``μ^(H)_n = −Σ_{h<H} μ^(h)_n``
    (debiased) this returns, per task, the coefficient of ``γ^{-2}`` and the coefficient of ``γ^0`` minus
    ``σ² + tr(D_n(I−ΣA_n)Σ(I−ΣA_n)ᵀ)/|S_n| + c_n tr(ΣA_nᵀΣA_n)`` at ``A_n = Σ_h μ^(h)_n B_h``:
    both 0 when the limit holds. ``H >= 2`` (debiasing needs two heads).

    Returns
    -------
    tuple of (sympy.Expr, sympy.Expr), one pair per task
    """
    H, setting = _check(H, setting, "limit_loss_difference")
    if H < 2:
        raise ValueError("`H` must be >= 2 for the debiased limit")
    sy = sigma_mt_symbols(H, setting, C=C)
    g, t = sp.Symbol("gamma", positive=True), sp.Symbol("t", real=True)
    N = setting.n_tasks
    last = {sy.mu[H - 1][n]: -sum(sy.mu[h][n] for h in range(H - 1)) for n in range(N)}
    scale_B = {s: g * s for Bm in sy.B for s in Bm}
    scale_mu = {sy.mu[h][n]: sy.mu[h][n] / g for h in range(H) for n in range(N)}
    series = sp.series(sp.exp(g**2 * t) / g**2, g, 0, 2).removeO()  # 1/γ² + t + O(γ²)
    out = []
    for n, (bias, var_y, expo) in enumerate(_derive_parts(sy)):
        if _canonical(bias.subs({**scale_B, **scale_mu}, simultaneous=True) - bias) != 0:
            raise AssertionError("the systematic part is not invariant under (B, μ) -> (γB, μ/γ)")
        for e in set(expo.values()):
            if sp.expand(e.subs(scale_B, simultaneous=True) - g**2 * e) != 0:
                raise AssertionError("a kernel exponent is not homogeneous of degree 2 in B")
        fl = sum(
            sy.mu[h][n] * sy.mu[k][n] * series.subs(t, expo[h, k]) for h in range(H) for k in range(H)
        )  # μ μ/γ² e^{γ²τ} with μ/γ already factored into 1/γ²
        fl = sp.expand((var_y / sy.L * fl).subs(last, simultaneous=True))
        A = sp.zeros(sy.d, sy.d)
        for h in range(H):
            A += sy.mu[h][n] * sy.B[h]
        lim = _limit_loss(sy, n, A).subs(last, simultaneous=True)
        coeff0 = sp.expand(bias.subs(last, simultaneous=True) + fl.coeff(g, 0) - lim)
        out.append((sp.expand(fl.coeff(g, -2)), coeff0))
    return tuple(out)


def closed_form_limit_minimiser(setting: Setting, *, C=None) -> tuple:
    r"""``A_n^* = (D_nΣ + λ_n I)^{-1} D_n`` with ``λ_n = |S_n| c_n = (tr(D_nΣ) + |S_n|σ²)/L`` (sympy, ``Σ = C Cᵀ``).

    Equivalently ``(Σ_{S_nS_n} + λ_n I)^{-1}`` on the ``S_n × S_n`` block, zero elsewhere.

    Returns
    -------
    tuple of sympy.Matrix, length N
    """
    _, setting = _check(1, setting, "closed_form_limit_minimiser")
    sy = sigma_mt_symbols(1, setting, C=C)
    S, d = sy.Sigma, sy.d
    out = []
    for support in sy.supports:
        D = sp.diag(*[1 if j in support else 0 for j in range(d)])
        lam = ((D * S).trace() + len(support) * sy.sigma2) / sy.L
        out.append((D * S + lam * sp.eye(d)).inv() * D)
    return tuple(out)


def derive_limit_minimiser(setting: Setting, *, C=None) -> tuple:
    r"""Solve the stationarity equations ``∂/∂A_n [limit loss] = 0`` for a matrix of symbols ``A_n``.

    The limit loss of task ``n`` is quadratic in ``A_n``; the linear system (``d²`` equations) is
    solved by ``sympy.linsolve``. Returns, per task, ``(A_n^*, minimum value)`` as sympy objects; the
    tests prove ``A_n^*`` equals :func:`closed_form_limit_minimiser` (use a rational ``C`` for d = 3).
    """
    _, setting = _check(1, setting, "derive_limit_minimiser")
    sy = sigma_mt_symbols(1, setting, C=C)
    d = sy.d
    Am = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"a_{i + 1}{j + 1}", real=True))
    unknowns = list(Am)
    out = []
    for n in range(len(sy.supports)):
        f = _limit_loss(sy, n, Am)
        eqs = [sp.expand(sp.diff(f, a)) for a in unknowns]
        (sol,) = sp.linsolve(eqs, unknowns)
        # the entries and the minimum are rational functions of L, σ² (and Σ's symbols): sp.factor is their
        # canonical factored form (the form sp.simplify returned here, at a tenth of its cost)
        Astar = sp.Matrix(d, d, [sp.factor(x) for x in sol])
        val = sp.factor(sp.cancel(f.subs(dict(zip(unknowns, sol, strict=True)), simultaneous=True)))
        out.append((Astar, val))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class GeneratedSigmaTasks(FrozenResult):
    """Numpy code generated from the derived loss (:func:`generated_sigma_mt_functions`).

    Attributes
    ----------
    H : int
    setting : Setting
    loss : callable
        ``loss(B, mu, Sigma) -> float`` with ``B`` (H, d, d), ``mu`` (H, N), ``Sigma`` (d, d) positive
        definite (entered through its Cholesky factor; ``L``, ``sigma2`` from the setting).
    gradient : callable
        Same arguments -> ndarray of shape ``(H d² + H N,)`` in the order of ``theta``.
    hessian : callable or None
        Same arguments -> ndarray ``(P, P)``, ``P = H d² + H N`` (None unless asked for).
    """

    H: int
    setting: Setting
    loss: object
    gradient: object
    hessian: object


def generated_sigma_mt_functions(H: int, setting: Setting, *, hessian: bool = False) -> GeneratedSigmaTasks:
    """Lambdify :func:`derive_sigma_mt_loss` (generic ``C``), its gradient and optionally its Hessian.

    The independent route of the tests for the hand-written numpy loss, gradient and Hessian.
    """
    H, setting = _check(H, setting, "generated_sigma_mt_functions")
    hessian = check_bool("hessian", hessian)
    sy = sigma_mt_symbols(H, setting)
    d, N = setting.d, setting.n_tasks
    args = (*sy.theta, *sy.c_symbols, sy.L, sy.sigma2)
    expr = derive_sigma_mt_loss(H, setting)
    f = sp.lambdify(args, expr, modules="numpy", cse=True)
    g = sp.lambdify(args, sp.Matrix([sp.diff(expr, s) for s in sy.theta]), modules="numpy", cse=True)
    hs = sp.lambdify(args, sp.hessian(expr, sy.theta), modules="numpy", cse=True) if hessian else None

    def _vals(B, mu, Sigma):
        B = check_finite_array("B", B)
        mu = check_finite_array("mu", mu)
        if B.shape != (H, d, d) or mu.shape != (H, N):
            raise ValueError(f"`B` and `mu` must have shapes ({H}, {d}, {d}) and ({H}, {N}), got {B.shape}, {mu.shape}")
        Sigma = check_finite_array("Sigma", Sigma)
        if Sigma.shape != (d, d):
            raise ValueError(f"`Sigma` must have shape ({d}, {d}), got {Sigma.shape}")
        try:
            Cn = np.linalg.cholesky(Sigma)
        except np.linalg.LinAlgError:
            raise ValueError("`Sigma` must be symmetric positive definite") from None
        cs = [Cn[i, j] for i in range(d) for j in range(i + 1)]
        return (*B.ravel(), *mu.ravel(), *cs, setting.L, setting.sigma2)

    def loss(B, mu, Sigma):
        return float(_finite_value(f(*_vals(B, mu, Sigma))))

    def gradient(B, mu, Sigma):
        return _finite_value(np.asarray(g(*_vals(B, mu, Sigma)), dtype=float).ravel())

    def hess(B, mu, Sigma):
        return _finite_value(hs(*_vals(B, mu, Sigma)))

    return GeneratedSigmaTasks(H=H, setting=setting, loss=loss, gradient=gradient, hessian=hess if hessian else None)
