r"""Predictors of in-context linear regression (docs/theory.md#reduced-model, #predictors).

Every predictor here is a *linear smoother*: on a prompt it predicts

.. math:: \hat y = \sum_{l=1}^{L} w_l\, y_l ,

with weights :math:`w_l` that depend on the covariates only. For the attention,
kernel and gradient-descent predictors the weights depend on a prompt only
through the scores :math:`s_l = x_l^\top x_q` (note :math:`\bar x^\top x_q =
\bar s`), so they accept any :class:`~reduced_dynamics.Prompts`, also a
statistics-only one; Bayes ridge needs the covariates.

The public surface is the predictor *classes* (:class:`MultiHead`,
:class:`SingleHead`, :class:`VanillaGD`, :class:`DebiasedGD`,
:class:`LinearAttention`, :class:`BayesRidge`, :class:`Zero`; base
:class:`Predictor`) and :func:`conditional_loss`. A predictor is called on a
batch, ``MultiHead(omega, mu)(prompts)``, and gives its smoother weights with
``.weights(prompts)``; the Monte Carlo engine takes the same objects.

Broadcasting: the parameters may carry leading batch axes. ``VanillaGD(eta)``
and ``DebiasedGD(eta)`` take ``eta`` of any shape ``S``; ``MultiHead`` and
``LinearAttention`` take ``omega``, ``mu`` of shapes ``(..., H)`` that broadcast
against each other (the last axis is the head axis); ``SingleHead`` takes
``omega``, ``mu`` broadcasting to ``S``; ``BayesRidge`` takes ``lam`` of shape
``S``. Then ``weights`` has shape ``S + (n, L)`` and the predictions
``S + (n,)``; scalar parameters give ``(n, L)`` and ``(n,)``.
:func:`conditional_loss` broadcasts over leading axes of ``w`` the same way.

Because every predictor is linear in ``y`` and β, ε are independent of the
covariates, the risk conditional on the covariates is available in closed
form (:func:`conditional_loss`); :mod:`reduced_dynamics.estimation.risk` uses
it as a Rao–Blackwellised Monte Carlo estimator.

References
----------
docs/theory.md#data-model (data), #reduced-model (reduced model), #predictors (reference predictors).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from reduced_dynamics._validation import check_finite_array, check_finite_float
from reduced_dynamics.dynamics.manifold import single_head_optimum
from reduced_dynamics.estimation._threads import single_blas_thread
from reduced_dynamics.estimation.prompts import Prompts
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "Predictor",
    "MultiHead",
    "SingleHead",
    "VanillaGD",
    "DebiasedGD",
    "LinearAttention",
    "BayesRidge",
    "Zero",
    "conditional_loss",
]


# --------------------------------------------------------------------------- helpers


def _check_prompts(prompts, name="prompts") -> Prompts:
    if not isinstance(prompts, Prompts):
        raise ValueError(f"`{name}` must be a reduced_dynamics.Prompts batch, got {type(prompts).__name__}")
    return prompts


#: Largest allowed ``|eta|`` of the one-step GD predictors (beyond it the predictions overflow).
ETA_MAX = 1e12


def _real(name, value):
    """Refuse complex input (numpy would silently drop the imaginary part)."""
    if isinstance(value, complex) or np.iscomplexobj(value):
        raise ValueError(f"`{name}` must be real, got a complex value")
    return value


def _finite_out(arr, what):
    """Return ``arr`` or raise ``ValueError`` if it has NaN/inf (an overflow of the inputs named in ``what``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.sum(arr))
    if not math.isfinite(total) and not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} overflow to non-finite values; use smaller parameters or prompt values")
    return arr


def _param(name, value):
    """A finite parameter: Python float for a scalar, read-only float64 ndarray otherwise."""
    _real(name, value)
    if np.ndim(value) == 0 and not isinstance(value, np.ndarray):
        return check_finite_float(name, value)
    arr = check_finite_array(name, value).copy()
    arr.setflags(write=False)
    return arr if arr.ndim else float(arr)


def _eta(value):
    eta = _param("eta", value)
    if np.any(np.abs(np.asarray(eta)) > ETA_MAX):
        raise ValueError(f"`eta` must be a finite number with |eta| <= {ETA_MAX:g}, got {value!r}")
    return eta


def _heads(omega, mu) -> tuple[np.ndarray, np.ndarray]:
    """Validate per-head parameters of shapes ``(..., H)`` that broadcast against each other."""
    omega = check_finite_array("omega", _real("omega", omega), min_ndim=1)
    mu = check_finite_array("mu", _real("mu", mu), min_ndim=1)
    if omega.shape[-1] != mu.shape[-1]:
        raise ValueError(
            f"`omega` and `mu` must have the same number of heads (last axis), got shapes {omega.shape} and {mu.shape}"
        )
    try:
        np.broadcast_shapes(omega.shape, mu.shape)
    except ValueError:
        raise ValueError(f"`omega` and `mu` must broadcast together, got shapes {omega.shape} and {mu.shape}") from None
    return omega, mu


def _check_s(s) -> np.ndarray:
    s = np.asarray(_real("s", s), dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"`s` must have shape (n, L), got {s.shape}")
    return s


# ------------------------------------------------------------------ weight kernels (internal)


def multi_head_weights(s, omega, mu) -> np.ndarray:
    r"""Smoother weights of the reduced H-head softmax model (docs/theory.md#reduced-model).

    .. math:: w_l = \sum_h \mu_h\, \mathrm{softmax}_l(\omega_h s_l)
              = \sum_h \mu_h \frac{e^{\omega_h s_l - m_h}}{\sum_k e^{\omega_h s_k - m_h}},
              \quad m_h = \max_l \omega_h s_l ,

    the max subtracted for stability (no overflow whenever the products
    ``ω_h s_l`` are finite). The loop runs over the H heads only, each pass
    vectorised over all ``n L`` entries; measured faster than an ``(n, H, L)``
    broadcast for H = 2…6, and it needs no ``H``-fold temporary.

    Parameters
    ----------
    s : ndarray, shape (n, L)
        Scores ``x_lᵀ x_q``.
    omega, mu : ndarray, shapes (..., H) broadcasting together
        KQ scales and OV values of the heads.

    Returns
    -------
    ndarray, shape (..., n, L)
    """
    s = _check_s(s)
    omega, mu = _heads(omega, mu)
    with np.errstate(over="ignore", invalid="ignore"):
        w = _multi_head_weights(s, omega, mu)
    return _finite_out(w, "the weights of `omega`, `mu` on these scores")


def _multi_head_weights(s, omega, mu) -> np.ndarray:
    # max_l ω_h s_l = ω_h max_l s_l (ω_h >= 0) or ω_h min_l s_l (ω_h < 0): rounding is monotone
    smax = s.max(axis=1)
    smin = s.min(axis=1)
    if omega.ndim == 1 and mu.ndim == 1:
        w = np.zeros_like(s)
        z = np.empty_like(s)
        for o, m in zip(omega.tolist(), mu.tolist()):  # loop over heads only; vectorised over prompts
            np.multiply(s, o, out=z)
            z -= (o * smax if o >= 0 else o * smin)[:, None]
            np.exp(z, out=z)
            z *= (m / z.sum(axis=1))[:, None]
            w += z
        return w
    omega, mu = np.broadcast_arrays(omega, mu)
    w = np.zeros(omega.shape[:-1] + s.shape)
    for h in range(omega.shape[-1]):
        o = omega[..., h][..., None, None]
        z = o * s
        z -= np.where(o >= 0, o * smax[:, None], o * smin[:, None])
        np.exp(z, out=z)
        z *= mu[..., h][..., None, None] / z.sum(axis=-1, keepdims=True)
        w += z
    return w


def vanilla_gd_weights(s, eta) -> np.ndarray:
    r"""Weights of one-step GD from zero, :math:`w_l = (\eta/L)\, s_l` (docs/theory.md#predictors).

    ``eta`` scalar gives shape ``(n, L)``; ``eta`` of shape ``S`` gives ``S + (n, L)``.
    """
    s = _check_s(s)
    eta = _eta(eta)
    with np.errstate(over="ignore", invalid="ignore"):
        w = (eta / s.shape[1]) * s if isinstance(eta, float) else (eta / s.shape[1])[..., None, None] * s
    return _finite_out(w, "the weights of `eta` on these scores")


def debiased_gd_weights(s, eta) -> np.ndarray:
    r"""Weights of debiased GD, :math:`w_l = (\eta/L)(s_l - \bar s)`, :math:`\bar s = \bar x^\top x_q`.

    ``eta`` scalar gives shape ``(n, L)``; ``eta`` of shape ``S`` gives ``S + (n, L)``.
    """
    s = _check_s(s)
    eta = _eta(eta)
    with np.errstate(over="ignore", invalid="ignore"):
        c = s - s.mean(axis=1, keepdims=True)
        w = (eta / s.shape[1]) * c if isinstance(eta, float) else (eta / s.shape[1])[..., None, None] * c
    return _finite_out(w, "the weights of `eta` on these scores")


def linear_attention_weights(s, omega, mu) -> np.ndarray:
    r"""Weights of linear attention with the ``1/L`` normalisation hard-coded.

    .. math:: w_l = \sum_h \mu_h \tfrac1L \omega_h s_l = \tfrac{\mu^\top\omega}{L} s_l ,

    i.e. vanilla GD with :math:`\eta = \mu^\top\omega` (docs/theory.md#predictors).
    """
    omega, mu = _heads(omega, mu)
    s = _check_s(s)
    if omega.ndim == 1 and mu.ndim == 1:
        eta = float(mu @ omega)
        return _finite_out((eta / s.shape[1]) * s, "the weights of `omega`, `mu`")
    eta = np.sum(omega * mu, axis=-1)
    return _finite_out((eta / s.shape[1])[..., None, None] * s, "the weights of `omega`, `mu`")


def _ridge_solve(A, b, *, lam, L, d) -> np.ndarray:
    """Solve the batched ridge systems ``A v = b`` (``A = XᵀX + λI``, shape ``(..., n, d, d)``).

    ``λ = 0`` needs ``XᵀX`` invertible, hence ``L >= d``; this is checked up front
    because a rank-deficient ``XᵀX`` is often *not* flagged singular in floating
    point and would return garbage silently.
    """
    if np.any(np.asarray(lam) == 0) and L < d:
        raise ValueError(f"`lam` must be > 0 when L < d (XᵀX is singular), got lam=0 with L={L}, d={d}")
    try:
        with single_blas_thread():  # batched small solves: a threaded BLAS only synchronises
            return np.linalg.solve(A, b[..., None])[..., 0]
    except np.linalg.LinAlgError:
        raise ValueError(f"`lam` must be > 0 here: XᵀX + λI is singular for lam={lam}") from None


def _check_lam(lam):
    lam = _param("lam", lam)
    if np.any(np.asarray(lam) < 0):
        raise ValueError(f"`lam` must be a finite number >= 0, got {lam!r}")
    return lam


def ridge_weights(X, xq, lam) -> np.ndarray:
    r"""Weights of ridge regression, :math:`w = X (X^\top X + \lambda I)^{-1} x_q`.

    Parameters
    ----------
    X : ndarray, shape (n, L, d)
    xq : ndarray, shape (n, d)
    lam : float or ndarray of shape S, >= 0 (``0`` needs ``L >= d``)

    Returns
    -------
    ndarray, shape S + (n, L)
    """
    X = np.asarray(_real("X", X), dtype=np.float64)
    xq = np.asarray(_real("xq", xq), dtype=np.float64)
    lam = _check_lam(lam)
    if X.ndim != 3 or xq.shape != (X.shape[0], X.shape[2]):
        raise ValueError(f"`X` and `xq` must have shapes (n, L, d) and (n, d), got {X.shape} and {xq.shape}")
    n, L, d = X.shape
    if isinstance(lam, float) and lam > 0 and L < d:  # dual form: w = (XXᵀ + λI_L)⁻¹ X x_q, an L × L solve
        K = _gram(X, dual=True)
        K[:, np.arange(L), np.arange(L)] += lam
        s = np.matmul(X, xq[:, :, None])[..., 0]
        return _finite_out(_ridge_solve(K, s, lam=lam, L=L, d=d), "the ridge weights of `X`, `xq`")
    A = _gram(X)
    eye = np.eye(X.shape[2])
    if isinstance(lam, float):
        A += lam * eye
        b = xq
    else:
        A = A + lam[..., None, None, None] * eye
        b = np.broadcast_to(xq, A.shape[:-1])
    v = _ridge_solve(A, b, lam=lam, L=X.shape[1], d=X.shape[2])
    w = np.einsum("nld,...nd->...nl", X, v) if v.ndim > 2 else np.einsum("nld,nd->nl", X, v)
    return _finite_out(w, "the ridge weights of `X`, `xq`")


def _gram(X, *, dual=False) -> np.ndarray:
    """``XᵀX`` (n, d, d), or ``XXᵀ`` (n, L, L) with ``dual``, by batched matmul with one BLAS thread."""
    Xt = np.swapaxes(X, 1, 2)
    with single_blas_thread():
        return np.matmul(X, Xt) if dual else np.matmul(Xt, X)


def _smooth(w, prompts) -> np.ndarray:
    y = prompts.y
    if w.ndim == 2:
        return np.einsum("nl,nl->n", w, y)
    return np.einsum("...nl,nl->...n", w, y)


# -------------------------------------------------------------- function forms (internal)
# Kept for internal callers; the public surface is the predictor classes below.


def multi_head(prompts, omega, mu) -> np.ndarray:
    r"""Reduced multi-head softmax attention, :math:`\sum_h \mu_h \sum_l y_l \mathrm{softmax}_l(\omega_h s_l)`."""
    return _smooth(multi_head_weights(_check_prompts(prompts).scores, omega, mu), prompts)


def single_head(prompts, omega, mu) -> np.ndarray:
    """Single softmax head (the ``H = 1`` case of :func:`multi_head`), scalar ``omega``, ``mu``."""
    return multi_head(prompts, [check_finite_float("omega", omega)], [check_finite_float("mu", mu)])


def vanilla_gd(prompts, eta) -> np.ndarray:
    r"""One step of GD from zero, :math:`\hat y = (\eta/L)\sum_l y_l\, x_l^\top x_q`."""
    return _smooth(vanilla_gd_weights(_check_prompts(prompts).scores, eta), prompts)


def debiased_gd(prompts, eta) -> np.ndarray:
    r"""Debiased GD, :math:`\hat y = (\eta/L)\sum_l y_l (x_l - \bar x)^\top x_q`."""
    return _smooth(debiased_gd_weights(_check_prompts(prompts).scores, eta), prompts)


def linear_attention(prompts, omega, mu) -> np.ndarray:
    r"""Linear attention with hard-coded ``1/L``: vanilla GD with :math:`\eta = \mu^\top\omega`."""
    return _smooth(linear_attention_weights(_check_prompts(prompts).scores, omega, mu), prompts)


def _ridge_lam(lam, prompts):
    if lam is None:
        if prompts.setting is None:
            raise ValueError(
                "`lam` is required for a batch without a setting (or use BayesRidge(setting) for λ = σ² d)"
            )
        lam = prompts.setting.sigma2 * prompts.d
    elif isinstance(lam, Setting):
        lam = lam.sigma2 * np.asarray(lam.d) if not lam.is_scalar else lam.sigma2 * lam.d
    return _check_lam(lam)


def bayes_ridge(prompts, *, lam=None) -> np.ndarray:
    r"""Posterior-mean (ridge) prediction :math:`\hat y = x_q^\top (X^\top X + \lambda I)^{-1} X^\top y`.

    ``lam=None`` means :math:`\sigma^2 d` of ``prompts.setting``; a scalar ``lam``.
    """
    prompts = _check_prompts(prompts)
    if not prompts.has_covariates:
        raise ValueError("`prompts` must have covariates for ridge (not a statistics-only batch)")
    lam = _ridge_lam(lam, prompts)
    if not isinstance(lam, float):
        return _smooth(ridge_weights(prompts.X, prompts.x_q, lam), prompts)
    X = prompts.X
    n, L, d = X.shape
    if lam > 0 and L < d:  # dual form: ŷ = sᵀ(XXᵀ + λI_L)⁻¹ y, an L × L solve
        K = _gram(X, dual=True)
        K[:, np.arange(L), np.arange(L)] += lam
        v = _ridge_solve(K, prompts.y, lam=lam, L=L, d=d)
        return _finite_out(np.einsum("nl,nl->n", prompts.scores, v), "the ridge predictions on `prompts`")
    A = _gram(X)
    A[:, np.arange(d), np.arange(d)] += lam
    b = np.matmul(prompts.y[:, None, :], X)[:, 0, :]
    beta_hat = _ridge_solve(A, b, lam=lam, L=L, d=d)
    return _finite_out(np.einsum("nd,nd->n", prompts.x_q, beta_hat), "the ridge predictions on `prompts`")


# ------------------------------------------------------------------ conditional loss


def conditional_loss(prompts, w, *, setting=None) -> np.ndarray:
    r"""Risk of a linear smoother conditional on the covariates (Rao–Blackwell).

    For :math:`\hat y = w^\top y` with ``w`` a function of ``X, x_q`` and
    :math:`\beta\sim N(0,I_d/d)`, :math:`\varepsilon\sim N(0,\sigma^2)` independent of them,

    .. math:: E[(y_q-\hat y)^2 \mid X, x_q] = \tfrac1d\,|x_q - X^\top w|^2 + \sigma^2 (1 + |w|^2).

    For a statistics-only batch the frame components orthogonal to ``x_q`` are
    integrated as well (:math:`E|Z^\top w|^2 = (d-1)|w|^2`), which gives

    .. math:: \tfrac{1}{d}\frac{(|x_q|^2 - w^\top s)^2}{|x_q|^2}
              + \sigma^2 + \Big(\tfrac{d-1}{d} + \sigma^2\Big)|w|^2 .

    Both have the same mean as :math:`(y_q - \hat y)^2`. The first form holds
    for any covariance of ``x`` (only β and ε are integrated); the
    statistics-only form assumes isotropic ``x``.

    Parameters
    ----------
    prompts : Prompts
        ``n`` prompts of length ``L`` (responses not needed).
    w : array_like, shape (..., n, L)
        Smoother weights (functions of the covariates only); leading axes
        broadcast.
    setting : Setting, optional
        The data model (``sigma2``, and ``d`` for a statistics-only batch);
        default ``prompts.setting``.

    Returns
    -------
    ndarray, shape (..., n)

    References
    ----------
    docs/theory.md#predictors
    """
    prompts = _check_prompts(prompts)
    if setting is None:
        setting = prompts.setting
        if setting is None:
            raise ValueError("`setting` is required: the batch carries none (pass setting=Setting(...))")
    setting = as_setting(setting).require_scalar("conditional_loss")
    w = check_finite_array("w", _real("w", w))
    n, L = prompts.n, prompts.L
    if w.ndim < 2 or w.shape[-2:] != (n, L):
        raise ValueError(f"`w` must have shape (..., n, L) with (n, L) = {(n, L)}, got {w.shape}")
    sigma2 = float(setting.sigma2)
    flat = w.ndim == 2
    ww = np.einsum("nl,nl->n", w, w) if flat else np.einsum("...nl,...nl->...n", w, w)
    if not prompts.has_covariates:
        d, r2, s = setting.d, prompts.xq_norm2, prompts.scores
        ws = np.einsum("nl,nl->n", w, s) if flat else np.einsum("...nl,nl->...n", w, s)
        with np.errstate(over="ignore", invalid="ignore"):
            out = (r2 - ws) ** 2 / (d * r2) + sigma2 + ((d - 1) / d + sigma2) * ww
        return _finite_out(out, "the conditional losses of `w` on `prompts`")
    d = prompts.d
    if setting.d != d:
        raise ValueError(f"`setting` has d={setting.d} but the batch has d={d}")
    Xw = np.einsum("nld,nl->nd", prompts.X, w) if flat else np.einsum("nld,...nl->...nd", prompts.X, w)
    resid = prompts.x_q - Xw
    rr = np.einsum("nd,nd->n", resid, resid) if flat else np.einsum("...nd,...nd->...n", resid, resid)
    with np.errstate(over="ignore", invalid="ignore"):
        out = rr / d + sigma2 * (1.0 + ww)
    return _finite_out(out, "the conditional losses of `w` on `prompts`")


# ----------------------------------------------------------- predictor objects


def _key(v):
    if isinstance(v, np.ndarray):
        return (v.shape, v.tobytes())
    return v


class Predictor:
    """Base class: a linear smoother :math:`\\hat y = \\sum_l w_l y_l`.

    Subclasses define :meth:`weights`. Class attributes: ``name`` (the default
    label in the Monte Carlo engine) and ``uses_stats`` (whether the weights
    depend on a batch only through its scores, so that a statistics-only
    batch serves; Bayes ridge needs covariates).

    Predictors compare and hash by value.
    """

    uses_stats: ClassVar[bool] = True
    name: ClassVar[str] = "predictor"

    def weights(self, prompts: Prompts) -> np.ndarray:
        """Smoother weights ``w``, shape ``batch_shape + (n, L)``; every subclass defines them."""
        raise TypeError(f"{type(self).__name__} does not define `weights`; subclass Predictor and implement it")

    def __call__(self, prompts: Prompts) -> np.ndarray:
        """Predictions ``ŷ``, shape ``batch_shape + (n,)``."""
        with np.errstate(over="ignore", invalid="ignore"):
            out = _smooth(self.weights(prompts), _check_prompts(prompts))
        return _finite_out(out, f"the predictions of {type(self).__name__} on `prompts`")

    @property
    def batch_shape(self) -> tuple:
        """Shape of the parameter batch (``()`` for scalar parameters)."""
        return ()

    @property
    def n_heads(self) -> int:
        """Number of attention heads (1 for the non-attention predictors)."""
        return 1

    def _fields(self):
        return (
            tuple(_key(getattr(self, f.name)) for f in dataclasses.fields(self))
            if dataclasses.is_dataclass(self)
            else ()
        )

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self):
        return hash((type(self).__name__, self._fields()))


@dataclass(frozen=True, eq=False)
class _HeadsPredictor(Predictor):
    """Base of the predictors parameterised by per-head ``(omega, mu)`` of shapes ``(..., H)``."""

    omega: Any
    mu: Any

    def __post_init__(self):
        omega, mu = _heads(self.omega, self.mu)
        for name, v in (("omega", omega), ("mu", mu)):
            v = v.copy()
            v.setflags(write=False)
            object.__setattr__(self, name, v)

    @property
    def batch_shape(self) -> tuple:
        return np.broadcast_shapes(self.omega.shape, self.mu.shape)[:-1]

    @property
    def n_heads(self) -> int:
        return int(self.omega.shape[-1])


@dataclass(frozen=True, eq=False)
class MultiHead(_HeadsPredictor):
    r"""The reduced H-head softmax model at ``(omega, mu)`` (docs/theory.md#reduced-model).

    .. math:: \hat y = \sum_h \mu_h \sum_l y_l\, \mathrm{softmax}_l(\omega_h x_l^\top x_q)

    Parameters
    ----------
    omega, mu : array_like, shapes (..., H) broadcasting together
        KQ scales and OV values per head (stored as read-only arrays).

    Examples
    --------
    >>> from reduced_dynamics import MultiHead, sample_prompts
    >>> from reduced_dynamics.setting import Setting
    >>> p = sample_prompts(3, Setting(d=5, L=40, sigma2=0.1), seed=0, stats_only=True)
    >>> MultiHead([0.1, -0.1], [4.0, -4.0])(p).shape
    (3,)
    >>> MultiHead([[0.1, -0.1], [0.2, -0.2]], [4.0, -4.0])(p).shape  # two parameter points
    (2, 3)
    """

    name: ClassVar[str] = "multi_head"

    def weights(self, prompts):
        return multi_head_weights(_check_prompts(prompts).scores, self.omega, self.mu)


@dataclass(frozen=True, eq=False)
class SingleHead(Predictor):
    r"""A single softmax head, the Nadaraya–Watson kernel regressor (the ``H = 1`` reduced model).

    .. math:: \hat y = \mu \sum_l y_l\, \mathrm{softmax}_l(\omega\, x_l^\top x_q)

    Parameters
    ----------
    omega, mu : float or array_like broadcasting together

    References
    ----------
    docs/theory.md#single-head
    """

    omega: Any
    mu: Any
    name: ClassVar[str] = "single_head"

    def __post_init__(self):
        object.__setattr__(self, "omega", _param("omega", self.omega))
        object.__setattr__(self, "mu", _param("mu", self.mu))
        try:
            np.broadcast_shapes(np.shape(self.omega), np.shape(self.mu))
        except ValueError:
            raise ValueError(
                f"`omega` and `mu` must broadcast together, got shapes {np.shape(self.omega)} and {np.shape(self.mu)}"
            ) from None

    @classmethod
    def optimum(cls, setting) -> SingleHead:
        """The minimiser of the approximate loss for ``H = 1`` (positive branch), docs/theory.md#single-head.

        Parameters
        ----------
        setting : Setting
            Data model; an array-valued setting gives a predictor with array
            parameters (``batch_shape == setting.shape``).

        Examples
        --------
        >>> from reduced_dynamics.setting import Setting
        >>> sh = SingleHead.optimum(Setting(d=5, L=40, sigma2=0.1))
        >>> round(sh.omega, 6), round(sh.mu, 6)
        (0.447214, 1.627695)
        """
        opt = single_head_optimum(as_setting(setting))
        return cls(opt.omega, opt.mu)

    @property
    def batch_shape(self) -> tuple:
        return np.broadcast_shapes(np.shape(self.omega), np.shape(self.mu))

    def weights(self, prompts):
        s = _check_prompts(prompts).scores
        if isinstance(self.omega, float) and isinstance(self.mu, float):
            return multi_head_weights(s, np.array([self.omega]), np.array([self.mu]))
        return multi_head_weights(s, np.asarray(self.omega)[..., None], np.asarray(self.mu)[..., None])


@dataclass(frozen=True, eq=False)
class _StepPredictor(Predictor):
    """Base of the one-step GD predictors, parameterised by a step ``eta`` (scalar or array)."""

    eta: Any

    def __post_init__(self):
        object.__setattr__(self, "eta", _eta(self.eta))

    @property
    def batch_shape(self) -> tuple:
        return np.shape(self.eta)


@dataclass(frozen=True, eq=False)
class VanillaGD(_StepPredictor):
    r"""One step of GD from zero with step ``eta`` (docs/theory.md#predictors).

    .. math:: \hat y = \frac{\eta}{L}\sum_l y_l\, x_l^\top x_q

    Parameters
    ----------
    eta : float or array_like
        Step; an array of shape ``S`` gives predictions of shape ``S + (n,)``.
    """

    name: ClassVar[str] = "gd"

    def weights(self, prompts):
        return vanilla_gd_weights(_check_prompts(prompts).scores, self.eta)


@dataclass(frozen=True, eq=False)
class DebiasedGD(_StepPredictor):
    r"""Debiased one-step GD with step ``eta`` (docs/theory.md#predictors).

    .. math:: \hat y = \frac{\eta}{L}\sum_l y_l\, (x_l - \bar x)^\top x_q

    Parameters
    ----------
    eta : float or array_like
        Step; an array of shape ``S`` gives predictions of shape ``S + (n,)``.
    """

    name: ClassVar[str] = "debiased_gd"

    def weights(self, prompts):
        return debiased_gd_weights(_check_prompts(prompts).scores, self.eta)


@dataclass(frozen=True, eq=False)
class LinearAttention(_HeadsPredictor):
    r"""Linear attention with the ``1/L`` normalisation hard-coded (docs/theory.md#predictors).

    .. math:: \hat y = \sum_h \mu_h \frac1L \sum_l y_l\, \omega_h x_l^\top x_q ,

    equal to :class:`VanillaGD` with :math:`\eta = \mu^\top\omega`.

    Parameters
    ----------
    omega, mu : array_like, shapes (..., H) broadcasting together
    """

    name: ClassVar[str] = "linear_attention"

    def weights(self, prompts):
        return linear_attention_weights(_check_prompts(prompts).scores, self.omega, self.mu)


@dataclass(frozen=True, eq=False)
class BayesRidge(Predictor):
    r"""Ridge regression / posterior mean, :math:`\hat y = x_q^\top (X^\top X + \lambda I)^{-1} X^\top y`.

    With the prior :math:`\beta\sim N(0, I_d/d)` and noise :math:`N(0,\sigma^2)`
    the posterior mean of β is ridge with :math:`\lambda = \sigma^2 d`, whatever
    the covariance Σ of ``x`` (the covariates are conditioned on), so this is
    Bayes-optimal also for prompts drawn with ``Sigma`` (docs/theory.md#predictors).
    Needs a batch with covariates.

    Parameters
    ----------
    lam : Setting, float, array_like or None, default None
        A :class:`~reduced_dynamics.Setting` means the Bayes-optimal
        :math:`\lambda = \sigma^2 d` of that setting; a number (or an array of
        shape ``S``, broadcast) is λ itself, ``>= 0`` (``0`` needs ``L >= d``);
        ``None`` means :math:`\sigma^2 d` of the setting each batch was drawn
        from (``prompts.setting``).
    """

    lam: Any = None
    uses_stats: ClassVar[bool] = False
    name: ClassVar[str] = "bayes_ridge"

    def __post_init__(self):
        lam = self.lam
        if isinstance(lam, Setting):
            lam = lam.sigma2 * np.asarray(lam.d) if not lam.is_scalar else lam.sigma2 * lam.d
        if lam is not None:
            object.__setattr__(self, "lam", _check_lam(lam))

    @property
    def batch_shape(self) -> tuple:
        return np.shape(self.lam) if self.lam is not None else ()

    def weights(self, prompts):
        prompts = _check_prompts(prompts)
        if not prompts.has_covariates:
            raise ValueError("`prompts` must have covariates for ridge (not a statistics-only batch)")
        return ridge_weights(prompts.X, prompts.x_q, _ridge_lam(self.lam, prompts))

    def __call__(self, prompts):
        return bayes_ridge(prompts, lam=self.lam)


@dataclass(frozen=True, eq=False)
class Zero(Predictor):
    """The predictor ``ŷ = 0``; its risk is ``E|β|² + σ² = 1 + σ²`` (isotropic case)."""

    name: ClassVar[str] = "zero"

    def weights(self, prompts):
        return np.zeros((_check_prompts(prompts).n, prompts.L))

    def __call__(self, prompts):
        return np.zeros(_check_prompts(prompts).n)
