"""API fuzz suite for estimation, the attention models and the cross-checks (issue 9).

The public functions of ``reduced_dynamics.estimation`` (prompts, predictors, the risk
engine), ``reduced_dynamics.model`` (models, evaluators, training config) and
``reduced_dynamics.crosscheck`` are called from a small valid baseline with ONE argument
replaced by a hostile value: numbers across all magnitudes (1e-320 .. 1e300, 0, negative),
NaN, inf, complex scalars and arrays, wrong and mismatched shapes, wrong types, huge
integers, and extreme but valid settings (``L = 10⁹``, ``d = 10⁵``, ``σ² = 10¹²``). The
contract:

* the call returns a result whose every number is finite, or
* it raises ``ValueError`` / ``TypeError`` whose message names a parameter of the function
  (or a field of the setting), and
* it emits no ``RuntimeWarning``/``ComplexWarning``, finishes within a few seconds and stays
  within a memory limit (the fuzz runs under ``RLIMIT_AS``: a request for gigabytes must be
  refused up front, not attempted).

Hypothesis draws the examples (derandomised, a bounded number per function);
``python tests/reduced_dynamics/estimation/test_fuzz_api.py`` prints the count of calls tried
and of calls that broke the contract (measured for the issue: see the report).
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

from reduced_dynamics.crosscheck import CovariateSample, mc_risk_and_grad, single_head_profile, trajectory_discrepancy
from reduced_dynamics.crosscheck.single_head_mc import single_head_mc_optimum
from reduced_dynamics.estimation.predictors import (
    BayesRidge,
    DebiasedGD,
    LinearAttention,
    MultiHead,
    SingleHead,
    VanillaGD,
    Zero,
    conditional_loss,
)
from reduced_dynamics.estimation.prompts import Prompts, sample_prompts, sample_tokens
from reduced_dynamics.estimation.risk import (
    control_variate_risk,
    estimate_risk,
    estimate_risks,
    plan_chunks,
)
from reduced_dynamics.model.attention import make_model
from reduced_dynamics.model.circuits import extract_circuits
from reduced_dynamics.model.training import TrainConfig, cross_check, length_generalisation, mc_risk, train
from reduced_dynamics.setting import Setting

# The shared harness tests/api_fuzz.py, loaded by path (tests/ is not a package and is not put on
# sys.path, where its reduced_dynamics/ folder would shadow the package).
api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py


S = Setting(d=2, L=6, sigma2=0.1)
S20 = Setting(d=2, L=20, sigma2=0.1)
W2, M2 = [0.1, -0.1], [0.5, -0.5]
P_STATS = sample_prompts(3, S, seed=0, stats_only=True)
P_FULL = sample_prompts(3, S, seed=0)
TOK = sample_tokens(3, S, seed=0)
RED = make_model("reduced", n_heads=2, d=2)
RED_P = {"omega": np.array(W2), "mu": np.array(M2)}
SEP = make_model("separate", n_heads=2, d=2)
SEP_P = SEP.init(seed=0)
SAMPLE = CovariateSample(20, S, seed=0)
TRAJ = np.array([[0.1, -0.1], [0.2, -0.2]]), np.array([[1.0, -1.0], [1.5, -1.5]])

EXTREME_SETTINGS = api_fuzz.EXTREME_SETTINGS
E = api_fuzz.E


def _train(setting, steps, batch, lr, n_heads, init_scale):
    cfg = TrainConfig(setting, seed=0, steps=steps, batch=batch, lr=lr, n_heads=n_heads, init_scale=init_scale)
    return train(cfg).losses


ENTRIES = [
    # prompts.py
    E("sample_prompts", sample_prompts, 2, n_prompts=3, setting=S, seed=0, stats_only=False, covariates_only=False),
    E(
        "sample_prompts_stats",
        sample_prompts,
        2,
        fuzz=("n_prompts", "setting"),
        n_prompts=3,
        setting=S,
        seed=0,
        stats_only=True,
    ),  # fmt: skip
    E("sample_tokens", sample_tokens, 2, n_prompts=3, setting=S, seed=0),
    E("Prompts.from_arrays", Prompts.from_arrays, 4, X=P_FULL.X, y=P_FULL.y, x_q=P_FULL.x_q, y_q=P_FULL.y_q),
    E(
        "Prompts.from_stats",
        Prompts.from_stats,
        4,
        scores=P_STATS.scores,
        xq_norm2=P_STATS.xq_norm2,
        y=P_STATS.y,
        y_q=P_STATS.y_q,
    ),  # fmt: skip
    # predictors.py
    E("MultiHead", lambda omega, mu, prompts: MultiHead(omega, mu)(prompts), 3, omega=W2, mu=M2, prompts=P_STATS),
    E(
        "MultiHead.weights",
        lambda omega, mu, prompts: MultiHead(omega, mu).weights(prompts),
        3,
        omega=W2,
        mu=M2,
        prompts=P_STATS,
    ),  # fmt: skip
    E("SingleHead", lambda omega, mu, prompts: SingleHead(omega, mu)(prompts), 3, omega=0.4, mu=1.0, prompts=P_STATS),
    E("SingleHead.optimum", SingleHead.optimum, 1, setting=S),
    E("VanillaGD", lambda eta, prompts: VanillaGD(eta)(prompts), 2, eta=0.8, prompts=P_STATS),
    E("DebiasedGD", lambda eta, prompts: DebiasedGD(eta)(prompts), 2, eta=0.8, prompts=P_STATS),
    E("DebiasedGD.weights", lambda eta, prompts: DebiasedGD(eta).weights(prompts), 2, eta=0.8, prompts=P_STATS),
    E(
        "LinearAttention",
        lambda omega, mu, prompts: LinearAttention(omega, mu)(prompts),
        3,
        omega=W2,
        mu=M2,
        prompts=P_STATS,
    ),  # fmt: skip
    E("BayesRidge", lambda lam, prompts: BayesRidge(lam)(prompts), 2, lam=0.5, prompts=P_FULL),
    E("BayesRidge.weights", lambda lam, prompts: BayesRidge(lam).weights(prompts), 2, lam=0.5, prompts=P_FULL),
    E("conditional_loss", conditional_loss, 2, prompts=P_STATS, w=np.full((3, 6), 0.1), setting=S),
    E("conditional_loss_full", conditional_loss, 2, prompts=P_FULL, w=np.full((3, 6), 0.1), setting=S),
    # risk.py
    E(
        "estimate_risks",
        estimate_risks,
        2,
        predictors=[Zero(), DebiasedGD(0.8)],
        setting=S,
        n_prompts=50,
        seed=0,
        sampler="auto",
        conditional=False,
        memory_budget=2**20,
    ),  # fmt: skip
    E(
        "estimate_risk",
        estimate_risk,
        2,
        predictor=MultiHead(W2, M2),
        setting=S,
        n_prompts=50,
        seed=0,
        conditional=True,
    ),  # fmt: skip
    E(
        "estimate_risk_ridge",
        estimate_risk,
        2,
        fuzz=("setting", "n_prompts"),
        predictor=BayesRidge(),
        setting=S,
        n_prompts=20,
        seed=0,
    ),  # fmt: skip
    E(
        "control_variate_risk",
        control_variate_risk,
        3,
        predictor=DebiasedGD(0.8),
        control=Zero(),
        setting=S,
        control_risk=1.1,
        n_prompts=50,
        seed=0,
    ),  # fmt: skip
    E(
        "plan_chunks",
        plan_chunks,
        2,
        n_prompts=100,
        setting=S,
        sampler="stats",
        n_heads=1,
        n_predictors=1,
        memory_budget=2**20,
    ),  # fmt: skip
    # model
    E("make_model", make_model, 1, kind="separate", n_heads=2, d=2, init_scale=0.1, norm_L=None),
    E("model.predict", lambda params, batch: RED.predict(params, batch), 2, params=RED_P, batch=TOK),
    E("model.loss_and_grad", lambda params, batch: SEP.loss_and_grad(params, batch), 2, params=SEP_P, batch=TOK),
    E("extract_circuits", extract_circuits, 2, model=SEP, params=SEP_P, dummy_tol=0.05),
    E("mc_risk", mc_risk, 3, model=RED, params=RED_P, setting=S, n_prompts=20, seed=0, chunk=8),
    E("cross_check", cross_check, 3, model=SEP, params=SEP_P, setting=S, n_prompts=20, seed=0, chunk=8),
    E(
        "length_generalisation",
        length_generalisation,
        3,
        model=RED,
        params=RED_P,
        setting=S,
        Ls=[5, 10],
        n_prompts=10,
        seed=0,
    ),  # fmt: skip
    E("TrainConfig+train", _train, 6, setting=S, steps=2, batch=4, lr=1e-3, n_heads=2, init_scale=0.1),
    # crosscheck
    E("CovariateSample", CovariateSample, 2, n_prompts=20, setting=S, seed=0, block_size=None),
    E("mc_risk_and_grad", mc_risk_and_grad, 3, omega=W2, mu=M2, sample=SAMPLE),
    E("single_head_profile", single_head_profile, 2, omega=0.5, sample=SAMPLE),
    E("single_head_mc_optimum", single_head_mc_optimum, 1, setting=S20, n_prompts=500, seed=0, xatol=1e-3),
    E(
        "trajectory_discrepancy",
        trajectory_discrepancy,
        4,
        omega_a=TRAJ[0],
        mu_a=TRAJ[1],
        omega_b=TRAJ[0],
        mu_b=TRAJ[1],
    ),  # fmt: skip
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES))
