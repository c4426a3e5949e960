"""reduced-dynamics: verify, by computation, the reduced (ω, μ) dynamics of
multi-head softmax attention learning in-context linear regression
(He, Pan, Chen, Yang, ICML 2025, arXiv 2503.12734).

The public API is declared here (``__all__``). Every function whose result
depends on the data model takes a :class:`Setting`; the calling conventions are
in docs/conventions.md and the theory in docs/theory.md.

Examples
--------
>>> from reduced_dynamics import Setting, eta_star
>>> s = Setting(d=5, L=40, sigma2=0.1)
>>> round(eta_star(s), 6) == round(s.eta_star, 6) == 0.879121
True
"""

from reduced_dynamics.crosscheck import SgdFlowComparison, SingleHeadMcOptimum, sgd_vs_flow, single_head_mc_optimum
from reduced_dynamics.derive.symbolic import (
    GeneratedLossFunctions,
    derive_approx_loss,
    generated_loss_functions,
    sympy2numpy,
)
from reduced_dynamics.dynamics.batch_flow import FlowBatchResult, integrate_flow_batch
from reduced_dynamics.dynamics.corrected_loss import corrected_loss, corrected_loss_grad
from reduced_dynamics.dynamics.diagnostics import (
    ManifoldGap,
    StageTimes,
    StageTolerances,
    TrajectoryDiagnostics,
    manifold_gap,
    stage_times,
    trajectory_diagnostics,
)
from reduced_dynamics.dynamics.flow import (
    FlowFinal,
    FlowPath,
    FlowResult,
    flow_at_times,
    gradient_descent,
    initial_state,
    integrate_flow,
)
from reduced_dynamics.dynamics.loss import (
    MAX_EXPONENT,
    LossGradient,
    LossOverflowError,
    approx_loss,
    approx_loss_grad,
    approx_loss_hessian,
    optimal_mu,
)
from reduced_dynamics.dynamics.manifold import (
    SingleHeadOptimum,
    drift_law_gamma,
    eta_star,
    flow_eta_gap,
    inf_loss,
    manifold_loss,
    mu_gamma,
    single_head_optimum,
)
from reduced_dynamics.estimation.closed_forms import bound_slack, risk_ratio_excess
from reduced_dynamics.estimation.predictors import (
    BayesRidge,
    DebiasedGD,
    LinearAttention,
    MultiHead,
    Predictor,
    SingleHead,
    VanillaGD,
    Zero,
    conditional_loss,
)
from reduced_dynamics.estimation.prompts import Prompts, sample_prompts
from reduced_dynamics.estimation.risk import (
    ControlVariateEstimate,
    RiskDifference,
    RiskEstimate,
    RiskResult,
    control_variate_risk,
    estimate_risk,
    estimate_risks,
)
from reduced_dynamics.model.attention import (
    MODEL_KINDS,
    AttentionModel,
    ReducedModel,
    make_model,
)
from reduced_dynamics.model.circuits import Circuits, PatternMetrics, extract_circuits, pattern_metrics
from reduced_dynamics.model.training import (
    CrossCheck,
    LengthGeneralisation,
    TrainConfig,
    TrainResult,
    cross_check,
    length_generalisation,
    mc_risk,
    train,
)
from reduced_dynamics.setting import PAPER_SETTING, Setting

__version__ = "0.1.0"

__all__ = [
    # the data model
    "Setting",
    "PAPER_SETTING",
    # rounding-safe Theorem 1(c) ratio: r - 1 and U - r without cancellation
    "risk_ratio_excess",
    "bound_slack",
    # approximate loss (fast numerics)
    "MAX_EXPONENT",
    "LossOverflowError",
    "approx_loss",
    "approx_loss_grad",
    "approx_loss_hessian",
    "optimal_mu",
    "LossGradient",
    # exact O(1/L) expansion of the risk
    "corrected_loss",
    "corrected_loss_grad",
    # symbolic derivation
    "derive_approx_loss",
    "generated_loss_functions",
    "GeneratedLossFunctions",
    "sympy2numpy",
    # closed-form landmarks
    "eta_star",
    "inf_loss",
    "mu_gamma",
    "manifold_loss",
    "single_head_optimum",
    "SingleHeadOptimum",
    "drift_law_gamma",
    "flow_eta_gap",
    # flow
    "FlowResult",
    "FlowFinal",
    "FlowPath",
    "initial_state",
    "integrate_flow",
    "integrate_flow_batch",
    "FlowBatchResult",
    "gradient_descent",
    "flow_at_times",
    "StageTolerances",
    "trajectory_diagnostics",
    "stage_times",
    "manifold_gap",
    "TrajectoryDiagnostics",
    "StageTimes",
    "ManifoldGap",
    # data
    "Prompts",
    "sample_prompts",
    # predictors
    "Predictor",
    "MultiHead",
    "SingleHead",
    "VanillaGD",
    "DebiasedGD",
    "LinearAttention",
    "BayesRidge",
    "Zero",
    "conditional_loss",
    # Monte Carlo risk engine
    "RiskEstimate",
    "RiskDifference",
    "ControlVariateEstimate",
    "RiskResult",
    "estimate_risks",
    "estimate_risk",
    "control_variate_risk",
    # numpy attention models and training
    "MODEL_KINDS",
    "AttentionModel",
    "ReducedModel",
    "make_model",
    "TrainConfig",
    "TrainResult",
    "train",
    "mc_risk",
    "cross_check",
    "length_generalisation",
    "CrossCheck",
    "LengthGeneralisation",
    "Circuits",
    "PatternMetrics",
    "extract_circuits",
    "pattern_metrics",
    "sgd_vs_flow",
    "SgdFlowComparison",
    "single_head_mc_optimum",
    "SingleHeadMcOptimum",
]
