"""API fuzz suite for ``proofs_check`` (issue 9): closed forms, finite-L Monte Carlo, the check runner.

Every public function of :mod:`proofs_check.closed_forms`, the mpmath cross-checks of
:mod:`proofs_check.bayes`, :func:`proofs_check.approximation.approximation_error` and
:func:`proofs_check.run_checks` (its ``only`` argument) is called from a small valid baseline with
ONE argument replaced by a hostile value: numbers across all magnitudes (1e-320 .. 1e300, 0,
negative), NaN, inf, complex scalars and arrays, wrong and mismatched shapes, wrong types, huge
integers, and extreme but valid settings. The contract (as in
``tests/reduced_dynamics/estimation/test_fuzz_api.py``, whose harness lives in ``tests/api_fuzz.py``): a result
whose every number is finite, or a ``ValueError`` / ``TypeError`` naming a parameter; no
``RuntimeWarning``, a few seconds at most, and no allocation beyond a memory limit.

``python tests/proofs_check/test_fuzz_api.py`` prints the count of calls tried and of calls that
broke the contract.
"""

from __future__ import annotations

import importlib.util
import sys

from proofs_check import bayes, checks
from proofs_check import closed_forms as cf
from proofs_check.approximation import approximation_error
from reduced_dynamics.setting import Setting

# The shared harness tests/api_fuzz.py, loaded by path (tests/ is not a package and is not put on
# sys.path, where its reduced_dynamics/ folder would shadow the package).
api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py


S = Setting(d=2, L=6, sigma2=0.1)

EXTREME_SETTINGS = api_fuzz.EXTREME_SETTINGS
E = api_fuzz.E


def _limit(fn, n_pos=0, **extra):
    return E(fn.__name__, fn, n_pos, sigma2=0.1, xi=0.125, **extra)


ENTRIES = [
    E("gd_risk", cf.gd_risk, 2, eta=0.5, setting=S, debiased=True),
    E("gd_risk_vanilla", cf.gd_risk, 2, fuzz=("eta", "setting"), eta=0.5, setting=S, debiased=False),
    E("gd_optimal_eta", cf.gd_optimal_eta, 1, setting=S, debiased=True),
    E("gd_optimal_risk", cf.gd_optimal_risk, 1, setting=S, debiased=True),
    _limit(cf.gd_risk_limit),
    _limit(cf.bayes_risk_limit),
    _limit(cf.risk_ratio_limit),
    _limit(cf.risk_ratio_bound),
    _limit(cf.risk_ratio_excess),
    _limit(cf.bound_slack),
    _limit(cf.bound_relative_slack),
    _limit(cf.gd_risk_limit_mp, dps=20),
    _limit(cf.bayes_risk_limit_mp, dps=20),
    _limit(cf.risk_ratio_limit_mp, dps=20),
    _limit(cf.risk_ratio_bound_mp, dps=20),
    _limit(bayes.bound_relative_slack_mp, dps=20),
    _limit(bayes.bound_rho_mp, dps=20),
    E("bayes_risk_finite", cf.bayes_risk_finite, 1, setting=S, n_prompts=20, seed=0, batch_size=None),
    E("risk_ratio_finite", cf.risk_ratio_finite, 1, setting=S, n_prompts=20, seed=0),
    E(
        "approximation_error",
        approximation_error,
        3,
        gamma=0.1,
        eta=0.8,
        setting=S,
        n_prompts=50,
        seed=0,
        quantile=0.99,
        n_positive=1,
        n_negative=1,
    ),  # fmt: skip
    # only=None means every check (correct, but a minute long): that one value is not fuzzed
    E(
        "run_checks",
        lambda only: None if only is None else checks.run_checks(S, quick=True, only=only),
        0,
        only=["bayes_ratio"],
    ),  # fmt: skip
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES))
