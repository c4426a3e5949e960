"""API fuzz suite (harness tests/api_fuzz.py) for ``reduced_dynamics.exact``: drift, evaluator, expansion,
single_head (issue 23).

Every public callable is called from a small valid baseline with ONE argument replaced by a hostile value
(all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings, settings of the other
data models). The contract: a finite result, or a ``ValueError`` / ``TypeError`` naming a parameter; no
``RuntimeWarning``, a few seconds at most, bounded memory. The sympy series are fuzzed at low orders
(cached after their first call).

``python tests/reduced_dynamics/exact/test_fuzz_api.py`` prints the count of calls tried and of calls
that broke the contract, per callable.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np

from reduced_dynamics.exact import drift as dr
from reduced_dynamics.exact import evaluator as ev
from reduced_dynamics.exact import expansion as ex
from reduced_dynamics.exact import single_head as sh
from reduced_dynamics.setting import Setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

S = Setting(d=2, L=20, sigma2=0.1)
G = np.array([[0.3, -0.2, 0.5, 0.1, -0.4, 0.0] * 3 + [0.2, -0.1]])  # scores of one prompt, L = 20
R2 = np.array([1.3])

ENTRIES = [
    # drift.py
    E("exact_drift_rate", dr.exact_drift_rate, 2, gamma=0.1, setting=S, n_positive=1, n_negative=1, eta=None, order=4),
    E("drift_time_scales", dr.drift_time_scales, 1, setting=S, n_positive=1, n_negative=1),
    E(
        "exact_drift_gamma",
        dr.exact_drift_gamma,
        2,
        t=[1.0, 10.0],
        setting=S,
        gamma0=0.1,
        t0=0.0,
        n_positive=1,
        n_negative=1,
        eta=None,
        order=4,
        rtol=1e-8,
    ),
    E("manifold_excess_mc", dr.manifold_excess_mc, 2, gamma=0.1, setting=S, n_prompts=100, seed=0, eta=None, chunk=50),
    E("manifold_excess_exact", dr.manifold_excess_exact, 2, gamma=0.1, setting=S, eta=None, tol=1e-8),
    E(
        "richardson_coefficients",
        dr.richardson_coefficients,
        1,
        setting=S,
        eta=None,
        gamma=(0.01, 0.02, 0.03, 0.04),
        fit_degree=2,
        tol=1e-10,
    ),
    E(
        "exact_manifold_minimum",
        dr.exact_manifold_minimum,
        1,
        setting=S,
        bracket=None,
        gamma_tol=1e-2,
        tol=1e-8,
        hessian=False,
    ),
    # evaluator.py
    E("exact_risk", ev.exact_risk, 3, omega=[0.1, -0.1], mu=[0.5, -0.5], setting=S, grad=True, tol=1e-8),
    E("omega_max", ev.omega_max, 1, setting=S),
    # expansion.py
    E("power_sum_moment", ex.power_sum_moment, 1, ks=(1, 2)),
    E("softmax_series_coefficients", ex.softmax_series_coefficients, 1, order=2),
    E("derive_manifold_expansion", ex.derive_manifold_expansion, 1, order=2),
    E("exact_manifold_coefficients", ex.exact_manifold_coefficients, 2, eta=0.8, setting=S),
    E("dgd_risk", ex.dgd_risk, 2, eta=0.8, setting=S),
    E("manifold_minimiser_estimate", ex.manifold_minimiser_estimate, 1, setting=S),
    E("pathwise_gamma_coefficients", ex.pathwise_gamma_coefficients, 4, g=G, r2=R2, eta=0.8, setting=S, order=2),
    # single_head.py
    E("single_head_limit", sh.single_head_limit, 1, setting=S),
    E("corrected_loss_error_exponent", sh.corrected_loss_error_exponent, 1, omega=0.5),
    E("exact_single_head_profile", sh.exact_single_head_profile, 2, omega=0.5, setting=S, tol=1e-8),
    E(
        "exact_single_head_optimum",
        sh.exact_single_head_optimum,
        1,
        setting=S,
        tol=1e-8,
        omega_tol=1e-3,
        bracket=None,
    ),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True))
