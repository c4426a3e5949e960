"""Checkers of the theory (docs/theory.md#gradient-flow, docs/theory.md#predictors, docs/theory.md#theorem-1): each returns a :class:`CheckResult`.

Run them all with ``reduced-dynamics check`` or :func:`run_checks`.
"""

from reduced_dynamics.dynamics.manifold import drift_law_gamma

from .checks import CHECKS, run_checks
from .closed_forms import (
    bayes_risk_finite,
    bayes_risk_limit,
    eta_star,
    gd_optimal_eta,
    gd_optimal_risk,
    gd_risk,
    gd_risk_limit,
    mu_gamma,
    risk_ratio_bound,
    risk_ratio_finite,
    risk_ratio_limit,
    single_head_optimum,
)
from .result import CheckResult

__all__ = [
    "CHECKS",
    "run_checks",
    "CheckResult",
    "eta_star",
    "mu_gamma",
    "single_head_optimum",
    "gd_risk",
    "gd_optimal_eta",
    "gd_optimal_risk",
    "gd_risk_limit",
    "bayes_risk_limit",
    "bayes_risk_finite",
    "risk_ratio_bound",
    "risk_ratio_limit",
    "risk_ratio_finite",
    "drift_law_gamma",
]
