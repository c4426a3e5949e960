r"""What the ``risk`` command estimates for a reduced model: a :class:`RiskPlan` and its :class:`ModelRisks`.

A model's :meth:`~reduced_dynamics.models.ReducedModel.risk_plan` names, for a state ``y`` (or none),
the predictors compared on common prompts — the state's
:meth:`~reduced_dynamics.models.ReducedModel.predictor` first, then the model's
:meth:`~reduced_dynamics.models.ReducedModel.reference_predictors` — with their closed-form risks where
one exists (:meth:`~reduced_dynamics.models.ReducedModel.reference_risks`), the paired differences to
report and the model's landmarks. :meth:`~reduced_dynamics.models.ReducedModel.estimate_risks` estimates
a plan on the model's prompt stream: by default :func:`engine_risks` (the Monte Carlo engine
:func:`reduced_dynamics.estimate_risks`); the activation model draws one stream of statistics
(as :func:`~reduced_dynamics.activation_dynamics.loss.act_mc_risk`), the multi-task model draws
multi-task prompts (:func:`~reduced_dynamics.multitask.predictors.per_task_risks`).

References
----------
docs/theory.md#measuring-risks, docs/theory.md#predictors
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reduced_dynamics._results import FrozenResult

__all__ = ["RiskPlan", "ModelRisks", "engine_risks", "moments_risks"]


@dataclass(frozen=True)
class RiskPlan:
    """The estimators of one model (and state) on common prompts, with what is known about them exactly.

    Attributes
    ----------
    predictors : dict
        Name -> predictor, in report order: a :class:`~reduced_dynamics.estimation.predictors.Predictor`
        (single-output models) or a callable ``prompts -> (n, N)`` predictions (multi-task models).
    exact : dict
        Name -> the closed-form risk (float; a list of N per-task risks for multi-task models) or None;
        the same keys as ``predictors``.
    state : str or None
        The name in ``predictors`` of the state's own predictor (None: the plan has no state).
    pairs : tuple of (str, str)
        Paired differences ``risk(first) − risk(second)`` to report (on the same prompts).
    landmarks : dict
        JSON-ready facts of the model at the state (e.g. L̃_f, the claimed step, the optimal
        preconditioner), reported beside the estimates.
    config : dict
        JSON-ready configuration the model adds to the report (e.g. η*, the Σ spectrum, the tasks).
    conditional : bool or None
        None: Rao–Blackwellised only if the caller asks; True: always (the model's stream is conditional);
        False: never (plain Monte Carlo only).
    name_prefix : str
        Prefix of the report's file name.
    name_keys : dict
        What identifies the model's configuration in the file name (beside d, L, σ², prompts, seed).
    """

    predictors: dict
    exact: dict
    state: str | None = None
    pairs: tuple = ()
    landmarks: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    conditional: bool | None = None
    name_prefix: str = "risk"
    name_keys: dict = field(default_factory=dict)

    def __post_init__(self):
        if set(self.exact) != set(self.predictors):
            raise ValueError(f"`exact` must name the predictors {sorted(self.predictors)}, got {sorted(self.exact)}")
        if self.state is not None and self.state not in self.predictors:
            raise ValueError(f"`state` must name a predictor of {sorted(self.predictors)}, got {self.state!r}")
        for pair in self.pairs:
            if len(pair) != 2 or not set(pair) <= set(self.predictors):
                raise ValueError(f"`pairs` must name two predictors of {sorted(self.predictors)} each, got {pair!r}")

    def replace(self, **changes) -> RiskPlan:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ModelRisks(FrozenResult):
    """Monte Carlo risks of a :class:`RiskPlan`'s predictors on common prompts.

    Attributes
    ----------
    names : tuple of str, length P
    risk, stderr : ndarray, shape (P,) or (P, N)
        Mean loss and its standard error per predictor (per task for multi-task models).
    n : int
        Prompts per estimate.
    conditional : bool
        Whether the per-prompt losses were Rao–Blackwellised.
    differences : dict
        ``"first-second"`` -> ``(risk, stderr)`` of the paired difference, for the plan's pairs.
    """

    names: tuple
    risk: np.ndarray
    stderr: np.ndarray
    n: int
    conditional: bool
    differences: dict

    def estimate(self, name) -> tuple[Any, Any]:
        """``(risk, stderr)`` of predictor ``name`` (floats, or arrays of shape (N,))."""
        i = self.names.index(name)
        r, s = self.risk[i], self.stderr[i]
        return (float(r), float(s)) if np.ndim(r) == 0 else (r, s)


def _pair_key(a, b) -> str:
    return f"{a}-{b}"


def engine_risks(plan: RiskPlan, setting, *, n_prompts, seed, conditional, stage=None) -> ModelRisks:
    """Estimate ``plan`` with the Monte Carlo engine (:func:`reduced_dynamics.estimate_risks`).

    With isotropic covariates the predictors that read only the statistics ``s_l, |x_q|², y``
    (``uses_stats``) share the statistics sampler; those that need the covariates (Bayes ridge) are
    estimated on their own prompts of the same seed. Under Σ every predictor shares one full sampler.
    A pair must lie within one group (the same prompts).

    Parameters
    ----------
    plan : RiskPlan
    setting : Setting
    n_prompts : int, in [2, 1e9]
    seed : int >= 0
    conditional : bool
        Rao–Blackwellise the per-prompt losses.
    stage : callable, optional
        ``stage(text)`` before each estimation (progress).

    Returns
    -------
    ModelRisks
    """
    from reduced_dynamics.estimation.risk import estimate_risks

    names = list(plan.predictors)
    if setting.isotropic:
        groups = [
            [n for n in names if getattr(plan.predictors[n], "uses_stats", False)],
            [n for n in names if not getattr(plan.predictors[n], "uses_stats", False)],
        ]
    else:
        groups = [names]
    owner = {}
    for group in (g for g in groups if g):
        if stage is not None:
            stage(f"{', '.join(group)} on {n_prompts} prompts")
        res = estimate_risks(
            {n: plan.predictors[n] for n in group}, setting, n_prompts=n_prompts, seed=seed, conditional=conditional
        )
        owner.update({n: res for n in group})
    differences = {}
    for a, b in plan.pairs:
        if owner[a] is not owner[b]:
            raise ValueError(f"`pairs`: {a!r} and {b!r} are estimated on different prompts (no paired difference)")
        diff = owner[a].difference(a, b)
        differences[_pair_key(a, b)] = (diff.risk, diff.stderr)
    est = [owner[n][n] for n in names]
    return ModelRisks(
        names=tuple(names),
        risk=np.array([e.risk for e in est]),
        stderr=np.array([e.stderr for e in est]),
        n=int(owner[names[0]].n),
        conditional=bool(conditional),
        differences=differences,
    )


def moments_risks(names, pairs, moments, n) -> ModelRisks:
    """:class:`ModelRisks` from merged per-prompt losses (``moments``: the engine's running mean and cross-products).

    Used by the models that draw their own prompt stream; the paired differences come from the
    covariance of the losses, ``Var(a − b) = Var a + Var b − 2 Cov(a, b)``.
    """
    cov = moments.M2 / (moments.count - 1)
    mean = moments.mean
    idx = {name: i for i, name in enumerate(names)}
    differences = {}
    for a, b in pairs:
        i, j = idx[a], idx[b]
        var = cov[i, i] + cov[j, j] - 2.0 * cov[i, j]
        differences[_pair_key(a, b)] = (float(mean[i] - mean[j]), float(np.sqrt(max(var, 0.0) / n)))
    return ModelRisks(
        names=tuple(names),
        risk=np.array(mean, dtype=float),
        stderr=np.sqrt(np.maximum(np.diag(cov), 0.0) / n),
        n=int(n),
        conditional=True,
        differences=differences,
    )
