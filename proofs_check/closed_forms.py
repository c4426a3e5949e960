"""Closed forms of Theorem 1, re-exported for the checks from :mod:`reduced_dynamics.estimation.closed_forms`.

The library uses these closed forms itself, so they are defined there (the checker
imports the library, never the reverse); this module keeps the names the checks and
their tests import (``from proofs_check.closed_forms import gd_risk``). Every name
here is the library's object (``proofs_check.closed_forms.gd_risk is
reduced_dynamics.estimation.closed_forms.gd_risk``); the derivations of the
Theorem 1(c) identities are in :mod:`proofs_check.bayes`.
"""

from __future__ import annotations

from reduced_dynamics.estimation.closed_forms import (
    DEFAULT_DPS,
    RatioEstimate,
    bayes_risk_finite,
    bayes_risk_limit,
    bayes_risk_limit_mp,
    bound_relative_slack,
    bound_slack,
    gd_optimal_eta,
    gd_optimal_risk,
    gd_risk,
    gd_risk_limit,
    gd_risk_limit_mp,
    risk_ratio_bound,
    risk_ratio_bound_mp,
    risk_ratio_excess,
    risk_ratio_finite,
    risk_ratio_limit,
    risk_ratio_limit_mp,
)

__all__ = [
    # finite (d, L)
    "gd_risk",
    "gd_optimal_eta",
    "gd_optimal_risk",
    "bayes_risk_finite",
    "risk_ratio_finite",
    "RatioEstimate",
    # proportional limit
    "gd_risk_limit",
    "bayes_risk_limit",
    "risk_ratio_limit",
    "risk_ratio_bound",
    "risk_ratio_excess",
    "bound_slack",
    "bound_relative_slack",
    "gd_risk_limit_mp",
    "bayes_risk_limit_mp",
    "risk_ratio_limit_mp",
    "risk_ratio_bound_mp",
    "DEFAULT_DPS",
]
