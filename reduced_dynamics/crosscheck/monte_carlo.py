r"""Monte Carlo (true) risk of the reduced model on fixed covariates: value, exact gradient, and its flow.

A :class:`CovariateSample` is one fixed, seeded sample of prompt covariates
(common random numbers). On it, the Rao–Blackwellised risk of the reduced model
(the mean of :func:`reduced_dynamics.estimation.predictors.conditional_loss`) is
a smooth function of (ω, μ): an unbiased estimate of the true risk
:math:`\mathcal E(\omega, \mu)`, whose exact gradient
(:func:`mc_risk_and_grad`) is an unbiased estimate of :math:`\nabla\mathcal E`.
:func:`mc_flow` integrates the gradient flow of that estimate — the flow of the
true risk up to Monte Carlo error, free of the large-L approximation L̃.

References
----------
docs/theory.md#reduced-model (reduced model, L̃), docs/theory.md#gradient-flow (flow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import (
    check_finite_array,
    check_heads_pair,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
)
from reduced_dynamics.estimation.prompts import Prompts, check_n_prompts, chunk_sizes, sample_prompts
from reduced_dynamics.models._heads import ScalarHeadsModel
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["CovariateSample", "RiskAndGrad", "mc_risk_and_grad", "mc_flow", "SampleRiskModel"]

_CACHE_FLOATS = 2 * 10**7  # cache the covariates when n·L is at most this (160 MB)


class CovariateSample:
    """A fixed, seeded sample of ``n_prompts`` isotropic prompts' covariates (``s``, ``|x_q|²``).

    Block ``i`` (``block_size`` prompts) is drawn by
    :func:`reduced_dynamics.sample_prompts` with ``stats_only=True,
    covariates_only=True`` (scores and ``|x_q|²`` only) from ``Generator(SFC64(SeedSequence(seed, spawn_key=(i,))))``,
    so the sample is a deterministic function of ``(n_prompts, setting, seed)``.
    Iterating yields the blocks as :class:`~reduced_dynamics.Prompts` (cached in memory when
    ``n_prompts·L <= 2·10⁷``,
    otherwise re-drawn on every pass). Used as common random numbers: every
    objective evaluated on the same sample is a smooth function of the parameters.

    Parameters
    ----------
    n_prompts : int, in [2, 1e9]
        Number of prompts (two at least: the risk has a standard error).
    setting : Setting
        Scalar, isotropic data model; one prompt's working set (about ``64 L``
        bytes) must fit in the memory budget
        (:data:`~reduced_dynamics.estimation.prompts.MEMORY_BUDGET`).
    seed : int, >= 0
        Root seed of the blocks.
    block_size : int, >= 1, optional
        Prompts per block (default ``min(4096, 2**20 // L)``, at least 1).
        Memory does not grow with ``n_prompts`` beyond the cache (at most
        ``2·10⁷`` scores).

    Attributes
    ----------
    n, seed, block_size : int
        ``n`` is the number of prompts (the ``n_prompts`` given).
    setting : Setting

    Examples
    --------
    >>> S = CovariateSample(100, Setting(d=3, L=10, sigma2=0.1), seed=0)
    >>> sum(b.n for b in S), next(iter(S)).L
    (100, 10)
    """

    def __init__(self, n_prompts, setting: Setting, *, seed, block_size=None):
        self.n = check_n_prompts(n_prompts)
        self.setting = (
            as_setting(setting, "CovariateSample")
            .require_isotropic("CovariateSample")
            .require_softmax("CovariateSample")
        )
        chunk_sizes(1, 8 * (8 * self.setting.L + 8), setting=self.setting)  # refuses an L beyond the budget
        self.seed = check_nonnegative_int("seed", seed)
        L = self.setting.L
        B = max(1, min(4096, 2**20 // L)) if block_size is None else check_positive_int("block_size", block_size)
        self.block_size = min(B, self.n)
        self._cache = None
        if self.n * L <= _CACHE_FLOATS:
            self._cache = list(self._draw())

    def __repr__(self) -> str:
        return f"CovariateSample(n_prompts={self.n}, {self.setting!r}, seed={self.seed}, block_size={self.block_size})"

    def _draw(self):
        B, s = self.block_size, self.setting
        for i in range(-(-self.n // B)):
            m = min(B, self.n - i * B)
            rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(self.seed, spawn_key=(i,))))
            yield sample_prompts(m, s, seed=rng, stats_only=True, covariates_only=True)

    def __iter__(self):
        return iter(self._cache) if self._cache is not None else self._draw()


def _check_sample(sample) -> CovariateSample:
    if not isinstance(sample, CovariateSample):
        raise ValueError(f"`sample` must be a CovariateSample, got {type(sample).__name__}")
    return sample


def _softmax_rows(s, omega):
    z = s * omega
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def _per_prompt(batch: Prompts, omega, mu):
    r"""Conditional loss of the reduced model per prompt and its gradient in (ω, μ).

    With :math:`p_h = \mathrm{softmax}(\omega_h s)`, :math:`w = \sum_h \mu_h p_h`,
    :math:`\ell = (r^2 - w\cdot s)^2/(d r^2) + \sigma^2 + c|w|^2`, :math:`c = (d-1)/d + \sigma^2`,
    :math:`G = \partial\ell/\partial w = -2(r^2 - w\cdot s)s/(d r^2) + 2cw`:

    .. math:: \partial_{\mu_h}\ell = G\cdot p_h,\qquad
              \partial_{\omega_h}\ell = \mu_h\big[(G\odot p_h)\cdot s - (G\cdot p_h)(p_h\cdot s)\big].
    """
    s, r2, d, s2 = batch.scores, batch.xq_norm2, batch.setting.d, batch.setting.sigma2
    c = (d - 1) / d + s2
    P = [_softmax_rows(s, o) for o in omega]
    w = np.zeros_like(s)
    for m, p in zip(mu, P):
        w += m * p
    resid = r2 - np.einsum("nl,nl->n", w, s)
    loss = resid**2 / (d * r2) + s2 + c * np.einsum("nl,nl->n", w, w)
    G = (-2.0 * resid / (d * r2))[:, None] * s
    G += 2.0 * c * w
    gw = np.empty((s.shape[0], len(omega)))
    gm = np.empty_like(gw)
    for h, (m, p) in enumerate(zip(mu, P)):
        Gp = np.einsum("nl,nl->n", G, p)
        gm[:, h] = Gp
        gw[:, h] = m * (np.einsum("nl,nl,nl->n", G, p, s) - Gp * np.einsum("nl,nl->n", p, s))
    return loss, gw, gm


@dataclass(frozen=True)
class RiskAndGrad(FrozenResult):
    r"""Monte Carlo risk of the reduced model on a fixed sample and its exact gradient (:func:`mc_risk_and_grad`).

    Attributes
    ----------
    risk : float
        Mean per-prompt (Rao–Blackwellised) loss over the sample.
    stderr : float
        Standard error of ``risk`` (``ddof = 1``).
    grad_omega, grad_mu : ndarray, shape (H,)
        Exact gradient of ``risk`` in ω and μ.
    n : int
        Prompts in the sample.
    """

    risk: float
    stderr: float
    grad_omega: np.ndarray
    grad_mu: np.ndarray
    n: int


def mc_risk_and_grad(omega, mu, sample: CovariateSample) -> RiskAndGrad:
    r"""Rao–Blackwellised Monte Carlo risk of the reduced model and its exact gradient on ``sample``.

    The per-prompt loss is :func:`reduced_dynamics.estimation.predictors.conditional_loss`
    of the weights ``reduced_dynamics.estimation.predictors.multi_head_weights``; its
    mean over a fixed sample is a smooth function of (ω, μ), an unbiased
    estimate of the true risk :math:`\mathcal E(\omega,\mu)`, and its gradient
    (formula in ``_per_prompt``) an unbiased estimate of :math:`\nabla\mathcal E`.

    Parameters
    ----------
    omega, mu : array_like, shape (H,)
    sample : CovariateSample

    Returns
    -------
    RiskAndGrad

    Examples
    --------
    >>> S = CovariateSample(500, Setting(d=3, L=10, sigma2=0.1), seed=0)
    >>> r = mc_risk_and_grad([0.3, -0.3], [1.0, -1.0], S)
    >>> r.grad_omega.shape, r.n
    ((2,), 500)
    """
    _check_sample(sample)
    omega, mu = check_heads_pair(omega, mu)
    if omega.ndim != 1:
        raise ValueError(f"`omega` must have shape (H,), got {omega.shape}")
    tot, run_mean, M2, n = 0.0, 0.0, 0.0, 0
    gw = np.zeros(omega.size)
    gm = np.zeros(omega.size)
    for b in sample:
        with np.errstate(over="ignore", invalid="ignore"):
            l, a, m = _per_prompt(b, omega.tolist(), mu.tolist())
        if not (np.all(np.isfinite(l)) and np.all(np.isfinite(a)) and np.all(np.isfinite(m))):
            raise ValueError("`omega`, `mu` are too large: the risk or its gradient overflows on this sample")
        tot += l.sum()
        # variance: per-block centred sums of squares merged in block order (Chan et al.),
        # free of the cancellation of E[l²] − E[l]²
        nb = l.size
        bmean = float(l.mean())
        bM2 = float(np.sum((l - bmean) ** 2))
        delta = bmean - run_mean
        run_mean += delta * nb / (n + nb)
        M2 += bM2 + delta * delta * n * nb / (n + nb)
        n += nb
        gw += a.sum(0)
        gm += m.sum(0)
    var = M2 / (n - 1)
    return RiskAndGrad(risk=float(tot / n), stderr=math.sqrt(var / n), grad_omega=gw / n, grad_mu=gm / n, n=n)


def mc_flow(omega0, mu0, times, sample: CovariateSample, *, omega_rate=1.0, rtol=1e-6, atol=1e-9):
    """Gradient flow of the Monte Carlo (true) risk on a fixed sample, at ``times``.

    :math:`\\dot\\omega = -r\\nabla_\\omega\\hat{\\mathcal E}_n,\\ \\dot\\mu = -\\nabla_\\mu\\hat{\\mathcal E}_n`
    with :func:`mc_risk_and_grad` (explicit RK45: the window is short and not stiff).

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
        Initial state.
    times : array_like, shape (T,)
        Non-decreasing output times, ``times[0] >= 0``; the flow starts at 0.
    sample : CovariateSample
        The fixed covariates (common random numbers, so the right-hand side is smooth).
    omega_rate : float, > 0
        The rate ``r`` of ω relative to μ.
    rtol, atol : float, > 0

    Returns
    -------
    Flow
        ``t`` (the requested times), ``omega`` and ``mu`` of shape (T, H).

    Raises
    ------
    RuntimeError
        The integration did not reach the last time.

    References
    ----------
    docs/theory.md#gradient-flow
    """
    model = SampleRiskModel(sample, np.size(omega0))
    return rated_flow(
        model, omega0, mu0, times, method="RK45", rtol=rtol, atol=atol, omega_rate=omega_rate, what="MC flow"
    )


def rated_flow(model, omega0, mu0, times, *, method, rtol, atol, omega_rate, what="flow"):
    """The comparison flows' one call: ``integrate`` of a scalar-heads model at ``times`` with ω at ``omega_rate``.

    No stationarity stop (the flows are compared at the given times); ``RuntimeError`` naming ``what`` when it
    does not reach the last time.
    """
    from reduced_dynamics.flow import integrate

    omega0 = check_finite_array("omega0", omega0, ndim=1)
    mu0 = check_finite_array("mu0", mu0, ndim=1)
    if mu0.shape != omega0.shape:
        raise ValueError(f"`mu0` must have the shape of `omega0` {omega0.shape}, got {mu0.shape}")
    omega_rate = check_positive_float("omega_rate", omega_rate)
    if not 1e-6 <= omega_rate <= 1e6:  # the engine's range of `rates`
        raise ValueError(f"`omega_rate` must be a number in [1e-06, 1e+06], got {omega_rate!r}")
    if times is None:
        raise ValueError("`times` must be given: the output times of the flow (non-negative, increasing)")
    flow = integrate(
        model,
        model.state(omega0, mu0),
        times=times,
        method=method,
        rtol=rtol,
        atol=atol,
        stationarity_tol=0.0,
        rates={"omega": omega_rate},
    )
    if not flow.success:
        raise RuntimeError(f"{what} integration failed: {flow.message}")
    return flow


class SampleRiskModel(ScalarHeadsModel):
    """The Rao–Blackwellised Monte Carlo risk on a fixed covariate sample, as a reduced model.

    ``loss``/``grad`` are :func:`mc_risk_and_grad` on ``sample``: a smooth, unbiased estimate of the
    exact risk of the reduced model (common random numbers). A cross-check objective built from a
    sample, not from a :class:`~reduced_dynamics.Setting` alone, so it is not in the registry of
    :func:`reduced_dynamics.reduced_model`.

    Parameters
    ----------
    sample : CovariateSample
    n_heads : int, in [1, 1000]
    """

    name = "sample_risk"
    objective = "exact"
    domain_text = "the Monte Carlo risk is not finite there."

    def __init__(self, sample: CovariateSample, n_heads: int):
        self.sample = _check_sample(sample)
        super().__init__(sample.setting, n_heads)

    def _layout_key(self):
        return (("sample", id(self.sample)),)

    def _each(self, y, fn):
        from reduced_dynamics.models._each import each_state

        return each_state(y, fn)

    def loss(self, y):
        out = self._each(y, lambda v: mc_risk_and_grad(*self.split(v), self.sample).risk)
        return float(out) if np.ndim(out) == 0 else out

    def grad(self, y):
        def one(v):
            r = mc_risk_and_grad(*self.split(v), self.sample)
            return np.concatenate([r.grad_omega, r.grad_mu])

        return self._each(y, one)

    def margin(self, y):
        y = np.asarray(y, dtype=np.float64)
        out = np.where(np.all(np.isfinite(y), axis=-1), 1.0, -1.0)
        return float(out) if np.ndim(out) == 0 else out
