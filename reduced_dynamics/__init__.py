"""reduced-dynamics: verify, by computation, the reduced (ω, μ) dynamics of
multi-head softmax attention learning in-context linear regression
(He, Pan, Chen, Yang, ICML 2025, arXiv 2503.12734).
"""

from .loss import (
    MAX_EXPONENT,
    LossOverflowError,
    approx_loss,
    approx_loss_grad,
    approx_loss_hessian,
)
from .prompts import Prompts, sample_prompts

__version__ = "0.1.0"

__all__ = [
    "MAX_EXPONENT",
    "LossOverflowError",
    "approx_loss",
    "approx_loss_grad",
    "approx_loss_hessian",
    "Prompts",
    "sample_prompts",
]
