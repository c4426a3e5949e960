"""API fuzz suite (harness tests/api_fuzz.py) for A's Σ modules: metrics, loss, expansion, limit, and the Σ model
through the one integrator (``reduced_model``, ``integrate``, the model's starts).

Each public function is called from a small valid baseline with ONE argument replaced by a hostile
value (all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings): the result
is finite or a ``ValueError`` / ``TypeError`` (``LossOverflowError`` is an ``OverflowError`` naming the
state) names a parameter; no ``RuntimeWarning``, a few seconds at most, bounded memory.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from reduced_dynamics import integrate, reduced_model, sample_prompts
from reduced_dynamics.precond.flow import normalise_precond_state, precond_initial_state, precond_limit
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
MODEL = reduced_model(S, n_heads=2)
Y0 = MODEL.state(OM, MU, W)

ENTRIES = [
    E("scale_free_distance", scale_free_distance, 2, A=W, B=SIG),
    E("abs_cosine", abs_cosine, 2, A=W, B=SIG),
    E("precond_loss", precond_loss, 4, omega=OM, mu=MU, W=W, setting=S),
    E("precond_loss_grad", precond_loss_grad, 4, omega=OM, mu=MU, W=W, setting=S),
    E("precond_risk_expansion", precond_risk_expansion, 4, omega=OM, mu=MU, W=W, setting=S),
    E("precond_limit", precond_limit, 1, setting=S),
    E("normalise_precond_state", normalise_precond_state, 4, omega=OM, mu=MU, W=W, setting=S),
    E(
        "integrate",
        integrate,
        2,
        fuzz=("model", "y0", "t_end", "method", "rtol", "atol", "n_times", "t_first", "times", "stationarity_tol"),
        model=MODEL,
        y0=Y0,
        t_end=1.0,
        method=None,
        rtol=1e-6,
        atol=1e-9,
        n_times=5,
        t_first=0.1,
        times=None,
        stationarity_tol=1e-10,
        budget=5000,
        rates=None,
    ),
    E("integrate_budget_rates", integrate, 2, fuzz=("budget", "rates"), model=MODEL, y0=Y0, t_end=1.0, budget=5000),
    E("reduced_model", reduced_model, 1, setting=S, n_heads=2, per_head=False),
    E("PrecondModel.state", MODEL.state, 3, omega=OM, mu=MU, W=W),
    E(
        "PrecondModel.initial_state",
        lambda seed, scale, n: MODEL.initial_state(seed=seed, scale=scale, n=n),
        0,
        seed=0,
        scale=0.01,
        n=None,
    ),
    E("precond_initial_state", precond_initial_state, 2, n_heads=2, setting=S, seed=0, scale=0.01),
    E("PrecondReducedModel", lambda omega, mu, W: PrecondReducedModel(omega, mu, W)(PROMPTS), 3, omega=OM, mu=MU, W=W),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES)
