"""API fuzz suite (harness tests/api_fuzz.py) for A's Σ modules: metrics, loss, expansion, flow, limit.

Each public function is called from a small valid baseline with ONE argument replaced by a hostile
value (all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings): the result
is finite or a ``ValueError`` / ``TypeError`` (``LossOverflowError`` is an ``OverflowError`` naming the
state) names a parameter; no ``RuntimeWarning``, a few seconds at most, bounded memory.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from reduced_dynamics import sample_prompts
from reduced_dynamics.precond.flow import (
    integrate_precond_flow,
    normalise_precond_state,
    precond_initial_state,
    precond_limit,
)
from reduced_dynamics.precond.loss import (
    PrecondReducedModel,
    precond_loss,
    precond_loss_grad,
    precond_risk_expansion,
)
from reduced_dynamics.precond.metrics import abs_cosine, scale_free_distance
from reduced_dynamics.setting import Setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

SIG = np.array([[2.0, 0.3], [0.3, 0.5]])
S = Setting(d=2, L=6, sigma2=0.1, Sigma=SIG)
W = np.array([[0.4, 0.1], [0.1, 1.5]])
OM, MU = np.array([0.2, -0.2]), np.array([1.0, -1.0])
PROMPTS = sample_prompts(8, S, seed=0)

ENTRIES = [
    E("scale_free_distance", scale_free_distance, 2, A=W, B=SIG),
    E("abs_cosine", abs_cosine, 2, A=W, B=SIG),
    E("precond_loss", precond_loss, 4, omega=OM, mu=MU, W=W, setting=S),
    E("precond_loss_grad", precond_loss_grad, 4, omega=OM, mu=MU, W=W, setting=S),
    E("precond_risk_expansion", precond_risk_expansion, 4, omega=OM, mu=MU, W=W, setting=S),
    E("precond_limit", precond_limit, 1, setting=S),
    E("normalise_precond_state", normalise_precond_state, 4, omega=OM, mu=MU, W=W, setting=S),
    E(
        "integrate_precond_flow",
        integrate_precond_flow,
        4,
        fuzz=("omega0", "mu0", "W0", "setting", "t_end", "rtol", "atol", "n_times", "t_first"),
        omega0=OM,
        mu0=MU,
        W0=W,
        setting=S,
        t_end=1.0,
        rtol=1e-6,
        atol=1e-9,
        n_times=5,
        t_first=0.1,
    ),
    E("precond_initial_state", precond_initial_state, 2, n_heads=2, setting=S, seed=0, scale=0.01),
    E("PrecondReducedModel", lambda omega, mu, W: PrecondReducedModel(omega, mu, W)(PROMPTS), 3, omega=OM, mu=MU, W=W),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES)
