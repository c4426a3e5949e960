r"""Where is the single head's true optimum? Monte Carlo minimisation on common random numbers (docs/theory.md#single-head).

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
docs/theory.md#single-head (the H = 1 optimum of L̃), docs/theory.md#reduced-model (L̃).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_positive_float
from reduced_dynamics.crosscheck.monte_carlo import CovariateSample, _check_sample, _per_prompt, _softmax_rows
from reduced_dynamics.estimation.prompts import check_n_prompts
from reduced_dynamics.estimation.risk import _Moments
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["SingleHeadProfile", "single_head_profile", "SingleHeadMcOptimum", "single_head_mc_optimum"]


@dataclass(frozen=True)
class SingleHeadProfile(FrozenResult):
    r"""Coefficients of the single head's risk :math:`1+\sigma^2-2\mu A+\mu^2 B` at one ω (:func:`single_head_profile`).

    Attributes
    ----------
    omega : float
        The ω at which ``A`` and ``B`` are evaluated.
    A : float
        Sample average of :math:`p\cdot s/d`.
    B : float
        Sample average of :math:`(p\cdot s)^2/(d|x_q|^2) + ((d-1)/d+\sigma^2)|p|^2`.
    n : int
        Prompts in the sample.
    mu_opt : float
        Property: the minimising ``μ*(ω) = A/B``.
    """

    omega: float
    A: float
    B: float
    n: int

    @property
    def mu_opt(self) -> float:
        """``μ*(ω) = A/B``, the exact minimiser in μ at this ω."""
        return self.A / self.B


def single_head_profile(omega, sample: CovariateSample) -> SingleHeadProfile:
    r"""``A(ω)``, ``B(ω)`` of the single head's risk :math:`1+\sigma^2-2\mu A+\mu^2 B` on ``sample``.

    .. math:: A = \overline{p\cdot s}/d,\qquad
              B = \overline{(p\cdot s)^2/(d|x_q|^2) + ((d-1)/d+\sigma^2)|p|^2},\qquad p = \mathrm{softmax}(\omega s).

    Parameters
    ----------
    omega : float
    sample : CovariateSample

    Returns
    -------
    SingleHeadProfile
        Sample averages over the ``n`` prompts of ``sample``.
    """
    _check_sample(sample)
    omega = float(check_finite_array("omega", [omega], ndim=1)[0])
    d, s2 = sample.setting.d, sample.setting.sigma2
    c = (d - 1) / d + s2
    A = B = 0.0
    n = 0
    for b in sample:
        p = _softmax_rows(b.scores, omega)
        ps = np.einsum("nl,nl->n", p, b.scores)
        A += ps.sum() / d
        B += (ps * ps / (d * b.xq_norm2)).sum() + c * np.einsum("nl,nl->", p, p)
        n += ps.size
    return SingleHeadProfile(omega=omega, A=float(A / n), B=float(B / n), n=n)


@dataclass(frozen=True)
class SingleHeadMcOptimum(FrozenResult):
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
    omega_approx, mu_approx : float
        L̃'s minimiser ``(1/√d, √d/(1 + (1+σ²)(d/L)e))`` (:func:`reduced_dynamics.single_head_optimum`).
    risk_approx_point : float
        The MC risk at L̃'s minimiser (same sample).
    gain, gain_stderr : float
        ``risk_approx_point − risk`` and its paired standard error.
    setting : Setting
        The data model.
    n : int
        Prompts in the sample (the ``n_prompts`` of :func:`single_head_mc_optimum`).
    seed : int
        Seed of the sample.
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
    setting: Setting
    n: int
    seed: int


def single_head_mc_optimum(
    setting: Setting, *, n_prompts: int = 200_000, seed, bracket=None, xatol: float = 1e-6
) -> SingleHeadMcOptimum:
    r"""Minimise the Monte Carlo risk of the single head over (ω, μ), on common random numbers.

    μ is profiled out exactly (:func:`single_head_profile`: ``μ*(ω) = A/B``,
    risk ``1 + σ² − A²/B``), and ``ω > 0`` is found by bounded Brent
    minimisation on one fixed :class:`~reduced_dynamics.crosscheck.CovariateSample`
    (so the objective is smooth in ω). The negative branch is ``(−ω, −μ)``.

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic data model.
    n_prompts : int, in [2, 1e9]
        Prompts in the sample.
    seed : int, >= 0
        Seed of the sample (required).
    bracket : (float, float), optional
        Search interval for ω (default ``(0.2, 2)/√d``).
    xatol : float, > 0
        Absolute tolerance on ω.

    Returns
    -------
    SingleHeadMcOptimum

    Raises
    ------
    ValueError
        Bad input, or the minimiser is at the edge of ``bracket`` (widen it).

    References
    ----------
    docs/theory.md#single-head

    Examples
    --------
    >>> r = single_head_mc_optimum(Setting(d=5, L=40, sigma2=0.1), n_prompts=4000, seed=0)
    >>> 0.3 < r.omega < 0.8
    True
    """
    from scipy.optimize import minimize_scalar  # on use: scipy.optimize is slow to import

    from reduced_dynamics.dynamics.manifold import single_head_optimum

    setting = (
        as_setting(setting, "single_head_mc_optimum")
        .require_isotropic("single_head_mc_optimum")
        .require_softmax("single_head_mc_optimum")
    )
    d, sigma2 = setting.d, setting.sigma2
    n_prompts = check_n_prompts(n_prompts)
    xatol = check_positive_float("xatol", xatol)
    lo, hi = (0.2 / math.sqrt(d), 2.0 / math.sqrt(d)) if bracket is None else bracket
    lo, hi = check_positive_float("bracket[0]", lo), check_positive_float("bracket[1]", hi)
    if not lo < hi:
        raise ValueError(f"`bracket` must satisfy 0 < lo < hi, got ({lo}, {hi})")
    sample = CovariateSample(n_prompts, setting, seed=seed)

    def prof(w):
        p = single_head_profile(w, sample)
        return 1.0 + sigma2 - p.A * p.A / p.B

    opt = minimize_scalar(prof, bounds=(lo, hi), method="bounded", options={"xatol": xatol})
    w = float(opt.x)
    if min(w - lo, hi - w) < 10 * xatol:
        raise ValueError(f"single-head MC optimum at the edge of `bracket` ({lo}, {hi}): ω = {w}; widen it")
    m = single_head_profile(w, sample).mu_opt
    # profile curvature by central differences on the same sample (smooth in ω)
    hstep = 1e-3 / math.sqrt(d)
    curv = (prof(w + hstep) - 2 * prof(w) + prof(w - hstep)) / hstep**2
    approx = single_head_optimum(setting)
    wa, ma = float(approx.omega), float(approx.mu)
    # per-prompt losses and ω-derivatives at the optimum and at L̃'s optimum (paired)
    mom = _Moments(4)  # columns: loss at the optimum, at L̃'s optimum, their difference, ∂ℓ/∂ω at the optimum
    for b in sample:
        l1, gw1, _ = _per_prompt(b, [w], [m])
        l2, _, _ = _per_prompt(b, [wa], [ma])
        mom.add(np.stack([l1, l2, l2 - l1, gw1[:, 0]], axis=1))
    rn = math.sqrt(mom.count)
    sd = [math.sqrt(max(mom.var(i), 0.0)) for i in range(4)]
    return SingleHeadMcOptimum(
        omega=w,
        mu=float(m),
        omega_stderr=float(sd[3] / rn / curv) if curv > 0 else math.inf,
        risk=float(mom.mean[0]),
        risk_stderr=sd[0] / rn,
        omega_approx=float(wa),
        mu_approx=float(ma),
        risk_approx_point=float(mom.mean[1]),
        gain=float(mom.mean[2]),
        gain_stderr=sd[2] / rn,
        setting=setting,
        n=n_prompts,
        seed=sample.seed,
    )
