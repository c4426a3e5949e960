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

from reduced_dynamics.crosscheck.monte_carlo import CovariateSample, RiskAndGrad, mc_flow, mc_risk_and_grad
from reduced_dynamics.crosscheck.sgd_flow import (
    FLOW_PARAMETERISATIONS,
    SgdFlowComparison,
    preconditioned_flow,
    sgd_omega_rate,
    sgd_vs_flow,
)
from reduced_dynamics.crosscheck.single_head_mc import (
    SingleHeadMcOptimum,
    SingleHeadProfile,
    single_head_mc_optimum,
    single_head_profile,
)
from reduced_dynamics.crosscheck.trajectory import TrajectoryDiscrepancy, trajectory_discrepancy

__all__ = [
    "TrajectoryDiscrepancy",
    "trajectory_discrepancy",
    "FLOW_PARAMETERISATIONS",
    "sgd_omega_rate",
    "preconditioned_flow",
    "SgdFlowComparison",
    "sgd_vs_flow",
    "CovariateSample",
    "RiskAndGrad",
    "mc_risk_and_grad",
    "mc_flow",
    "SingleHeadProfile",
    "single_head_profile",
    "SingleHeadMcOptimum",
    "single_head_mc_optimum",
]
