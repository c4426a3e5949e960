"""Check the full model against the reduced theory: SGD vs the flow, Monte Carlo flows, the single-head optimum.

Modules
-------
:mod:`~reduced_dynamics.crosscheck.trajectory`
    (ω, μ) trajectories and the discrepancy between two of them.
:mod:`~reduced_dynamics.crosscheck.sgd_flow`
    SGD of a trained model vs the (preconditioned) reduced flow of L̃.
:mod:`~reduced_dynamics.crosscheck.monte_carlo`
    Fixed covariate samples, the Monte Carlo risk of the reduced model with its exact gradient, and its flow.
:mod:`~reduced_dynamics.crosscheck.single_head_mc`
    The single head's Monte Carlo optimum.
"""

from __future__ import annotations

from reduced_dynamics._lazy import attach

#: public name -> module defining it, imported on first access (reduced_dynamics._lazy)
_LAZY = {
    "TrajectoryDiscrepancy": "reduced_dynamics.crosscheck.trajectory",
    "trajectory_discrepancy": "reduced_dynamics.crosscheck.trajectory",
    "FLOW_PARAMETERISATIONS": "reduced_dynamics.crosscheck.sgd_flow",
    "sgd_omega_rate": "reduced_dynamics.crosscheck.sgd_flow",
    "preconditioned_flow": "reduced_dynamics.crosscheck.sgd_flow",
    "SgdFlowComparison": "reduced_dynamics.crosscheck.sgd_flow",
    "sgd_vs_flow": "reduced_dynamics.crosscheck.sgd_flow",
    "CovariateSample": "reduced_dynamics.crosscheck.monte_carlo",
    "RiskAndGrad": "reduced_dynamics.crosscheck.monte_carlo",
    "mc_risk_and_grad": "reduced_dynamics.crosscheck.monte_carlo",
    "mc_flow": "reduced_dynamics.crosscheck.monte_carlo",
    "SingleHeadProfile": "reduced_dynamics.crosscheck.single_head_mc",
    "single_head_profile": "reduced_dynamics.crosscheck.single_head_mc",
    "SingleHeadMcOptimum": "reduced_dynamics.crosscheck.single_head_mc",
    "single_head_mc_optimum": "reduced_dynamics.crosscheck.single_head_mc",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = attach(__name__, _LAZY)
