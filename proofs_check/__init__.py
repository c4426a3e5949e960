"""Checkers of the theory (docs/theory.md#gradient-flow, docs/theory.md#predictors, docs/theory.md#theorem-1): each returns a :class:`CheckResult`.

Run them all with ``reduced-dynamics check`` or :func:`run_checks`. The closed
forms of Theorem 1 live in :mod:`proofs_check.closed_forms`; the landmarks of the
reduced dynamics (``eta_star``, ``mu_gamma``, ``single_head_optimum``,
``drift_law_gamma``) are defined once, in :mod:`reduced_dynamics.dynamics.manifold`,
and exported by :mod:`reduced_dynamics`, not here.
"""

from .checks import CHECKS, run_checks
from .closed_forms import (
    RatioEstimate,
    bayes_risk_finite,
    bayes_risk_limit,
    bound_slack,
    gd_optimal_eta,
    gd_optimal_risk,
    gd_risk,
    gd_risk_limit,
    risk_ratio_bound,
    risk_ratio_excess,
    risk_ratio_finite,
    risk_ratio_limit,
)
from .result import CheckResult

__all__ = [
    "CHECKS",
    "run_checks",
    "CheckResult",
    "gd_risk",
    "gd_optimal_eta",
    "gd_optimal_risk",
    "gd_risk_limit",
    "bayes_risk_limit",
    "bayes_risk_finite",
    "risk_ratio_bound",
    "risk_ratio_limit",
    "risk_ratio_excess",
    "bound_slack",
    "risk_ratio_finite",
    "RatioEstimate",
]
