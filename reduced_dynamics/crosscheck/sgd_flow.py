r"""Does SGD follow the reduced gradient flow? (docs/theory.md#reduced-model, docs/theory.md#gradient-flow)

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

References
----------
docs/theory.md#reduced-model (reduced model, L̃), docs/theory.md#gradient-flow (flow).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import (
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
)
from reduced_dynamics.crosscheck.monte_carlo import CovariateSample, mc_flow, rated_flow
from reduced_dynamics.crosscheck.trajectory import TrajectoryDiscrepancy, trajectory_discrepancy
from reduced_dynamics.model.circuits import circuits_from_arrays
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "FLOW_PARAMETERISATIONS",
    "sgd_omega_rate",
    "preconditioned_flow",
    "SgdFlowComparison",
    "sgd_vs_flow",
]

#: Parameterisations whose extracted (ω, μ) follow an autonomous reduced flow under SGD.
FLOW_PARAMETERISATIONS = ("reduced", "merged")


def sgd_omega_rate(parameterisation: str, setting: Setting) -> float:
    """Rate of ω relative to μ under SGD in ``parameterisation`` (module docstring).

    Parameters
    ----------
    parameterisation : {"reduced", "merged"}
    setting : Setting
        Only ``setting.d`` matters.

    Returns
    -------
    float
        ``reduced``: 1; ``merged``: ``1/d``.

    Examples
    --------
    >>> sgd_omega_rate("merged", Setting(d=5))
    0.2
    """
    setting = as_setting(setting, "sgd_omega_rate")
    if not isinstance(parameterisation, str):
        raise ValueError(
            f"`parameterisation` must be one of {', '.join(FLOW_PARAMETERISATIONS)}, got {parameterisation!r}"
        )
    if parameterisation == "reduced":
        return 1.0
    if parameterisation == "merged":
        return 1.0 / setting.d
    raise ValueError(f"`parameterisation` must be one of {', '.join(FLOW_PARAMETERISATIONS)}, got {parameterisation!r}")


def _isotropic(setting, where, name: str = "setting"):
    """A scalar isotropic softmax single-task setting (the flow of L̃ of the isotropic model), else ``ValueError``."""
    setting = as_setting(setting, where).require_isotropic(where).require_softmax(where).require_scalar(where)
    if setting.tasks is not None:
        raise ValueError(f"`{name}.tasks` is not supported by {where} (one task: the flow of L̃)")
    return setting


def preconditioned_flow(omega0, mu0, times, setting: Setting, *, omega_rate=1.0, rtol=1e-9, atol=1e-12):
    r"""Integrate :math:`\dot\omega = -r\nabla_\omega\tilde L,\ \dot\mu = -\nabla_\mu\tilde L` at ``times``.

    :func:`reduced_dynamics.integrate` of the isotropic model with ``rates={"omega": r}``
    (Radau with the analytic Jacobian ``−P·Hessian``, ``P = diag(r·1_H, 1_H)``); with
    ``omega_rate`` ``r = 1`` it is the gradient flow of L̃.

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
        Initial state.
    times : array_like, shape (T,)
        Non-decreasing output times, ``times[0] >= 0``; the flow starts at 0.
    setting : Setting
        Scalar data model of L̃.
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
    docs/theory.md#gradient-flow, docs/theory.md#approximate-loss
    """
    from reduced_dynamics.models import reduced_model

    setting = _isotropic(setting, "preconditioned_flow")
    model = reduced_model(setting, n_heads=max(1, int(np.size(omega0))) if np.ndim(omega0) == 1 else 1)
    return rated_flow(model, omega0, mu0, times, method="Radau", rtol=rtol, atol=atol, omega_rate=omega_rate)


@dataclass(frozen=True)
class SgdFlowComparison(FrozenResult):
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
        The reference flow (``omega_rate``-preconditioned) from the extracted start.
    discrepancy : TrajectoryDiscrepancy
        :func:`~reduced_dynamics.crosscheck.trajectory_discrepancy` of SGD vs the reference flow.
    reference : str
        ``"approx"`` (flow of L̃) or ``"mc"`` (flow of the MC risk).
    parameterisation : str
        ``"reduced"`` or ``"merged"``.
    omega_rate : float
        Rate of ω relative to μ in the reference flow.
    time_scale : float
        Factor of the time map ``t = time_scale × lr × steps``.
    lr : float
        SGD learning rate.
    setting : Setting
        The data model of the training prompts.
    flow_setting : Setting
        The data model of the reference flow (``setting`` unless overridden).
    batch : int
        Prompts per SGD step.
    warmup_steps : int
        Adam steps before the SGD window (0 when started from ``init_params``).
    seconds : float
        Wall time.
    gamma_sgd, gamma_flow, eta_sgd, eta_flow : ndarray, shape (T,)
        Properties: ``mean_h |ω_h|`` and ``μᵀω`` along SGD and along the flow.
    """

    steps: np.ndarray = field(repr=False)
    t: np.ndarray = field(repr=False)
    omega_sgd: np.ndarray = field(repr=False)
    mu_sgd: np.ndarray = field(repr=False)
    omega_flow: np.ndarray = field(repr=False)
    mu_flow: np.ndarray = field(repr=False)
    discrepancy: TrajectoryDiscrepancy
    reference: str
    parameterisation: str
    omega_rate: float
    time_scale: float
    lr: float
    setting: Setting
    flow_setting: Setting
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


#: Largest ``time_scale`` of :func:`sgd_vs_flow` (it rescales the derived time for negative controls).
TIME_SCALE_MAX = 100.0
#: Largest ``n_records`` of :func:`sgd_vs_flow`.
N_RECORDS_MAX = 10_000


def sgd_vs_flow(
    setting: Setting,
    *,
    seed,
    n_heads=2,
    parameterisation="reduced",
    lr=1e-2,
    sgd_steps=5000,
    batch=256,
    warmup_steps=500,
    warmup_lr=1e-2,
    n_records=40,
    time_scale=1.0,
    flow_setting: Setting | None = None,
    init_scale=0.1,
    init_params=None,
    omega_rate=None,
    reference="approx",
    mc_n=20_000,
    mc_seed=None,
) -> SgdFlowComparison:
    r"""Train with plain SGD and compare the extracted (ω, μ) with the reduced flow.

    Protocol: ``warmup_steps`` Adam steps (lr ``warmup_lr``) from the seeded init
    so that the patterns form (skipped when ``init_params`` is given or
    ``warmup_steps == 0``); then ``sgd_steps`` plain-SGD steps at ``lr`` with
    fresh prompts, the circuits recorded at about ``n_records`` log-spaced
    steps. The reference is :func:`preconditioned_flow` (or
    :func:`~reduced_dynamics.crosscheck.mc_flow`) from the (ω, μ) extracted at
    the start of the SGD window, with ``omega_rate`` (:func:`sgd_omega_rate`,
    unless given) and time ``t = time_scale × lr × steps`` (``time_scale = 1``
    is the derived correspondence; other values are for negative controls).

    Parameters
    ----------
    setting : Setting
        Scalar, isotropic data model of the training prompts.
    seed : int, >= 0
        Seeds the init and both prompt streams (warm-up: ``seed``; SGD: ``seed + 1``).
    n_heads : int, >= 1
    parameterisation : {"reduced", "merged"}
    lr : float, > 0
        SGD learning rate.
    sgd_steps : int, >= 1
    batch : int, >= 1
    warmup_steps : int, >= 0
    warmup_lr : float, > 0
    n_records : int, >= 2
    time_scale : float, > 0
    flow_setting : Setting, optional
        Data model of the reference flow (default ``setting``); e.g. another
        ``L`` to test the approximation.
    init_scale : float, >= 0
        Init scale of the reduced model.
    init_params : dict, optional
        Start the SGD window from these parameters.
    omega_rate : float, optional
        Override the derived rate of ω (negative controls only).
    reference : {"approx", "mc"}
        ``"approx"``: the flow of L̃ (:func:`preconditioned_flow`); ``"mc"``: the
        flow of the Rao–Blackwellised Monte Carlo risk on a fixed sample of
        ``mc_n`` prompts seeded by ``mc_seed``
        (:func:`~reduced_dynamics.crosscheck.mc_flow`), i.e. the true
        risk up to Monte Carlo error — isolates the SGD ↔ flow correspondence
        from the L̃ approximation.
    mc_n : int, >= 2
    mc_seed : int, >= 0
        Seed of the Monte Carlo sample; required when ``reference="mc"``.

    Returns
    -------
    SgdFlowComparison

    Raises
    ------
    RuntimeError
        The warm-up or the SGD run diverged.

    Examples
    --------
    >>> r = sgd_vs_flow(Setting(d=3, L=20), seed=0, lr=1e-2, sgd_steps=50, warmup_steps=50, batch=32, n_records=5)
    >>> r.t.shape == r.steps.shape, r.omega_sgd.shape[1]
    (True, 2)
    """
    from reduced_dynamics.flow._integrate import T_END_MAX, T_END_MIN
    from reduced_dynamics.model.training import STEPS_MAX, TrainConfig, train

    t0 = time.perf_counter()
    setting = as_setting(setting, "sgd_vs_flow").require_isotropic("sgd_vs_flow").require_softmax("sgd_vs_flow")
    n_heads = check_positive_int("n_heads", n_heads)
    rate = sgd_omega_rate(parameterisation, setting)  # validates `parameterisation`
    if omega_rate is not None:
        rate = check_positive_float("omega_rate", omega_rate)
    lr = check_positive_float("lr", lr)
    warmup_lr = check_positive_float("warmup_lr", warmup_lr)
    sgd_steps = check_positive_int("sgd_steps", sgd_steps, hi=STEPS_MAX)
    warmup_steps = check_nonnegative_int("warmup_steps", warmup_steps, hi=STEPS_MAX)
    n_records = check_positive_int("n_records", n_records, hi=N_RECORDS_MAX)
    if n_records < 2:
        raise ValueError(f"`n_records` must be an integer in [2, {N_RECORDS_MAX}], got {n_records}")
    time_scale = check_positive_float("time_scale", time_scale)
    if time_scale > TIME_SCALE_MAX:
        raise ValueError(
            f"`time_scale` must be a number in (0, {TIME_SCALE_MAX:g}] (a rescaled time), got {time_scale!r}"
        )
    t_last = time_scale * lr * sgd_steps
    if not (T_END_MIN <= time_scale * lr and t_last <= T_END_MAX):  # the first and the last record's time
        raise ValueError(
            f"the flow times `time_scale` × `lr` × step, {time_scale * lr:.3g} to {t_last:.3g}, must be in "
            f"[{T_END_MIN:.3g}, {T_END_MAX:g}] (the engine's range); change `lr` or `time_scale`"
        )
    setting = _isotropic(setting, "sgd_vs_flow")
    flow_setting = setting if flow_setting is None else _isotropic(flow_setting, "sgd_vs_flow", "flow_setting")
    if flow_setting.d != setting.d:
        raise ValueError(f"`flow_setting.d` must equal `setting.d` = {setting.d}, got {flow_setting.d}")
    seed = check_nonnegative_int("seed", seed)
    if not isinstance(reference, str) or reference not in ("approx", "mc"):
        raise ValueError(f"`reference` must be one of 'approx', 'mc', got {reference!r}")
    if reference == "mc":
        mc_n = check_positive_int("mc_n", mc_n)
        if mc_n < 2:
            raise ValueError(f"`mc_n` must be an integer >= 2, got {mc_n}")
        if mc_seed is None:
            raise ValueError("`mc_seed` must be a non-negative integer when `reference` is 'mc', got None")
        mc_seed = check_nonnegative_int("mc_seed", mc_seed)
    common = dict(
        setting=setting, n_heads=n_heads, batch=batch, parameterisation=parameterisation, init_scale=init_scale
    )
    params = init_params
    if params is None and warmup_steps > 0:
        warm = train(
            TrainConfig(steps=warmup_steps, lr=warmup_lr, optimizer="adam", seed=seed, n_snapshots=2, **common)
        )
        if not warm.success:  # diverged: the step was too large for this start
            raise ValueError(f"`warmup_lr` = {warmup_lr:g}: the warm-up failed ({warm.message})")
        params = warm.params
    cfg = TrainConfig(steps=sgd_steps, lr=lr, optimizer="sgd", seed=seed + 1, n_snapshots=n_records, **common)
    if params is None:
        params = cfg.model().init(seed=np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0]))
    res = train(cfg, init_params=params)
    if not res.success:  # diverged: the step was too large for this start
        raise ValueError(f"`lr` = {lr:g}: the SGD run failed ({res.message})")
    circ = [circuits_from_arrays(KQ, ov) for KQ, ov in zip(res.snapshot_KQ, res.snapshot_ov)]
    om = np.array([c.omega for c in circ])
    mu = np.array([c.mu for c in circ])
    steps = res.snapshot_steps
    t = time_scale * lr * steps.astype(float)
    if reference == "approx":
        flow = preconditioned_flow(om[0], mu[0], t, flow_setting, omega_rate=rate)
    else:
        flow = mc_flow(om[0], mu[0], t, CovariateSample(mc_n, flow_setting, seed=mc_seed), omega_rate=rate)
    return SgdFlowComparison(
        steps=steps,
        t=t,
        omega_sgd=om,
        mu_sgd=mu,
        omega_flow=flow.omega,
        mu_flow=flow.mu,
        discrepancy=trajectory_discrepancy(om, mu, flow.omega, flow.mu),
        reference=reference,
        parameterisation=parameterisation,
        omega_rate=rate,
        time_scale=time_scale,
        lr=lr,
        setting=setting,
        flow_setting=flow_setting,
        batch=cfg.batch,
        warmup_steps=warmup_steps if init_params is None else 0,
        seconds=time.perf_counter() - t0,
    )
