"""API fuzz suite (harness tests/api_fuzz.py) for ``reduced_dynamics.activation_dynamics`` (loss, flow) and
``reduced_dynamics.activations`` (issue 23).

Every public callable is called from a small valid baseline with ONE argument replaced by a hostile value
(all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings, objects of the wrong
type, settings of the other data models). The contract: a finite result, or a ``ValueError`` /
``TypeError`` naming a parameter; no ``RuntimeWarning``, a few seconds at most, bounded memory.

``python tests/reduced_dynamics/activation_dynamics/test_fuzz_api.py`` prints the count of calls tried and
of calls that broke the contract, per callable.
"""

from __future__ import annotations

import functools
import importlib
import sys
import tempfile
from pathlib import Path

import numpy as np

from reduced_dynamics.activation_dynamics import flow as af
from reduced_dynamics.activation_dynamics import loss as al
from reduced_dynamics.activations import Activation, check_normaliser, get_activation
from reduced_dynamics.model.attention import make_model
from reduced_dynamics.setting import Setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

S = Setting(d=2, L=20, sigma2=0.1, activation="tanh")
SQ = Setting(d=2, L=20, sigma2=0.1, activation="square", activation_c=0.5)
TANH = get_activation("tanh")
OM, MU = np.array([0.3, -0.3]), np.array([0.8, -0.8])
RED = make_model("reduced", n_heads=2, d=2, activation=TANH)
RED_P = {"omega": OM, "mu": MU}


@functools.cache
def _checkpoint() -> str:
    """A tiny trained activation run (two steps), its ``checkpoint.npz`` in a temporary folder."""
    from reduced_dynamics.model.training import TrainConfig, train

    out = Path(tempfile.mkdtemp(prefix="fuzz-act-"))
    cfg = TrainConfig(S, seed=0, n_heads=2, steps=2, batch=4, parameterisation="reduced", n_snapshots=2)
    train(cfg, out=out, checkpoint_every=1)
    return str(out / "checkpoint.npz")


def _report(checkpoint, n_prompts, seed):
    return af.trained_activation_report(
        _checkpoint() if isinstance(checkpoint, str) and checkpoint == "<ck>" else checkpoint,
        n_prompts=n_prompts,
        seed=seed,
    )


ENTRIES = [
    # activations.py
    # as Setting calls it: its messages name the Setting fields `activation`, `activation_c`
    E(
        "get_activation",
        lambda activation, activation_c: get_activation(activation, activation_c),
        2,
        activation="square",
        activation_c=0.5,
    ),
    E("Activation.f", lambda x: Activation("square", 0.5).f(x), 1, x=[0.1, -0.3]),
    E("Activation.df", lambda x: TANH.df(x), 1, x=[0.1, -0.3]),
    E("Activation.taylor", lambda order: TANH.taylor(order), 1, order=3),
    E("check_normaliser", check_normaliser, 2, s=np.array([1.0, 2.0]), where="here", tol=1e-12),
    # loss.py
    E("tilt_ratio", al.tilt_ratio, 2, t=[0.1, 0.3], activation=TANH, method="auto"),
    E("fluctuation_kernel", al.fluctuation_kernel, 3, t1=[0.1, 0.3], t2=[0.2, -0.3], activation=TANH, method="auto"),
    E("act_terms", al.act_terms, 2, omega=OM, setting=S, method="auto", query_nodes=16),
    E("act_loss", al.act_loss, 3, omega=OM, mu=MU, setting=S, method="auto", query_nodes=16),
    E("act_loss_grad", al.act_loss_grad, 3, omega=OM, mu=MU, setting=S, method="auto", query_nodes=16),
    # n_prompts is not fuzzed where every valid value (up to 1e7) is a legitimate Monte Carlo run of minutes
    E(
        "act_mc_risk",
        al.act_mc_risk,
        3,
        fuzz=("omega", "mu", "setting", "seed"),
        omega=OM,
        mu=MU,
        setting=S,
        n_prompts=50,
        seed=0,
    ),
    # flow.py
    E("tilt_cubic", af.tilt_cubic, 1, activation="tanh"),
    E("act_limit", af.act_limit, 1, setting=S),
    E("drift_gamma", af.drift_gamma, 2, t=[1.0, 10.0], setting=S),
    E("manifold_profile", af.manifold_profile, 2, gamma=[0.1, 0.2], setting=S),
    E("manifold_profile_square", af.manifold_profile, 2, gamma=[0.1, 0.2], setting=SQ),
    E("eta_claim", af.eta_claim, 3, omega=OM, mu=MU, setting=S),
    E("eta_tilt", af.eta_tilt, 3, omega=OM, mu=MU, setting=S),
    E(
        "eta_eff_regression",
        af.eta_eff_regression,
        3,
        fuzz=("model", "params", "setting", "seed"),
        model=RED,
        params=RED_P,
        setting=S,
        n_prompts=50,
        seed=0,
    ),
    E("manifold_risk_scan", af.manifold_risk_scan, 2, gamma=[0.1, 0.2], setting=S, n_prompts=50, seed=0),
    E("trained_activation_report", _report, 0, checkpoint="<ck>", n_prompts=50, seed=0),
]

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True))
