"""API fuzz suite (harness tests/api_fuzz.py) for ``reduced_dynamics.setting`` (the fields and methods not in
tests/reduced_dynamics/dynamics/test_fuzz_api.py: Σ, tasks, activation, the ``require_*`` checks, the
covariance) and ``reduced_dynamics.derive.symbolic`` (the entry points not fuzzed there) (issue 23).

Each callable is called from a small valid baseline with ONE argument replaced by a hostile value (all
magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings, objects of the wrong type).
The contract: a finite result, or a ``ValueError`` / ``TypeError`` naming a parameter; no
``RuntimeWarning``, a few seconds at most, bounded memory. The sympy entry points use one head (cached).

``python tests/reduced_dynamics/test_fuzz_setting_derive.py`` prints the count of calls tried and of calls
that broke the contract, per callable.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np

from reduced_dynamics.derive import symbolic
from reduced_dynamics.setting import Setting, as_setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

SIG = np.array([[2.0, 0.3], [0.3, 0.5]])
S = Setting(d=2, L=20, sigma2=0.1)


def _setting(**kw):
    return Setting(**kw).to_dict()


ENTRIES = [
    E(
        "Setting_extensions",
        _setting,
        0,
        d=2,
        L=20,
        sigma2=0.1,
        Sigma=SIG,
        tasks=None,
        activation="exp",
        activation_c=1.0,
    ),
    E("Setting_tasks", _setting, 0, fuzz=("tasks",), d=3, L=20, sigma2=0.1, tasks=((0,), (1, 2))),
    E("Setting_activation", _setting, 0, fuzz=("activation", "activation_c"), activation="affine", activation_c=0.5),
    E(
        "Setting.covariance",
        lambda d_max, where: Setting(d=2, Sigma=SIG).covariance(d_max=d_max, where=where),
        0,
        d_max=10,
        where="here",
    ),
    E("Setting.require_scalar", lambda where: S.require_scalar(where), 1, where="here"),
    E("Setting.require_softmax", lambda where: S.require_softmax(where), 1, where="here"),
    E("Setting.require_isotropic", lambda where: S.require_isotropic(where), 1, where="here"),
    E("Setting.theory_range_issues", lambda statement: S.theory_range_issues(statement), 1, statement="drift-law"),
    E("as_setting_where", as_setting, 2, fuzz=("where",), setting=S, where="here"),
    # derive/symbolic.py
    E("loss_hessian", symbolic.loss_hessian, 1, H=1),
    E("sympy2numpy", symbolic.sympy2numpy, 2, expr=symbolic.closed_form_loss(1), H=1),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True))
