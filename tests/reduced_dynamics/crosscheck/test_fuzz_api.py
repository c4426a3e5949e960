"""API fuzz suite (harness tests/api_fuzz.py) for the cross-checks not in
tests/reduced_dynamics/estimation/test_fuzz_api.py: SGD vs the flow, the rated flows (issue 23).

Every public callable is called from a small valid baseline with ONE argument replaced by a hostile value
(all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings, objects of the wrong
type). The contract: a finite result, or a ``ValueError`` / ``TypeError`` naming a parameter; no
``RuntimeWarning``, a few seconds at most, bounded memory.

``python tests/reduced_dynamics/crosscheck/test_fuzz_api.py`` prints the count of calls tried and of calls
that broke the contract, per callable.
"""

from __future__ import annotations

import importlib
import sys

from reduced_dynamics.crosscheck import CovariateSample, mc_flow, preconditioned_flow, sgd_omega_rate, sgd_vs_flow
from reduced_dynamics.setting import Setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

S = Setting(d=2, L=20, sigma2=0.1)
W2, M2 = [0.1, -0.1], [0.5, -0.5]
SAMPLE = CovariateSample(20, S, seed=0)

ENTRIES = [
    E("sgd_omega_rate", sgd_omega_rate, 2, parameterisation="merged", setting=S),
    E(
        "preconditioned_flow",
        preconditioned_flow,
        4,
        omega0=W2,
        mu0=M2,
        times=[0.0, 1.0],
        setting=S,
        omega_rate=0.5,
        rtol=1e-6,
        atol=1e-9,
    ),
    E("mc_flow", mc_flow, 4, omega0=W2, mu0=M2, times=[0.0, 0.5], sample=SAMPLE, omega_rate=1.0, rtol=1e-4, atol=1e-6),
    E(
        "sgd_vs_flow",
        sgd_vs_flow,
        1,
        setting=S,
        seed=0,
        n_heads=2,
        parameterisation="reduced",
        lr=1e-2,
        sgd_steps=4,
        batch=4,
        warmup_steps=2,
        warmup_lr=1e-2,
        n_records=3,
        time_scale=1.0,
        flow_setting=None,
        init_scale=0.1,
        init_params=None,
        omega_rate=None,
        reference="approx",
        mc_n=50,
        mc_seed=None,
    ),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True))
