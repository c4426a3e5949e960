"""API fuzz suite (harness tests/api_fuzz.py) for the parts of ``reduced_dynamics.model`` not in
tests/reduced_dynamics/estimation/test_fuzz_api.py: the optimiser steps, the training helpers, the
circuits, the models' constructors and methods (issue 23).

Every public callable is called from a small valid baseline with ONE argument replaced by a hostile value
(all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings, objects of the wrong
type). The contract: a finite result, or a ``ValueError`` / ``TypeError`` naming a parameter; no
``RuntimeWarning``, a few seconds at most, bounded memory. The in-place optimiser steps get fresh copies
of their arrays at every call.

``python tests/reduced_dynamics/model/test_fuzz_api.py`` prints the count of calls tried and of calls
that broke the contract, per callable.
"""

from __future__ import annotations

import functools
import importlib
import sys
import tempfile
from pathlib import Path

import numpy as np

from reduced_dynamics.estimation.prompts import sample_tokens
from reduced_dynamics.model import attention as at
from reduced_dynamics.model import circuits as ci
from reduced_dynamics.model import training as tr
from reduced_dynamics.setting import Setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

S = Setting(d=2, L=6, sigma2=0.1)
SIG = np.array([[2.0, 0.3], [0.3, 0.5]])
SS = Setting(d=2, L=6, sigma2=0.1, Sigma=SIG)
TH = np.array([0.1, -0.2, 0.3])
SEP = at.make_model("separate", n_heads=2, d=2)
SEP_P = SEP.init(seed=0)
RED = at.make_model("reduced", n_heads=2, d=2)
RED_P = {"omega": np.array([0.1, -0.1]), "mu": np.array([0.5, -0.5])}
TOK = sample_tokens(3, S, seed=0)
KQ, OV = SEP.circuits(SEP_P)
SEP_S = at.make_model("separate", n_heads=2, d=2)
SEP_S_P = SEP_S.init(seed=1)
KQ_S, OV_S = SEP_S.circuits(SEP_S_P)


def _c(a):
    return a.copy() if isinstance(a, np.ndarray) else a


def _adam(theta, grad, m, v, t, lr, beta1, beta2, eps):
    return tr.adam_update(_c(theta), grad, _c(m), _c(v), t, lr=lr, beta1=beta1, beta2=beta2, eps=eps)


def _sgd(theta, grad, lr):
    return tr.sgd_update(_c(theta), grad, lr=lr)


@functools.cache
def _run():
    """A two-step training run and its checkpoint."""
    out = Path(tempfile.mkdtemp(prefix="fuzz-model-"))
    cfg = tr.TrainConfig(S, seed=0, n_heads=2, steps=2, batch=4, n_snapshots=2)
    return tr.train(cfg, out=out, checkpoint_every=1), str(out / tr.CHECKPOINT_NAME)


def _load(path):
    # the argument is named in messages as its caller names it (train: `resume`); here `path`
    return tr.load_checkpoint(_run()[1] if isinstance(path, str) and path == "<ck>" else path, name="path")


def _summarize(n_prompts, seed, dummy_tol):
    return tr.summarize_run(_run()[0], n_prompts=n_prompts, seed=seed, dummy_tol=dummy_tol)


def _config(**kw):
    return tr.TrainConfig(**kw).to_dict()


ENTRIES = [
    # training.py: the optimiser steps and helpers
    E("adam_update", _adam, 5, theta=TH, grad=TH, m=TH * 0, v=TH * 0, t=1, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8),
    E("sgd_update", _sgd, 2, theta=TH, grad=TH, lr=1e-2),
    E("snapshot_steps", tr.snapshot_steps, 2, steps=100, n_snapshots=5),
    E("check_resume_state", tr.check_resume_state, 3, theta=TH, m=TH, v=TH * TH, where="here"),
    E("all_finite", lambda arrays: tr.all_finite(arrays), 1, arrays=TH),
    E(
        "TrainConfig",
        _config,
        0,
        setting=S,
        seed=0,
        n_heads=2,
        steps=10,
        batch=4,
        lr=1e-3,
        optimizer="adam",
        parameterisation="separate",
        beta1=0.9,
        beta2=0.999,
        eps=1e-8,
        n_snapshots=4,
        init_scale=0.1,
    ),
    E("TrainConfig.from_dict", tr.TrainConfig.from_dict, 1, data=tr.TrainConfig(S, seed=0).to_dict()),
    E("load_checkpoint", _load, 1, path="<ck>"),
    E("summarize_run", _summarize, 0, n_prompts=20, seed=0, dummy_tol=0.05),
    # attention.py
    E("make_model", at.make_model, 1, kind="reduced", n_heads=2, d=2, init_scale=0.1, norm_L=None, activation="tanh"),
    E(
        "AttentionModel",
        lambda n_heads, d, parameterisation, attention, norm_L, activation: at.AttentionModel(
            n_heads, d, parameterisation, attention, norm_L, activation
        ).init(seed=0),
        0,
        n_heads=2,
        d=2,
        parameterisation="merged",
        attention="softmax",
        norm_L=None,
        activation="exp",
    ),
    E("AttentionModel.init", lambda seed: SEP.init(seed=seed), 0, seed=0),
    E("AttentionModel.circuits", SEP.circuits, 1, params=SEP_P),
    E("AttentionModel.loss", SEP.loss, 2, params=SEP_P, batch=TOK),
    E("AttentionModel.predict", SEP.predict, 2, params=SEP_P, batch=TOK),
    E("ReducedModel.circuits", RED.circuits, 1, params=RED_P),
    E("ReducedModel.loss_and_grad", RED.loss_and_grad, 2, params=RED_P, batch=TOK),
    E("flatten_params", at.flatten_params, 1, params=RED_P),
    E("unflatten_params", at.unflatten_params, 2, flat=np.arange(4.0), shapes={"omega": (2,), "mu": (2,)}),
    # circuits.py
    E("circuits_from_arrays", ci.circuits_from_arrays, 2, KQ=KQ, ov=OV, dummy_tol=0.05),
    E("pattern_metrics", ci.pattern_metrics, 1, circuits=ci.circuits_from_arrays(KQ, OV)),
    E("Circuits.manifold_gap", lambda setting: ci.circuits_from_arrays(KQ, OV).manifold_gap(setting), 1, setting=S),
    E("precond_circuits_from_arrays", ci.precond_circuits_from_arrays, 3, KQ=KQ_S, ov=OV_S, setting=SS, dummy_tol=0.05),
    E(
        "extract_precond_circuits",
        ci.extract_precond_circuits,
        3,
        model=SEP_S,
        params=SEP_S_P,
        setting=SS,
        dummy_tol=0.05,
    ),
    # n_prompts is not fuzzed: every valid value (up to 1e7) is a legitimate Monte Carlo run of minutes
    E(
        "precond_cross_check",
        ci.precond_cross_check,
        3,
        fuzz=("model", "params", "setting", "seed", "chunk", "dummy_tol"),
        model=SEP_S,
        params=SEP_S_P,
        setting=SS,
        n_prompts=20,
        seed=0,
        chunk=8,
        dummy_tol=0.05,
    ),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True))
