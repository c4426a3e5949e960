"""reduced-dynamics: verify, by computation, the reduced (ω, μ) dynamics of
multi-head softmax attention learning in-context linear regression
(He, Pan, Chen, Yang, ICML 2025, arXiv 2503.12734).

The public API is declared here; see README.md for the science and examples.
"""

from .diagnostics import StageTolerances, manifold_gap, stage_times, trajectory_diagnostics
from .flow import FlowResult, gradient_descent, initial_state, integrate_flow
from .loss import (
    MAX_EXPONENT,
    LossOverflowError,
    approx_loss,
    approx_loss_grad,
    approx_loss_hessian,
)
from .manifold import eta_star, inf_loss, manifold_loss, mu_gamma, single_head_optimum
from .prompts import Prompts, sample_prompts
from .symbolic import derive_approx_loss, generated_loss_functions, sympy2numpy

__version__ = "0.1.0"

__all__ = [
    # approximate loss (fast numerics)
    "MAX_EXPONENT",
    "LossOverflowError",
    "approx_loss",
    "approx_loss_grad",
    "approx_loss_hessian",
    # symbolic derivation
    "derive_approx_loss",
    "generated_loss_functions",
    "sympy2numpy",
    # closed-form landmarks
    "eta_star",
    "inf_loss",
    "mu_gamma",
    "manifold_loss",
    "single_head_optimum",
    # flow
    "FlowResult",
    "initial_state",
    "integrate_flow",
    "gradient_descent",
    "StageTolerances",
    "trajectory_diagnostics",
    "stage_times",
    "manifold_gap",
    # data
    "Prompts",
    "sample_prompts",
]
