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

# Lazy loading (SPEC 1, reduced_dynamics._lazy): ``import reduced_dynamics`` imports none of the
# package's modules (no sympy, scipy.integrate, matplotlib, dask or proofs_check); each public name
# is imported from its module on first access and then cached here. To add or remove an export,
# edit ``_LAZY``: ``__all__`` is its list of keys, in order.

from __future__ import annotations

from reduced_dynamics._lazy import attach

__version__ = "0.2.0"

#: public name -> module defining it (the order is ``__all__``'s)
_LAZY = {
    # the data model
    "Setting": "reduced_dynamics.setting",
    "PAPER_SETTING": "reduced_dynamics.setting",
    # rounding-safe Theorem 1(c) ratio: r - 1 and U - r without cancellation
    "risk_ratio_excess": "reduced_dynamics.estimation.closed_forms",
    "bound_slack": "reduced_dynamics.estimation.closed_forms",
    # approximate loss (fast numerics)
    "MAX_EXPONENT": "reduced_dynamics.dynamics.loss",
    "LossOverflowError": "reduced_dynamics.dynamics.loss",
    "approx_loss": "reduced_dynamics.dynamics.loss",
    "approx_loss_grad": "reduced_dynamics.dynamics.loss",
    "approx_loss_hessian": "reduced_dynamics.dynamics.loss",
    "optimal_mu": "reduced_dynamics.dynamics.loss",
    "LossGradient": "reduced_dynamics.dynamics.loss",
    # exact O(1/L) expansion of the risk
    "corrected_loss": "reduced_dynamics.dynamics.corrected_loss",
    "corrected_loss_grad": "reduced_dynamics.dynamics.corrected_loss",
    # symbolic derivation
    "derive_approx_loss": "reduced_dynamics.derive.symbolic",
    "generated_loss_functions": "reduced_dynamics.derive.symbolic",
    "GeneratedLossFunctions": "reduced_dynamics.derive.symbolic",
    "sympy2numpy": "reduced_dynamics.derive.symbolic",
    # closed-form landmarks
    "eta_star": "reduced_dynamics.dynamics.manifold",
    "inf_loss": "reduced_dynamics.dynamics.manifold",
    "mu_gamma": "reduced_dynamics.dynamics.manifold",
    "manifold_loss": "reduced_dynamics.dynamics.manifold",
    "single_head_optimum": "reduced_dynamics.dynamics.manifold",
    "SingleHeadOptimum": "reduced_dynamics.dynamics.manifold",
    "drift_law_gamma": "reduced_dynamics.dynamics.manifold",
    "flow_eta_gap": "reduced_dynamics.dynamics.manifold",
    # reduced models and the one integrator
    "reduced_model": "reduced_dynamics.models",
    "MODELS": "reduced_dynamics.models",
    "integrate": "reduced_dynamics.flow._integrate",
    "gradient_descent": "reduced_dynamics.flow._integrate",
    "Flow": "reduced_dynamics.flow._result",
    "Final": "reduced_dynamics.flow._result",
    "Status": "reduced_dynamics.flow._status",
    "initial_state": "reduced_dynamics.models._heads",
    "StageTolerances": "reduced_dynamics.dynamics.diagnostics",
    "trajectory_diagnostics": "reduced_dynamics.dynamics.diagnostics",
    "stage_times": "reduced_dynamics.dynamics.diagnostics",
    "manifold_gap": "reduced_dynamics.dynamics.diagnostics",
    "TrajectoryDiagnostics": "reduced_dynamics.dynamics.diagnostics",
    "StageTimes": "reduced_dynamics.dynamics.diagnostics",
    "ManifoldGap": "reduced_dynamics.dynamics.diagnostics",
    # data
    "Prompts": "reduced_dynamics.estimation.prompts",
    "sample_prompts": "reduced_dynamics.estimation.prompts",
    # predictors
    "Predictor": "reduced_dynamics.estimation.predictors",
    "MultiHead": "reduced_dynamics.estimation.predictors",
    "SingleHead": "reduced_dynamics.estimation.predictors",
    "VanillaGD": "reduced_dynamics.estimation.predictors",
    "DebiasedGD": "reduced_dynamics.estimation.predictors",
    "LinearAttention": "reduced_dynamics.estimation.predictors",
    "BayesRidge": "reduced_dynamics.estimation.predictors",
    "Zero": "reduced_dynamics.estimation.predictors",
    "conditional_loss": "reduced_dynamics.estimation.predictors",
    # Monte Carlo risk engine
    "RiskEstimate": "reduced_dynamics.estimation.risk",
    "RiskDifference": "reduced_dynamics.estimation.risk",
    "ControlVariateEstimate": "reduced_dynamics.estimation.risk",
    "RiskResult": "reduced_dynamics.estimation.risk",
    "estimate_risks": "reduced_dynamics.estimation.risk",
    "estimate_risk": "reduced_dynamics.estimation.risk",
    "control_variate_risk": "reduced_dynamics.estimation.risk",
    # numpy attention models and training
    "MODEL_KINDS": "reduced_dynamics.model.attention",
    "AttentionModel": "reduced_dynamics.model.attention",
    "ReducedModel": "reduced_dynamics.model.attention",
    "make_model": "reduced_dynamics.model.attention",
    "TrainConfig": "reduced_dynamics.model.training",
    "TrainResult": "reduced_dynamics.model.training",
    "train": "reduced_dynamics.model.training",
    "mc_risk": "reduced_dynamics.model.training",
    "cross_check": "reduced_dynamics.model.training",
    "length_generalisation": "reduced_dynamics.model.training",
    "CrossCheck": "reduced_dynamics.model.training",
    "LengthGeneralisation": "reduced_dynamics.model.training",
    "Circuits": "reduced_dynamics.model.circuits",
    "PatternMetrics": "reduced_dynamics.model.circuits",
    "extract_circuits": "reduced_dynamics.model.circuits",
    "pattern_metrics": "reduced_dynamics.model.circuits",
    "sgd_vs_flow": "reduced_dynamics.crosscheck.sgd_flow",
    "SgdFlowComparison": "reduced_dynamics.crosscheck.sgd_flow",
    "single_head_mc_optimum": "reduced_dynamics.crosscheck.single_head_mc",
    "SingleHeadMcOptimum": "reduced_dynamics.crosscheck.single_head_mc",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = attach(__name__, _LAZY)
