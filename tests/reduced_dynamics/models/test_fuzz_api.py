"""API fuzz suite (harness tests/api_fuzz.py) for ``reduced_dynamics.models``: the public methods of every
reduced model (issue 23).

For each model of :data:`reduced_dynamics.models.MODELS` (on a small setting of its data model) its
methods -- ``unpack``, ``pack``, ``check_state``, ``loss``, ``grad``, ``hessian``, ``jacobian_fd``,
``margin``, ``in_range``, ``summarize``, ``summarize_many``, ``predictor``, ``reference_risks``,
``risk_plan``, ``estimate_risks``, ``manifold_point``, ``loss_per_task`` -- and the selector's
``model_class`` / ``model_name`` are called from a valid state with ONE argument replaced by a hostile value
(all magnitudes, NaN, inf, complex, wrong shapes and types, extreme valid settings, objects of the wrong
type). The contract: a finite result, or a ``ValueError`` / ``TypeError`` naming a parameter; no
``RuntimeWarning``, a few seconds at most, bounded memory. (``state`` / ``initial_state`` and the
isotropic model's ``pack`` are in tests/reduced_dynamics/dynamics/test_fuzz_api.py.)

``python tests/reduced_dynamics/models/test_fuzz_api.py`` prints the count of calls tried and of calls
that broke the contract, per callable.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np

from reduced_dynamics.models import model_class, model_name, reduced_model
from reduced_dynamics.setting import Setting

api_fuzz = importlib.import_module("api_fuzz")  # registered by tests/conftest.py
E = api_fuzz.E

SIG = np.array([[2.0, 0.3], [0.3, 0.5]])
TASKS = ((0,), (0, 1))
MODELS = {
    "isotropic": reduced_model(Setting(d=2, L=20, sigma2=0.1), n_heads=2),
    "corrected": reduced_model(Setting(d=2, L=20, sigma2=0.1), n_heads=2, objective="corrected"),
    "exact": reduced_model(Setting(d=2, L=20, sigma2=0.1), n_heads=2, objective="exact", tol=1e-8),
    "precond": reduced_model(Setting(d=2, L=20, sigma2=0.1, Sigma=SIG), n_heads=2),
    "activation": reduced_model(Setting(d=2, L=20, sigma2=0.1, activation="tanh"), n_heads=2),
    "multitask": reduced_model(Setting(d=2, L=20, sigma2=0.1, tasks=TASKS), n_heads=2),
    "precond_multitask": reduced_model(Setting(d=2, L=20, sigma2=0.1, Sigma=SIG, tasks=TASKS), n_heads=2),
}


def _state(model):
    y = model.initial_state(seed=0, scale=0.1)
    return y


def _entries(name, m):
    y = _state(m)
    parts = m.unpack(y)
    out = [
        E(f"{name}.unpack", m.unpack, 1, y=y),
        E(f"{name}.pack", lambda **kw: m.pack(**kw), 0, **{k: v.copy() for k, v in parts.items()}),
        E(f"{name}.check_state", lambda y: m.check_state(y, "y"), 1, y=y),  # (the name the caller gives)
        E(f"{name}.loss", m.loss, 1, y=y),
        E(f"{name}.grad", m.grad, 1, y=y),
        E(f"{name}.margin", m.margin, 1, y=y),
        E(f"{name}.in_range", m.in_range, 1, y=y),
        E(f"{name}.summarize", lambda y, t: m.summarize(y, t=t), 1, y=y, t=None),
        E(f"{name}.summarize_many", lambda Y, t: m.summarize_many(Y, t=t), 1, Y=np.stack([y, 2 * y]), t=None),
        E(f"{name}.reference_risks", m.reference_risks, 1, y=y),
    ]
    if name != "exact":  # the exact model's gradients are quadratures (its jacobian is tested elsewhere)
        out.append(E(f"{name}.jacobian_fd", lambda y, step: m.jacobian_fd(y, step=step), 1, y=y, step=1e-5))
    if m.has_hessian if hasattr(m, "has_hessian") else name in ("isotropic", "precond_multitask"):
        out.append(E(f"{name}.hessian", m.hessian, 1, y=y))
    if name != "precond_multitask":
        out.append(E(f"{name}.predictor", m.predictor, 1, y=y))
    if m.has_risks:
        y_plan = None if name == "precond" else y  # the Σ model's plan has no state
        out.append(E(f"{name}.risk_plan", m.risk_plan, 1, y=y_plan))
        plan = m.risk_plan(y_plan)
        out.append(
            E(
                f"{name}.estimate_risks",
                lambda plan, n_prompts, seed: m.estimate_risks(plan, n_prompts=n_prompts, seed=seed),
                1,
                plan=plan,
                n_prompts=20,
                seed=0,
            )
        )
    if hasattr(m, "manifold_point"):
        out.append(E(f"{name}.manifold_point", m.manifold_point, 1, gamma=0.1))
    if hasattr(m, "loss_per_task"):
        out.append(E(f"{name}.loss_per_task", m.loss_per_task, 1, y=y))
    return out


ENTRIES = [
    E("model_class", lambda model: model_class(model), 1, model="isotropic"),
    E("model_name", model_name, 1, setting=Setting(d=2, L=20, sigma2=0.1), objective="approx"),
    E("reduced_model_tasks", reduced_model, 1, setting=MODELS["multitask"].setting, n_heads=2),
    E("reduced_model_sigma_tasks", reduced_model, 1, setting=MODELS["precond_multitask"].setting, n_heads=2),
    E("reduced_model_activation", reduced_model, 1, setting=MODELS["activation"].setting, n_heads=2),
]
for _name, _m in MODELS.items():
    ENTRIES += _entries(_name, _m)

test_api_fuzz, test_api_hostile_values = api_fuzz.make_suite(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True)


if __name__ == "__main__":  # pragma: no cover - the measurement of the report
    sys.exit(api_fuzz.count(ENTRIES, extra=api_fuzz.hostile_objects(), overflow=True))
