r"""Cross-checks of trained attention against the reduced theory (docs/theory.md#reduced-model, docs/theory.md#gradient-flow).

Two questions are answered here by computation.

**1. Does SGD follow the reduced gradient flow?** (:func:`sgd_vs_flow`)

Plain SGD, ``θ ← θ − lr·∇ℓ_batch(θ)`` with fresh prompts every step, is a
stochastic Euler scheme for ``θ̇ = −∇_θ E(θ)`` (``E`` the *true* risk, since
``E[∇ℓ_batch] = ∇E``) in the time ``t = lr × steps``; the noise of one step has
covariance ``lr² Var(∇ℓ)/batch`` and vanishes as ``lr → 0`` at fixed ``t``.
How the extracted ``(ω, μ)`` then move depends on the parameterisation:

``reduced``
    The parameters *are* ``(ω, μ)``:
    :math:`\dot\omega = -\nabla_\omega E,\ \dot\mu = -\nabla_\mu E`, the flow of
    the true risk, whose large-L approximation is L̃. One-to-one, ``t = lr·steps``.
``merged``
    ``ω_h`` is the mean of the ``d`` diagonal entries of ``KQ_h[:d, :d]`` and
    ``μ_h = ov_h[d]``. On the pattern (``KQ_h = ω_h diag(I_d, 0)``, ``ov_h = μ_h
    e_{d+1}``) the reflections ``x_i → −x_i`` and ``(x, β) → (−x, −β)`` and the
    permutations of the ``d`` coordinates leave the risk and the pattern state
    invariant, so the expected gradient lies in the pattern subspace
    (reflections: off-diagonal, response-row and ``ov[:d]`` gradients vanish;
    permutations: all ``d`` diagonal gradients are equal), each :math:`\tfrac1d
    \partial_{\omega_h}E` (chain rule: :math:`\partial_{\omega_h}E = \sum_i
    \partial E/\partial KQ_h[i,i]`). The mean of the diagonal therefore moves by
    :math:`-\mathrm{lr}\,\tfrac1d\,\partial_{\omega_h}E` per step while ``μ_h``
    moves by :math:`-\mathrm{lr}\,\partial_{\mu_h}E`: a **preconditioned** flow

    .. math:: \dot\omega = -\tfrac1d \nabla_\omega E,\qquad \dot\mu = -\nabla_\mu E,
              \qquad t = \mathrm{lr}\times\mathrm{steps},

    (equivalently the plain gradient flow in ``(√d ω, μ)``). No single rescaling
    of time maps it to the plain flow of L̃, since ω and μ are coupled; the
    invariant subspace makes it exact in expectation while the state stays on
    the pattern. ``omega_rate = 1/d`` below.
``separate``
    ``KQ = KᵀQ/√D``, ``ov = Vᵀo``: gradient flow on the factors gives
    :math:`\dot{KQ} = -(K^\top K\,G + G\,Q^\top Q)/D` (``G = ∂E/∂KQ``; from
    ``∂E/∂K = Q Gᵀ/√D``, ``∂E/∂Q = K G/√D``), whose rate depends on ``KᵀK``
    and ``QᵀQ`` themselves, not only on ``KQ``; the
    extracted ``(ω, μ)`` then obey no autonomous ODE unless the factors are
    balanced and isotropic. Not supported by :func:`sgd_vs_flow`.

**2. Where is the single head's true optimum?** (:func:`single_head_mc_optimum`)

L̃ is a large-L approximation; the single head's risk is quadratic in μ,

.. math:: E(\omega,\mu) = 1+\sigma^2 - 2\mu A(\omega) + \mu^2 B(\omega),\quad
          A = E\big[\tfrac{p\cdot s}{d}\big],\quad
          B = E\Big[\tfrac{(p\cdot s)^2}{d|x_q|^2} + \big(\tfrac{d-1}{d}+\sigma^2\big)|p|^2\Big],

with ``p = softmax(ω s)`` (the Rao–Blackwellised loss of
:func:`reduced_dynamics.estimation.predictors.conditional_loss`), so ``μ*(ω) = A/B`` and
``E = 1 + σ² − A²/B``: a one-dimensional problem in ω, solved on a fixed seeded
sample of covariates (common random numbers make it smooth in ω).

References
----------
docs/theory.md#reduced-model (reduced model, L̃), #gradient-flow (flow; H = 1 optimum).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize_scalar

from reduced_dynamics._validation import (
    check_finite_array,
    check_heads_pair,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
    check_problem,
)
from reduced_dynamics.dynamics.flow import flow_at_times
from reduced_dynamics.dynamics.loss import approx_loss_grad, approx_loss_hessian
from reduced_dynamics.estimation.predictors import (
    PromptStats,
    sample_prompt_stats,
)
from reduced_dynamics.model.circuits import circuits_from_arrays

__all__ = [
    "FLOW_PARAMS",
    "sgd_omega_rate",
    "preconditioned_flow",
    "SgdFlowComparison",
    "sgd_vs_flow",
    "trajectory_discrepancy",
    "CovariateSample",
    "covariate_blocks",
    "mc_risk_and_grad",
    "mc_flow",
    "SingleHeadOptimum",
    "single_head_profile",
    "single_head_mc_optimum",
]

#: Parameterisations whose extracted (ω, μ) follow an autonomous reduced flow under SGD.
FLOW_PARAMS = ("reduced", "merged")


def sgd_omega_rate(param: str, d: int) -> float:
    """Rate of ω relative to μ under SGD in parameterisation ``param`` (module docstring).

    ``reduced``: 1; ``merged``: ``1/d``.
    """
    d = check_positive_int("d", d)
    if param == "reduced":
        return 1.0
    if param == "merged":
        return 1.0 / d
    raise ValueError(f"`param` must be one of {', '.join(FLOW_PARAMS)}, got {param!r}")


# ------------------------------------------------------------------ the flow
def preconditioned_flow(omega0, mu0, times, *, d, L, sigma2, omega_rate=1.0, rtol=1e-9, atol=1e-12):
    r"""Integrate :math:`\dot\omega = -r\nabla_\omega\tilde L,\ \dot\mu = -\nabla_\mu\tilde L` at ``times``.

    With ``omega_rate`` ``r = 1`` this is the gradient flow of L̃ of
    :func:`reduced_dynamics.dynamics.flow.integrate_flow` (Radau with the analytic
    Jacobian ``−P·Hessian``, ``P = diag(r·1_H, 1_H)``).

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
    times : array_like, shape (T,)
        Non-decreasing output times, ``times[0] >= 0``; the flow starts at 0.
    d, L, sigma2 : problem constants
    omega_rate : float, > 0
    rtol, atol : float, > 0

    Returns
    -------
    omega, mu : ndarray, shape (T, H)
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    kw = dict(d=d, L=L, sigma2=sigma2)
    return flow_at_times(
        lambda w, m: approx_loss_grad(w, m, **kw),
        omega0,
        mu0,
        times,
        hessian=lambda w, m: approx_loss_hessian(w, m, **kw),
        omega_rate=omega_rate,
        method="Radau",
        rtol=rtol,
        atol=atol,
    )


def trajectory_discrepancy(omega_a, mu_a, omega_b, mu_b, *, omega_ref=None, mu_ref=None) -> dict:
    r"""Discrepancy between two (ω, μ) trajectories ``a`` (measured) and ``b`` (reference).

    All relative differences are divided by the reference's value (per time):

    * ``gamma``: γ = mean_h |ω_h| (all heads), ``|γ_a − γ_b| / γ_b``;
    * ``eta``: η_eff = μᵀω, ``|η_a − η_b| / |η_b|``;
    * ``omega``, ``mu``: per head, ``|ω_a − ω_b| / |ω_b|`` (shape (H,));
    * ``unexplained``: ``max_t ‖θ_a − θ_b‖ / max_t ‖θ_b(t) − θ_b(0)‖`` — the part of
      the reference's motion over the window that ``a`` does not reproduce
      (θ = (ω, μ)); 0 for a perfect match, ~1 if ``a`` did not move. Computed
      against ``(omega_ref, mu_ref)`` (default: ``b``) for the motion.

    Returns
    -------
    dict
        ``{name}_max`` (max over times) and ``{name}_final`` (last time) for
        ``gamma, eta`` (floats) and ``omega, mu`` (lists over heads), plus
        ``unexplained`` and ``motion`` (the denominator).
    """
    wa, ma, wb, mb = (np.atleast_2d(np.asarray(a, dtype=np.float64)) for a in (omega_a, mu_a, omega_b, mu_b))
    if not (wa.shape == ma.shape == wb.shape == mb.shape):
        raise ValueError(
            f"trajectories must have equal shapes (T, H), got {wa.shape}, {ma.shape}, {wb.shape}, {mb.shape}"
        )
    wr = wb if omega_ref is None else np.atleast_2d(omega_ref)
    mr = mb if mu_ref is None else np.atleast_2d(mu_ref)
    ga, gb = np.abs(wa).mean(1), np.abs(wb).mean(1)
    ea, eb = np.sum(wa * ma, 1), np.sum(wb * mb, 1)
    rel = {
        "gamma": np.abs(ga - gb) / gb,
        "eta": np.abs(ea - eb) / np.abs(eb),
        "omega": np.abs(wa - wb) / np.abs(wb),
        "mu": np.abs(ma - mb) / np.abs(mb),
    }
    out = {}
    for k, v in rel.items():
        mx, fi = v.max(axis=0), v[-1]
        out[k + "_max"] = mx.tolist() if np.ndim(mx) else float(mx)
        out[k + "_final"] = fi.tolist() if np.ndim(fi) else float(fi)
    dev = np.sqrt(np.sum((wa - wb) ** 2 + (ma - mb) ** 2, axis=1))
    motion = np.sqrt(np.sum((wr - wr[0]) ** 2 + (mr - mr[0]) ** 2, axis=1)).max()
    out["motion"] = float(motion)
    out["unexplained"] = float(dev.max() / motion) if motion > 0 else math.inf
    return out


@dataclass(frozen=True)
class SgdFlowComparison:
    """Outcome of :func:`sgd_vs_flow`.

    Attributes
    ----------
    steps : ndarray of int, shape (T,)
        SGD steps of the records (0 = start of the SGD window).
    t : ndarray, shape (T,)
        Flow time ``lr × steps × time_scale``.
    omega_sgd, mu_sgd : ndarray, shape (T, H)
        Extracted (ω, μ) along SGD.
    omega_flow, mu_flow : ndarray, shape (T, H)
        The reduced flow of L̃ (``omega_rate``-preconditioned) from the extracted start.
    discrepancy : dict
        :func:`trajectory_discrepancy` of SGD vs flow.
    reference : str
        ``"approx"`` (flow of L̃) or ``"mc"`` (flow of the MC risk).
    param : str
    omega_rate, time_scale, lr : float
    d, L, sigma2, batch, warmup_steps : problem and protocol
    gamma_sgd, gamma_flow, eta_sgd, eta_flow : ndarray, shape (T,)
    seconds : float
    """

    steps: np.ndarray = field(repr=False)
    t: np.ndarray = field(repr=False)
    omega_sgd: np.ndarray = field(repr=False)
    mu_sgd: np.ndarray = field(repr=False)
    omega_flow: np.ndarray = field(repr=False)
    mu_flow: np.ndarray = field(repr=False)
    discrepancy: dict
    reference: str
    param: str
    omega_rate: float
    time_scale: float
    lr: float
    d: int
    L: int
    sigma2: float
    batch: int
    warmup_steps: int
    seconds: float

    @property
    def gamma_sgd(self):
        return np.abs(self.omega_sgd).mean(1)

    @property
    def gamma_flow(self):
        return np.abs(self.omega_flow).mean(1)

    @property
    def eta_sgd(self):
        return np.sum(self.omega_sgd * self.mu_sgd, 1)

    @property
    def eta_flow(self):
        return np.sum(self.omega_flow * self.mu_flow, 1)

    def summary(self) -> dict:
        """JSON-ready numbers (start/end states and the discrepancy)."""
        return {
            "param": self.param,
            "reference": self.reference,
            "d": self.d,
            "L": self.L,
            "sigma2": self.sigma2,
            "lr": self.lr,
            "batch": self.batch,
            "warmup_steps": self.warmup_steps,
            "sgd_steps": int(self.steps[-1]),
            "t_end": float(self.t[-1]),
            "omega_rate": self.omega_rate,
            "time_scale": self.time_scale,
            "omega_start": self.omega_sgd[0].tolist(),
            "mu_start": self.mu_sgd[0].tolist(),
            "omega_sgd_end": self.omega_sgd[-1].tolist(),
            "mu_sgd_end": self.mu_sgd[-1].tolist(),
            "omega_flow_end": self.omega_flow[-1].tolist(),
            "mu_flow_end": self.mu_flow[-1].tolist(),
            "discrepancy": self.discrepancy,
            "seconds": self.seconds,
        }


def sgd_vs_flow(
    *,
    n_heads=2,
    d=5,
    L=40,
    sigma2=0.1,
    param="reduced",
    lr=1e-2,
    sgd_steps=5000,
    batch=256,
    warmup_steps=500,
    warmup_lr=1e-2,
    seed=0,
    n_records=40,
    time_scale=1.0,
    flow_L=None,
    init_scale=0.1,
    init_params=None,
    omega_rate=None,
    reference="approx",
    mc_n=20_000,
    mc_seed=12345,
) -> SgdFlowComparison:
    r"""Train with plain SGD and compare the extracted (ω, μ) with the reduced flow of L̃.

    Protocol: ``warmup_steps`` Adam steps (lr ``warmup_lr``) from the seeded init
    so that the patterns form (skipped when ``init_params`` is given or
    ``warmup_steps == 0``); then ``sgd_steps`` plain-SGD steps at ``lr`` with
    fresh prompts, the circuits recorded at about ``n_records`` log-spaced
    steps. The reference is :func:`preconditioned_flow` from the (ω, μ)
    extracted at the start of the SGD window, with ``omega_rate``
    (:func:`sgd_omega_rate`, unless given) and time ``t = time_scale × lr × steps``
    (``time_scale = 1`` is the derived correspondence; other values are for
    negative controls).

    Parameters
    ----------
    n_heads, d, L : int, >= 1
    sigma2 : float, >= 0
    param : {"reduced", "merged"}
    lr : float, > 0
        SGD learning rate.
    sgd_steps : int, >= 1
    batch : int, >= 1
    warmup_steps : int, >= 0
    warmup_lr : float, > 0
    seed : int, >= 0
        Seeds the init and both prompt streams (warm-up: ``seed``; SGD: ``seed + 1``).
    n_records : int, >= 2
    time_scale : float, > 0
    flow_L : int, optional
        ``L`` of the reference L̃ (default ``L``); for testing the approximation.
    init_scale : float, >= 0
        Init scale of the reduced model.
    init_params : dict, optional
        Start the SGD window from these parameters.
    omega_rate : float, optional
        Override the derived rate of ω (negative controls only).
    reference : {"approx", "mc"}
        ``"approx"``: the flow of L̃ (:func:`preconditioned_flow`); ``"mc"``: the
        flow of the Rao–Blackwellised Monte Carlo risk on a fixed sample of
        ``mc_n`` prompts seeded by ``mc_seed`` (:func:`mc_flow`), i.e. the true
        risk up to Monte Carlo error — isolates the SGD ↔ flow correspondence
        from the L̃ approximation.
    mc_n : int, >= 2
    mc_seed : int, >= 0

    Returns
    -------
    SgdFlowComparison

    Examples
    --------
    >>> r = sgd_vs_flow(d=3, L=20, lr=1e-2, sgd_steps=50, warmup_steps=50, batch=32, n_records=5)
    >>> sorted(r.discrepancy)[:2]
    ['eta_final', 'eta_max']
    """
    from reduced_dynamics.model.training import TrainConfig, train

    t0 = time.perf_counter()
    n_heads = check_positive_int("n_heads", n_heads)
    d, L, sigma2 = check_problem(d, L, sigma2)
    rate = sgd_omega_rate(param, d)  # validates `param` (only the parameterisations with a reduced flow)
    if omega_rate is not None:
        rate = check_positive_float("omega_rate", omega_rate)
    lr = check_positive_float("lr", lr)
    warmup_lr = check_positive_float("warmup_lr", warmup_lr)
    sgd_steps = check_positive_int("sgd_steps", sgd_steps)
    warmup_steps = check_nonnegative_int("warmup_steps", warmup_steps)
    n_records = check_positive_int("n_records", n_records)
    if n_records < 2:
        raise ValueError(f"`n_records` must be an integer >= 2, got {n_records}")
    time_scale = check_positive_float("time_scale", time_scale)
    flow_L = L if flow_L is None else check_positive_int("flow_L", flow_L)
    seed = check_nonnegative_int("seed", seed)
    if reference not in ("approx", "mc"):
        raise ValueError(f"`reference` must be one of 'approx', 'mc', got {reference!r}")
    if reference == "mc":
        mc_n = check_positive_int("mc_n", mc_n)
        if mc_n < 2:
            raise ValueError(f"`mc_n` must be an integer >= 2, got {mc_n}")
        mc_seed = check_nonnegative_int("mc_seed", mc_seed)
    common = dict(n_heads=n_heads, d=d, L=L, sigma2=sigma2, batch=batch, param=param, init_scale=init_scale)
    params = init_params
    if params is None and warmup_steps > 0:
        warm = train(
            TrainConfig(steps=warmup_steps, lr=warmup_lr, optimizer="adam", seed=seed, n_snapshots=2, **common)
        )
        if not warm.success:
            raise RuntimeError(f"warm-up failed: {warm.message}")
        params = warm.params
    cfg = TrainConfig(steps=sgd_steps, lr=lr, optimizer="sgd", seed=seed + 1, n_snapshots=n_records, **common)
    if params is None:
        params = cfg.model().init(np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0]))
    res = train(cfg, init_params=params)
    if not res.success:
        raise RuntimeError(f"SGD failed: {res.message}")
    circ = [circuits_from_arrays(KQ, ov) for KQ, ov in zip(res.snapshot_KQ, res.snapshot_ov)]
    om = np.array([c.omega for c in circ])
    mu = np.array([c.mu for c in circ])
    steps = res.snapshot_steps
    t = time_scale * lr * steps.astype(float)
    if reference == "approx":
        of, mf = preconditioned_flow(om[0], mu[0], t, d=d, L=flow_L, sigma2=sigma2, omega_rate=rate)
    else:
        sample = CovariateSample(mc_n, d=d, L=flow_L, sigma2=sigma2, seed=mc_seed)
        of, mf = mc_flow(sample, om[0], mu[0], t, omega_rate=rate)
    disc = trajectory_discrepancy(om, mu, of, mf)
    return SgdFlowComparison(
        steps=steps,
        t=t,
        omega_sgd=om,
        mu_sgd=mu,
        omega_flow=of,
        mu_flow=mf,
        discrepancy=disc,
        reference=reference,
        param=param,
        omega_rate=rate,
        time_scale=time_scale,
        lr=lr,
        d=d,
        L=L,
        sigma2=sigma2,
        batch=cfg.batch,
        warmup_steps=warmup_steps if init_params is None else 0,
        seconds=time.perf_counter() - t0,
    )


# ------------------------------------------------ Monte Carlo risk (Rao–Blackwellised)
_CACHE_FLOATS = 2 * 10**7  # cache the covariates when n·L is at most this (160 MB)


class CovariateSample:
    """A fixed, seeded sample of ``n`` isotropic prompts' covariates (``s``, ``|x_q|²``).

    Block ``i`` (``block_size`` prompts) is drawn by
    :func:`reduced_dynamics.estimation.predictors.sample_prompt_stats` with
    ``covariates_only=True`` from ``Generator(SFC64(SeedSequence(seed, spawn_key=(i,))))``,
    so the sample is a deterministic function of ``(n, d, L, sigma2, seed)``.
    Iterating yields the blocks as :class:`~reduced_dynamics.estimation.predictors.PromptStats`
    (cached in memory when ``n·L <= 2·10⁷``, otherwise re-drawn on every pass).
    Used as common random numbers: every objective evaluated on the same sample
    is a smooth function of the parameters.
    """

    def __init__(self, n, *, d, L, sigma2, seed, block_size=None):
        self.n = check_positive_int("n", n)
        self.d, self.L, self.sigma2 = check_problem(d, L, sigma2)
        self.seed = check_nonnegative_int("seed", seed)
        B = max(1, min(4096, 2**20 // self.L)) if block_size is None else check_positive_int("block_size", block_size)
        self.block_size = min(B, self.n)
        self._cache = None
        if self.n * self.L <= _CACHE_FLOATS:
            self._cache = list(self._draw())

    def _draw(self):
        B = self.block_size
        for i in range(-(-self.n // B)):
            m = min(B, self.n - i * B)
            rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence(self.seed, spawn_key=(i,))))
            yield sample_prompt_stats(m, d=self.d, L=self.L, sigma2=self.sigma2, seed=rng, covariates_only=True)

    def __iter__(self):
        return iter(self._cache) if self._cache is not None else self._draw()


def covariate_blocks(n, *, d, L, sigma2, seed, block_size=None) -> CovariateSample:
    """A :class:`CovariateSample` (fixed seeded covariates for common random numbers)."""
    return CovariateSample(n, d=d, L=L, sigma2=sigma2, seed=seed, block_size=block_size)


def _softmax_rows(s, omega):
    z = s * omega
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def _per_prompt(batch: PromptStats, omega, mu):
    r"""Conditional loss of the reduced model per prompt and its gradient in (ω, μ).

    With :math:`p_h = \mathrm{softmax}(\omega_h s)`, :math:`w = \sum_h \mu_h p_h`,
    :math:`\ell = (r^2 - w\cdot s)^2/(d r^2) + \sigma^2 + c|w|^2`, :math:`c = (d-1)/d + \sigma^2`,
    :math:`G = \partial\ell/\partial w = -2(r^2 - w\cdot s)s/(d r^2) + 2cw`:

    .. math:: \partial_{\mu_h}\ell = G\cdot p_h,\qquad
              \partial_{\omega_h}\ell = \mu_h\big[(G\odot p_h)\cdot s - (G\cdot p_h)(p_h\cdot s)\big].
    """
    s, r2, d, s2 = batch.s, batch.xq_norm2, batch.d, batch.sigma2
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


def mc_risk_and_grad(sample: CovariateSample, omega, mu) -> tuple[float, np.ndarray, np.ndarray, float]:
    r"""Rao–Blackwellised Monte Carlo risk of the reduced model and its exact gradient on ``sample``.

    The per-prompt loss is :func:`reduced_dynamics.estimation.predictors.conditional_loss`
    of the weights :func:`~reduced_dynamics.estimation.predictors.multi_head_weights`; its
    mean over a fixed sample is a smooth function of (ω, μ), an unbiased
    estimate of the true risk :math:`\mathcal E(\omega,\mu)`, and its gradient
    (formula in ``_per_prompt``) an unbiased estimate of :math:`\nabla\mathcal E`.

    Parameters
    ----------
    sample : CovariateSample
    omega, mu : array_like, shape (H,)

    Returns
    -------
    risk : float
    grad_omega, grad_mu : ndarray, shape (H,)
    stderr : float
        Standard error of ``risk`` (``ddof = 1``; NaN for a one-prompt sample).
    """
    if not isinstance(sample, CovariateSample):
        raise ValueError(f"`sample` must be a CovariateSample, got {type(sample).__name__}")
    omega, mu = check_heads_pair(omega, mu)
    if omega.ndim != 1:
        raise ValueError(f"`omega` must have shape (H,), got {omega.shape}")
    tot, run_mean, M2, n = 0.0, 0.0, 0.0, 0
    gw = np.zeros(omega.size)
    gm = np.zeros(omega.size)
    for b in sample:
        l, a, m = _per_prompt(b, omega.tolist(), mu.tolist())
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
    var = M2 / (n - 1) if n > 1 else math.nan
    return float(tot / n), gw / n, gm / n, math.sqrt(var / n)


def mc_flow(sample: CovariateSample, omega0, mu0, times, *, omega_rate=1.0, rtol=1e-6, atol=1e-9):
    r"""Gradient flow of the Monte Carlo (true) risk on a fixed sample, at ``times``.

    :math:`\dot\omega = -r\nabla_\omega\hat{\mathcal E}_n,\ \dot\mu = -\nabla_\mu\hat{\mathcal E}_n`
    with :func:`mc_risk_and_grad` (explicit RK45: the window is short and not stiff).

    Parameters
    ----------
    sample : CovariateSample
        The fixed covariates (common random numbers, so the right-hand side is smooth).
    omega0, mu0 : array_like, shape (H,)
    times : array_like, shape (T,)
        Non-decreasing output times, ``times[0] >= 0``; the flow starts at 0.
    omega_rate : float, > 0
    rtol, atol : float, > 0

    Returns
    -------
    omega, mu : ndarray, shape (T, H)
    """

    def grad(w, m):
        _, gw, gm, _ = mc_risk_and_grad(sample, w, m)
        return gw, gm

    return flow_at_times(
        grad, omega0, mu0, times, omega_rate=omega_rate, method="RK45", rtol=rtol, atol=atol, what="MC flow"
    )


# ------------------------------------------------------------- single head
def single_head_profile(sample: CovariateSample, omega) -> tuple[float, float]:
    r"""``(A(ω), B(ω))`` of the single head's risk :math:`1+\sigma^2-2\mu A+\mu^2 B` on ``sample``.

    .. math:: A = \overline{p\cdot s}/d,\qquad
              B = \overline{(p\cdot s)^2/(d|x_q|^2) + ((d-1)/d+\sigma^2)|p|^2},\qquad p = \mathrm{softmax}(\omega s).

    Parameters
    ----------
    sample : CovariateSample
    omega : float

    Returns
    -------
    A, B : float
        Sample averages over the ``n`` prompts of ``sample``.
    """
    if not isinstance(sample, CovariateSample):
        raise ValueError(f"`sample` must be a CovariateSample, got {type(sample).__name__}")
    omega = float(check_finite_array("omega", [omega], ndim=1)[0])
    d, s2 = sample.d, sample.sigma2
    c = (d - 1) / d + s2
    A = B = 0.0
    n = 0
    for b in sample:
        p = _softmax_rows(b.s, omega)
        ps = np.einsum("nl,nl->n", p, b.s)
        A += ps.sum() / d
        B += (ps * ps / (d * b.xq_norm2)).sum() + c * np.einsum("nl,nl->", p, p)
        n += ps.size
    return A / n, B / n


@dataclass(frozen=True)
class SingleHeadOptimum:
    """Minimiser of the single head's Monte Carlo risk (positive branch) and the L̃ landmarks.

    Attributes
    ----------
    omega, mu : float
        MC minimiser (``μ = A/B`` at ``ω``).
    omega_stderr : float
        Delta-method standard error of ``omega`` from the sampling noise of the
        risk gradient (``sd(∂ℓ/∂ω)/√n`` divided by the profile curvature).
    risk, risk_stderr : float
        MC risk at the minimiser.
    omega_approx, mu_approx, risk_approx_point : float
        L̃'s minimiser ``(1/√d, √d/(1 + (1+σ²)(d/L)e))`` and the MC risk there
        (same sample).
    gain, gain_stderr : float
        ``risk_approx_point − risk`` and its paired standard error.
    d, L, sigma2, n, seed : problem and sample.
    """

    omega: float
    mu: float
    omega_stderr: float
    risk: float
    risk_stderr: float
    omega_approx: float
    mu_approx: float
    risk_approx_point: float
    gain: float
    gain_stderr: float
    d: int
    L: int
    sigma2: float
    n: int
    seed: int


def single_head_mc_optimum(*, d, L, sigma2, n=200_000, seed=0, bracket=None, xatol=1e-6) -> SingleHeadOptimum:
    r"""Minimise the Monte Carlo risk of the single head over (ω, μ), on common random numbers.

    μ is profiled out exactly (:func:`single_head_profile`: ``μ*(ω) = A/B``,
    risk ``1 + σ² − A²/B``), and ``ω > 0`` is found by bounded Brent
    minimisation on one fixed :class:`CovariateSample` (so the objective is
    smooth in ω). The negative branch is ``(−ω, −μ)``.

    Parameters
    ----------
    d, L : int, >= 1
    sigma2 : float, >= 0
    n : int, >= 2
        Prompts in the sample.
    seed : int, >= 0
    bracket : (float, float), optional
        Search interval for ω (default ``(0.2, 2)/√d``).
    xatol : float, > 0
        Absolute tolerance on ω.

    Returns
    -------
    SingleHeadOptimum

    Examples
    --------
    >>> r = single_head_mc_optimum(d=5, L=40, sigma2=0.1, n=4000, seed=0)
    >>> 0.3 < r.omega < 0.8
    True
    """
    from reduced_dynamics.dynamics.manifold import single_head_optimum

    d, L, sigma2 = check_problem(d, L, sigma2)
    n = check_positive_int("n", n)
    if n < 2:
        raise ValueError(f"`n` must be an integer >= 2, got {n}")
    xatol = check_positive_float("xatol", xatol)
    lo, hi = (0.2 / math.sqrt(d), 2.0 / math.sqrt(d)) if bracket is None else bracket
    lo, hi = check_positive_float("bracket[0]", lo), check_positive_float("bracket[1]", hi)
    if not lo < hi:
        raise ValueError(f"`bracket` must satisfy 0 < lo < hi, got ({lo}, {hi})")
    sample = CovariateSample(n, d=d, L=L, sigma2=sigma2, seed=seed)

    def prof(w):
        A, B = single_head_profile(sample, w)
        return 1.0 + sigma2 - A * A / B

    opt = minimize_scalar(prof, bounds=(lo, hi), method="bounded", options={"xatol": xatol})
    w = float(opt.x)
    if min(w - lo, hi - w) < 10 * xatol:
        raise RuntimeError(f"single-head MC optimum at the edge of `bracket` ({lo}, {hi}): ω = {w}; widen it")
    A, B = single_head_profile(sample, w)
    m = A / B
    # profile curvature by central differences on the same sample (smooth in ω)
    hstep = 1e-3 / math.sqrt(d)
    curv = (prof(w + hstep) - 2 * prof(w) + prof(w - hstep)) / hstep**2
    wa, ma, _ = single_head_optimum(d, L, sigma2)
    # per-prompt losses and ω-derivatives at the optimum and at L̃'s optimum (paired)
    l_opt, l_app, g_w = [], [], []
    for b in sample:
        l1, gw1, _ = _per_prompt(b, [w], [m])
        l2, _, _ = _per_prompt(b, [wa], [ma])
        l_opt.append(l1)
        l_app.append(l2)
        g_w.append(gw1[:, 0])
    l_opt, l_app, g_w = (np.concatenate(a) for a in (l_opt, l_app, g_w))
    rn = math.sqrt(l_opt.size)
    diff = l_app - l_opt
    return SingleHeadOptimum(
        omega=w,
        mu=float(m),
        omega_stderr=float(g_w.std(ddof=1) / rn / curv) if curv > 0 else math.inf,
        risk=float(l_opt.mean()),
        risk_stderr=float(l_opt.std(ddof=1) / rn),
        omega_approx=wa,
        mu_approx=ma,
        risk_approx_point=float(l_app.mean()),
        gain=float(diff.mean()),
        gain_stderr=float(diff.std(ddof=1) / rn),
        d=d,
        L=L,
        sigma2=sigma2,
        n=n,
        seed=sample.seed,
    )
