r"""Batched predictors of in-context linear regression (docs/theory.md#reduced-model, #predictors).

Every predictor here is a *linear smoother*: on a prompt it predicts

.. math:: \hat y = \sum_{l=1}^{L} w_l\, y_l ,

with weights :math:`w_l` that depend on the covariates only. For the attention,
kernel and gradient-descent predictors the weights depend on a prompt only
through the inner products :math:`s_l = x_l^\top x_q` (note
:math:`\bar x^\top x_q = \bar s`), so they accept either a full
:class:`~reduced_dynamics.estimation.prompts.Prompts` batch or its sufficient statistics
:class:`PromptStats`. Bayes ridge needs the full covariates.

Sufficient-statistics sampler (isotropic case, docs/theory.md#data-model). By rotational
invariance choose the frame with :math:`x_q = |x_q| e_1` and write
:math:`x_l = (a_l, z_l)`, :math:`\beta = (\beta_1, \beta_\perp)`. Then

.. math::

    s_l = |x_q|\, a_l,\qquad y_l = \beta_1 a_l + \beta_\perp^\top z_l + \varepsilon_l,
    \qquad y_q = \beta_1 |x_q| + \varepsilon_q,

with :math:`|x_q|^2\sim\chi^2_d`, :math:`a_l\sim N(0,1)`,
:math:`\beta_1\sim N(0,1/d)`, :math:`|\beta_\perp|^2\sim\chi^2_{d-1}/d`, all
independent, and given :math:`\beta_\perp`, :math:`\beta_\perp^\top z_l +
\varepsilon_l \sim N(0, |\beta_\perp|^2 + \sigma^2)` i.i.d. over ``l``.
:func:`sample_prompt_stats` draws exactly these, at a cost independent of ``d``.

Because every predictor is linear in ``y`` and β, ε are independent of the
covariates, the conditional risk given the covariates is available in closed
form (:func:`conditional_loss`); :mod:`reduced_dynamics.estimation.risk` uses it as a
Rao–Blackwellised Monte Carlo estimator.

References
----------
docs/theory.md#data-model (data), #reduced-model (reduced model), #predictors (reference predictors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from reduced_dynamics._validation import (
    check_finite_float,
    check_heads_pair,
    check_nonnegative_float,
    check_positive_int,
    check_problem,
)
from reduced_dynamics.dynamics.manifold import single_head_optimum
from reduced_dynamics.estimation.prompts import Prompts, as_generator

__all__ = [
    "PromptStats",
    "prompt_stats",
    "sample_prompt_stats",
    "multi_head_weights",
    "vanilla_gd_weights",
    "debiased_gd_weights",
    "linear_attention_weights",
    "ridge_weights",
    "multi_head",
    "single_head",
    "vanilla_gd",
    "debiased_gd",
    "linear_attention",
    "bayes_ridge",
    "conditional_loss",
    "Predictor",
    "MultiHead",
    "SingleHead",
    "VanillaGD",
    "DebiasedGD",
    "LinearAttention",
    "BayesRidge",
    "Zero",
]


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class PromptStats:
    """Sufficient statistics of a batch of ``n`` isotropic prompts.

    Attributes
    ----------
    s : ndarray, shape (n, L)
        Inner products ``s_l = x_lᵀ x_q``.
    y : ndarray, shape (n, L) or None
        Context responses (``None`` when only the covariates were drawn, as in
        the Rao–Blackwellised engine).
    yq : ndarray, shape (n,) or None
        Noisy query targets.
    xq_norm2 : ndarray, shape (n,)
        ``|x_q|²``.
    d : int
        Dimension of the prompts these statistics stand for.
    sigma2 : float
        Noise variance.
    """

    s: np.ndarray
    y: np.ndarray | None
    yq: np.ndarray | None
    xq_norm2: np.ndarray
    d: int
    sigma2: float

    @property
    def n(self) -> int:
        return self.s.shape[0]

    @property
    def L(self) -> int:
        return self.s.shape[1]


Batch = Prompts | PromptStats


def prompt_stats(prompts: Prompts) -> PromptStats:
    """Reduce a full batch to its sufficient statistics.

    Parameters
    ----------
    prompts : Prompts
        Batch with ``X`` of shape ``(n, L, d)``.

    Returns
    -------
    PromptStats
        ``s = X x_q`` (shape ``(n, L)``), the same ``y`` and ``yq``, ``|x_q|²``.

    Examples
    --------
    >>> from reduced_dynamics.estimation.prompts import sample_prompts
    >>> st = prompt_stats(sample_prompts(3, d=5, L=8, sigma2=0.1, seed=0))
    >>> st.s.shape, st.d
    ((3, 8), 5)
    """
    if not isinstance(prompts, Prompts):
        raise ValueError(f"`prompts` must be a Prompts batch, got {type(prompts).__name__}")
    s = np.einsum("nld,nd->nl", prompts.X, prompts.xq)
    return PromptStats(
        s=s,
        y=prompts.y,
        yq=prompts.yq,
        xq_norm2=np.einsum("nd,nd->n", prompts.xq, prompts.xq),
        d=prompts.d,
        sigma2=float(prompts.sigma2),
    )


def _draw_stats_into(rng, s, y, yq, r2, *, d, sigma2, covariates_only=False):
    """Fill preallocated arrays with one block of sufficient statistics.

    Draw order (fixed, part of the reproducibility contract): ``|x_q|²``, ``a``,
    then ``β₁``, ``|β_⊥|²``, the combined context noise, ``ε_q``. With
    ``covariates_only`` the last four are skipped, so the covariates agree with
    the full draw from the same generator.
    """
    m = s.shape[0]
    r2[...] = rng.chisquare(d, size=m)
    rng.standard_normal(out=s)  # a_l, turned into s_l = |x_q| a_l below
    if not covariates_only:
        beta1 = rng.standard_normal(m) / np.sqrt(d)
        bperp2 = rng.chisquare(d - 1, size=m) / d if d > 1 else np.zeros(m)
        rng.standard_normal(out=y)
        y *= np.sqrt(bperp2 + sigma2)[:, None]  # β_⊥ᵀz_l + ε_l
        y += beta1[:, None] * s
        r = np.sqrt(r2)
        yq[...] = beta1 * r + np.sqrt(sigma2) * rng.standard_normal(m)
    else:
        r = np.sqrt(r2)
    s *= r[:, None]


def sample_prompt_stats(n, *, d, L, sigma2, seed, covariates_only=False) -> PromptStats:
    r"""Draw the sufficient statistics of ``n`` isotropic prompts directly.

    Same distribution as ``prompt_stats(sample_prompts(n, d=d, L=L, ...))`` at
    a cost of ``O(n L)``, independent of ``d`` (see the module docstring for
    the rotation argument).

    Parameters
    ----------
    n : int
        Number of prompts, ``>= 1``.
    d, L : int
        Dimension and context length, ``>= 1``.
    sigma2 : float
        Noise variance, ``>= 0``.
    seed : int or numpy.random.Generator
        Explicit source of randomness.
    covariates_only : bool, default False
        Draw only ``s`` and ``|x_q|²`` (``y`` and ``yq`` are ``None``).

    Returns
    -------
    PromptStats

    Examples
    --------
    >>> st = sample_prompt_stats(4, d=5, L=40, sigma2=0.1, seed=0)
    >>> st.s.shape, st.y.shape, st.yq.shape
    ((4, 40), (4, 40), (4,))
    """
    n = check_positive_int("n", n)
    d, L, sigma2 = check_problem(d, L, sigma2)
    rng = as_generator(seed)
    s = np.empty((n, L))
    r2 = np.empty(n)
    y = None if covariates_only else np.empty((n, L))
    yq = None if covariates_only else np.empty(n)
    _draw_stats_into(rng, s, y, yq, r2, d=d, sigma2=sigma2, covariates_only=covariates_only)
    return PromptStats(s=s, y=y, yq=yq, xq_norm2=r2, d=d, sigma2=sigma2)


# ------------------------------------------------------------------ weight kernels


def _s_of(batch) -> np.ndarray:
    if isinstance(batch, PromptStats):
        return batch.s
    if isinstance(batch, Prompts):
        return np.einsum("nld,nd->nl", batch.X, batch.xq)
    raise ValueError(f"`batch` must be Prompts or PromptStats, got {type(batch).__name__}")


def _y_of(batch) -> np.ndarray:
    if batch.y is None:
        raise ValueError("`batch` has no responses `y` (drawn with covariates_only=True)")
    return batch.y


def _check_s(s) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"`s` must have shape (n, L), got {s.shape}")
    return s


def _heads(omega, mu) -> tuple[np.ndarray, np.ndarray]:
    omega, mu = check_heads_pair(omega, mu)
    if omega.ndim != 1:
        raise ValueError(f"`omega` and `mu` must have shape (H,), got {omega.shape}")
    return omega, mu


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
        ``x_lᵀ x_q``.
    omega, mu : ndarray, shape (H,)
        KQ scales and OV values of the heads.

    Returns
    -------
    ndarray, shape (n, L)
    """
    s = _check_s(s)
    omega, mu = _heads(omega, mu)
    # max_l ω_h s_l = ω_h max_l s_l (ω_h >= 0) or ω_h min_l s_l (ω_h < 0): rounding is monotone
    smax = s.max(axis=1)
    smin = s.min(axis=1)
    w = np.zeros_like(s)
    z = np.empty_like(s)
    for o, m in zip(omega.tolist(), mu.tolist()):  # loop over heads only; vectorised over prompts
        np.multiply(s, o, out=z)
        z -= (o * smax if o >= 0 else o * smin)[:, None]
        np.exp(z, out=z)
        z *= (m / z.sum(axis=1))[:, None]
        w += z
    return w


def vanilla_gd_weights(s, eta) -> np.ndarray:
    r"""Weights of one-step GD from zero, :math:`w_l = (\eta/L)\, s_l` (docs/theory.md#predictors).

    Parameters
    ----------
    s : ndarray, shape (n, L)
    eta : float

    Returns
    -------
    ndarray, shape (n, L)
    """
    s = _check_s(s)
    eta = check_finite_float("eta", eta)
    return (eta / s.shape[1]) * s


def debiased_gd_weights(s, eta) -> np.ndarray:
    r"""Weights of debiased GD, :math:`w_l = (\eta/L)(s_l - \bar s)`, :math:`\bar s = \bar x^\top x_q`.

    Parameters
    ----------
    s : ndarray, shape (n, L)
    eta : float

    Returns
    -------
    ndarray, shape (n, L)
    """
    s = _check_s(s)
    eta = check_finite_float("eta", eta)
    return (eta / s.shape[1]) * (s - s.mean(axis=1, keepdims=True))


def linear_attention_weights(s, omega, mu) -> np.ndarray:
    r"""Weights of linear attention with the ``1/L`` normalisation hard-coded.

    .. math:: w_l = \sum_h \mu_h \tfrac1L \omega_h s_l = \tfrac{\mu^\top\omega}{L} s_l ,

    i.e. vanilla GD with :math:`\eta = \mu^\top\omega` (docs/theory.md#predictors).

    Parameters
    ----------
    s : ndarray, shape (n, L)
    omega, mu : ndarray, shape (H,)

    Returns
    -------
    ndarray, shape (n, L)
    """
    omega, mu = _heads(omega, mu)
    return vanilla_gd_weights(s, float(mu @ omega))


def _ridge_solve(A, b, *, lam, L, d) -> np.ndarray:
    """Solve the batched ridge systems ``A v = b`` (``A = XᵀX + λI``, shape ``(n, d, d)``).

    ``λ = 0`` needs ``XᵀX`` invertible, hence ``L >= d``; this is checked up front
    because a rank-deficient ``XᵀX`` is often *not* flagged singular in floating
    point and would return garbage silently.
    """
    if lam == 0 and L < d:
        raise ValueError(f"`lam` must be > 0 when L < d (XᵀX is singular), got lam=0 with L={L}, d={d}")
    try:
        return np.linalg.solve(A, b[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:
        raise ValueError(f"`lam` must be > 0 here: XᵀX + λI is singular for lam={lam}") from None


def ridge_weights(X, xq, lam) -> np.ndarray:
    r"""Weights of ridge regression, :math:`w = X (X^\top X + \lambda I)^{-1} x_q`.

    Parameters
    ----------
    X : ndarray, shape (n, L, d)
    xq : ndarray, shape (n, d)
    lam : float, > 0 or == 0 (then ``XᵀX`` must be invertible, so ``L >= d``)

    Returns
    -------
    ndarray, shape (n, L)
    """
    X = np.asarray(X, dtype=np.float64)
    xq = np.asarray(xq, dtype=np.float64)
    lam = check_nonnegative_float("lam", lam)
    if X.ndim != 3 or xq.shape != (X.shape[0], X.shape[2]):
        raise ValueError(f"`X` and `xq` must have shapes (n, L, d) and (n, d), got {X.shape} and {xq.shape}")
    A = np.einsum("nld,nle->nde", X, X)
    A += lam * np.eye(X.shape[2])
    v = _ridge_solve(A, xq, lam=lam, L=X.shape[1], d=X.shape[2])
    return np.einsum("nld,nd->nl", X, v)


# -------------------------------------------------------------------- predictions


def _smooth(w, batch) -> np.ndarray:
    return np.einsum("nl,nl->n", w, _y_of(batch))


def multi_head(batch: Batch, omega, mu) -> np.ndarray:
    r"""Reduced multi-head softmax attention (docs/theory.md#reduced-model).

    .. math:: \hat y(\omega,\mu) = \sum_h \mu_h \sum_l y_l\, \mathrm{softmax}_l(\omega_h x_l^\top x_q)

    Parameters
    ----------
    batch : Prompts or PromptStats
        ``n`` prompts of length ``L``.
    omega, mu : array_like, shape (H,)

    Returns
    -------
    ndarray, shape (n,)

    Examples
    --------
    >>> st = sample_prompt_stats(2, d=5, L=40, sigma2=0.1, seed=0)
    >>> np.allclose(multi_head(st, [0.0], [1.0]), st.y.mean(axis=1))
    True
    """
    return _smooth(multi_head_weights(_s_of(batch), omega, mu), batch)


def single_head(batch: Batch, omega, mu) -> np.ndarray:
    r"""Single softmax head, a Nadaraya–Watson kernel regressor (the ``H = 1`` case).

    .. math:: \hat y = \mu \sum_l y_l\, \mathrm{softmax}_l(\omega\, x_l^\top x_q)

    Its optimum of the approximate loss is
    :func:`reduced_dynamics.dynamics.manifold.single_head_optimum` (docs/theory.md#gradient-flow).

    Parameters
    ----------
    batch : Prompts or PromptStats
    omega, mu : float

    Returns
    -------
    ndarray, shape (n,)
    """
    return multi_head(batch, [check_finite_float("omega", omega)], [check_finite_float("mu", mu)])


def vanilla_gd(batch: Batch, eta) -> np.ndarray:
    r"""One step of GD from zero, :math:`\hat y = (\eta/L)\sum_l y_l\, x_l^\top x_q` (docs/theory.md#predictors).

    Parameters
    ----------
    batch : Prompts or PromptStats
    eta : float

    Returns
    -------
    ndarray, shape (n,)
    """
    return _smooth(vanilla_gd_weights(_s_of(batch), eta), batch)


def debiased_gd(batch: Batch, eta) -> np.ndarray:
    r"""Debiased GD, :math:`\hat y = (\eta/L)\sum_l y_l (x_l - \bar x)^\top x_q` (docs/theory.md#predictors).

    Parameters
    ----------
    batch : Prompts or PromptStats
    eta : float

    Returns
    -------
    ndarray, shape (n,)
    """
    return _smooth(debiased_gd_weights(_s_of(batch), eta), batch)


def linear_attention(batch: Batch, omega, mu) -> np.ndarray:
    r"""Linear attention with hard-coded ``1/L`` normalisation.

    .. math:: \hat y = \sum_h \mu_h \frac1L \sum_l y_l\, \omega_h x_l^\top x_q ,

    equal to :func:`vanilla_gd` with :math:`\eta = \mu^\top\omega` (docs/theory.md#predictors).

    Parameters
    ----------
    batch : Prompts or PromptStats
    omega, mu : array_like, shape (H,)

    Returns
    -------
    ndarray, shape (n,)
    """
    return _smooth(linear_attention_weights(_s_of(batch), omega, mu), batch)


def bayes_ridge(prompts: Prompts, *, lam=None) -> np.ndarray:
    r"""Posterior-mean (ridge) prediction :math:`\hat y = x_q^\top (X^\top X + \lambda I)^{-1} X^\top y`.

    With the prior :math:`\beta\sim N(0, I_d/d)` and noise :math:`N(0,\sigma^2)`
    the posterior mean of β is ridge with :math:`\lambda = \sigma^2 d`, whatever
    the covariance Σ of ``x`` (the covariates are conditioned on), so this is
    Bayes-optimal also for prompts drawn with ``Sigma`` (docs/theory.md#predictors).

    Parameters
    ----------
    prompts : Prompts
        Full batch (``X`` of shape ``(n, L, d)``).
    lam : float, optional
        Ridge parameter; default ``prompts.sigma2 * d``. ``lam = 0`` needs
        ``L >= d``.

    Returns
    -------
    ndarray, shape (n,)
    """
    if not isinstance(prompts, Prompts):
        raise ValueError(f"`prompts` must be a full Prompts batch for ridge, got {type(prompts).__name__}")
    lam = prompts.sigma2 * prompts.d if lam is None else lam
    lam = check_nonnegative_float("lam", lam)
    A = np.einsum("nld,nle->nde", prompts.X, prompts.X)
    A += lam * np.eye(prompts.d)
    b = np.einsum("nld,nl->nd", prompts.X, prompts.y)
    beta_hat = _ridge_solve(A, b, lam=lam, L=prompts.L, d=prompts.d)
    return np.einsum("nd,nd->n", prompts.xq, beta_hat)


def conditional_loss(batch: Batch, w) -> np.ndarray:
    r"""Risk of a linear smoother conditional on the covariates (Rao–Blackwell).

    For :math:`\hat y = w^\top y` with ``w`` a function of ``X, x_q`` and
    :math:`\beta\sim N(0,I_d/d)`, :math:`\varepsilon\sim N(0,\sigma^2)` independent of them,

    .. math:: E[(y_q-\hat y)^2 \mid X, x_q] = \tfrac1d\,|x_q - X^\top w|^2 + \sigma^2 (1 + |w|^2).

    For :class:`PromptStats` the frame components orthogonal to ``x_q`` are
    integrated as well (:math:`E|Z^\top w|^2 = (d-1)|w|^2`), which gives

    .. math:: \tfrac{1}{d}\frac{(|x_q|^2 - w^\top s)^2}{|x_q|^2}
              + \sigma^2 + \Big(\tfrac{d-1}{d} + \sigma^2\Big)|w|^2 .

    Both have the same mean as :math:`(y_q - \hat y)^2`. The full form holds
    for any covariance of ``x`` (only β and ε are integrated); the
    :class:`PromptStats` form assumes isotropic ``x``.

    Parameters
    ----------
    batch : Prompts or PromptStats
        ``n`` prompts of length ``L``.
    w : ndarray, shape (n, L)
        Smoother weights, functions of the covariates only.

    Returns
    -------
    ndarray, shape (n,)
    """
    if not isinstance(batch, (Prompts, PromptStats)):
        raise ValueError(f"`batch` must be Prompts or PromptStats, got {type(batch).__name__}")
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (batch.n, batch.L):
        raise ValueError(f"`w` must have shape (n, L) = {(batch.n, batch.L)}, got {w.shape}")
    sigma2 = float(batch.sigma2)
    if isinstance(batch, PromptStats):
        d, r2 = batch.d, batch.xq_norm2
        ws = np.einsum("nl,nl->n", w, batch.s)
        ww = np.einsum("nl,nl->n", w, w)
        return (r2 - ws) ** 2 / (d * r2) + sigma2 + ((d - 1) / d + sigma2) * ww
    resid = batch.xq - np.einsum("nld,nl->nd", batch.X, w)
    ww = np.einsum("nl,nl->n", w, w)
    return np.einsum("nd,nd->n", resid, resid) / batch.d + sigma2 * (1.0 + ww)


# ----------------------------------------------------------- predictor objects


class Predictor:
    """Base class: a linear smoother :math:`\\hat y = \\sum_l w_l y_l`.

    Subclasses define :meth:`weights`; ``uses_stats`` says whether the weights
    depend on the prompt only through :class:`PromptStats` (then the engine may
    use :func:`sample_prompt_stats`).
    """

    uses_stats: ClassVar[bool] = True
    name: ClassVar[str] = "predictor"

    def weights(self, batch: Batch) -> np.ndarray:
        """Smoother weights ``w``, shape ``(n, L)``; every subclass defines them."""
        raise TypeError(f"{type(self).__name__} does not define `weights`; subclass Predictor and implement it")

    def __call__(self, batch: Batch) -> np.ndarray:
        """Predictions ``ŷ``, shape ``(n,)``."""
        return _smooth(self.weights(batch), batch)


@dataclass(frozen=True)
class _HeadsPredictor(Predictor):
    """Base of the predictors parameterised by per-head ``(omega, mu)``, stored as validated tuples."""

    omega: tuple
    mu: tuple

    def __post_init__(self):
        omega, mu = _heads(self.omega, self.mu)
        object.__setattr__(self, "omega", tuple(float(v) for v in omega))
        object.__setattr__(self, "mu", tuple(float(v) for v in mu))


@dataclass(frozen=True)
class MultiHead(_HeadsPredictor):
    """Reduced H-head softmax model at ``(omega, mu)``; see :func:`multi_head`."""

    name: ClassVar[str] = "multi_head"

    def weights(self, batch):
        return multi_head_weights(_s_of(batch), np.array(self.omega), np.array(self.mu))


@dataclass(frozen=True)
class SingleHead(Predictor):
    """Single softmax head (kernel regressor); see :func:`single_head`."""

    omega: float
    mu: float
    name: ClassVar[str] = "single_head"

    def __post_init__(self):
        object.__setattr__(self, "omega", check_finite_float("omega", self.omega))
        object.__setattr__(self, "mu", check_finite_float("mu", self.mu))

    @classmethod
    def optimum(cls, d, L, sigma2) -> SingleHead:
        """The minimiser of the approximate loss for ``H = 1`` (positive branch)."""
        omega, mu, _ = single_head_optimum(d, L, sigma2)
        return cls(omega, mu)

    def weights(self, batch):
        return multi_head_weights(_s_of(batch), np.array([self.omega]), np.array([self.mu]))


@dataclass(frozen=True)
class _StepPredictor(Predictor):
    """Base of the one-step GD predictors, parameterised by a validated step ``eta``."""

    eta: float

    def __post_init__(self):
        object.__setattr__(self, "eta", check_finite_float("eta", self.eta))


@dataclass(frozen=True)
class VanillaGD(_StepPredictor):
    """One-step GD with step ``eta``; see :func:`vanilla_gd`."""

    name: ClassVar[str] = "gd"

    def weights(self, batch):
        return vanilla_gd_weights(_s_of(batch), self.eta)


@dataclass(frozen=True)
class DebiasedGD(_StepPredictor):
    """Debiased GD with step ``eta``; see :func:`debiased_gd`."""

    name: ClassVar[str] = "debiased_gd"

    def weights(self, batch):
        return debiased_gd_weights(_s_of(batch), self.eta)


@dataclass(frozen=True)
class LinearAttention(_HeadsPredictor):
    """Linear attention, ``1/L`` normalisation hard-coded; see :func:`linear_attention`."""

    name: ClassVar[str] = "linear_attention"

    def weights(self, batch):
        return linear_attention_weights(_s_of(batch), np.array(self.omega), np.array(self.mu))


@dataclass(frozen=True)
class BayesRidge(Predictor):
    """Ridge / posterior mean; ``lam=None`` means ``σ² d``. Needs full prompts."""

    lam: float | None = None
    uses_stats: ClassVar[bool] = False
    name: ClassVar[str] = "bayes_ridge"

    def __post_init__(self):
        if self.lam is not None:
            object.__setattr__(self, "lam", check_nonnegative_float("lam", self.lam))

    def weights(self, batch):
        if not isinstance(batch, Prompts):
            raise ValueError(f"`batch` must be a full Prompts batch for ridge, got {type(batch).__name__}")
        lam = batch.sigma2 * batch.d if self.lam is None else self.lam
        return ridge_weights(batch.X, batch.xq, lam)

    def __call__(self, batch):
        return bayes_ridge(batch, lam=self.lam)


@dataclass(frozen=True)
class Zero(Predictor):
    """The predictor ``ŷ = 0``; its risk is ``E|β|² + σ² = 1 + σ²`` (isotropic case)."""

    name: ClassVar[str] = "zero"

    def weights(self, batch):
        return np.zeros_like(_s_of(batch))

    def __call__(self, batch):
        return np.zeros(_s_of(batch).shape[0])
