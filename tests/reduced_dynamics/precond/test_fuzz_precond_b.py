"""API fuzz suite (harness tests/api_fuzz.py) for B's Σ modules: predictors, exact risks, Bayes ratio, the check.

Each public function is called from a small valid baseline with ONE argument replaced by a hostile
value (all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings): the result
is finite or a ``ValueError`` / ``TypeError`` names a parameter; no ``RuntimeWarning``, a few seconds
at most, bounded memory.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from proofs_check.precond_predictors import check_precond_risk, default_sigma
from reduced_dynamics import sample_prompts
from reduced_dynamics.precond import bayes, exact
from reduced_dynamics.precond.predictors import debiased_precond_gd, precond_gd
from reduced_dynamics.setting import Setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

SIG = np.array([[2.0, 0.3], [0.3, 0.5]])
S = Setting(d=2, L=6, sigma2=0.1, Sigma=SIG)
P = np.array([[0.4, 0.1], [0.1, 1.5]])
PROMPTS = sample_prompts(8, S, seed=0)

ENTRIES = [
    E("precond_gd", lambda P, eta: precond_gd(P, eta)(PROMPTS), 2, P=P, eta=0.5),
    E("debiased_precond_gd", lambda P, eta: debiased_precond_gd(P, eta).weights(PROMPTS), 2, P=P, eta=0.5),
    E("pgd_risk", exact.pgd_risk, 3, P=P, eta=0.5, setting=S),
    E("dpgd_risk", exact.dpgd_risk, 3, P=P, eta=0.5, setting=S),
    E("precond_optimal_eta", exact.precond_optimal_eta, 2, P=P, setting=S, debiased=True),
    E("optimal_dpgd", exact.optimal_dpgd, 1, setting=S),
    E("optimal_pgd", exact.optimal_pgd, 1, setting=S),
    E("bayes_ratio_sigma", bayes.bayes_ratio_sigma, 2, eigs=[0.5, 2.0], setting=S, weights=None),
    E("bayes_risk_sigma_limit", bayes.bayes_risk_sigma_limit, 2, eigs=[0.5, 2.0], setting=S, weights=None),
    E(
        "dpgd_risk_sigma_limit",
        bayes.dpgd_risk_sigma_limit,
        2,
        eigs=[0.5, 2.0],
        setting=S,
        preconditioner="optimal",
        weights=None,
    ),  # fmt: skip
    E("bayes_risk_sigma_finite", bayes.bayes_risk_sigma_finite, 1, setting=S, n_prompts=20, seed=0),
    E("default_sigma", default_sigma, 1, setting=S, seed=0, lo=0.5, hi=4.0),
    E("check_precond_risk", check_precond_risk, 1, setting=S, quick=True),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES)
