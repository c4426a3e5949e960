"""The public API is declared in one place and every name in __all__ exists."""

import importlib
import pkgutil

import pytest

import proofs_check
import reduced_dynamics
from reduced_dynamics import flow as engine
from reduced_dynamics import models

#: the one engine (0.2, docs/migration.md): a model per data model, one integrator, one result type, one status
#: table, the scalar-heads start; the drivers and result types it replaced are removed, not deprecated
ENGINE = ("reduced_model", "MODELS", "integrate", "gradient_descent", "Flow", "Final", "Status", "initial_state")


@pytest.mark.parametrize("mod", [reduced_dynamics, proofs_check])
def test_all_names_exist(mod):
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert not missing
    assert len(set(mod.__all__)) == len(mod.__all__)


def test_the_engine_is_public_and_is_the_one_flow_api():
    public = set(reduced_dynamics.__all__)
    assert set(ENGINE) <= public
    # the one integrator and the one result type: no other flow driver or flow result is exported (the names
    # with "flow" besides Flow are the SGD cross-check, a closed form and the overflow error)
    assert {n for n in public if "flow" in n.lower()} == {
        "Flow",
        "sgd_vs_flow",
        "SgdFlowComparison",
        "flow_eta_gap",
        "LossOverflowError",
    }
    assert not {n for n in public if n.startswith("integrate") and n != "integrate"}
    assert (
        reduced_dynamics.integrate is engine.integrate and reduced_dynamics.gradient_descent is engine.gradient_descent
    )
    assert (reduced_dynamics.Flow, reduced_dynamics.Final, reduced_dynamics.Status) == (
        engine.Flow,
        engine.Final,
        engine.Status,
    )
    assert reduced_dynamics.reduced_model is models.reduced_model and reduced_dynamics.MODELS is models.MODELS
    assert sorted(reduced_dynamics.MODELS) == [
        "activation",
        "corrected",
        "exact",
        "isotropic",
        "multitask",
        "precond",
        "precond_multitask",
    ]


@pytest.mark.parametrize("package", ["reduced_dynamics.dynamics", "reduced_dynamics.exact"])
def test_the_driver_modules_of_the_core_and_the_exact_risk_are_gone(package):
    pkg = importlib.import_module(package)
    assert not [m.name for m in pkgutil.iter_modules(pkg.__path__) if "flow" in m.name]


@pytest.mark.parametrize(
    "package,module",
    [
        ("reduced_dynamics.precond", "flow"),
        ("reduced_dynamics.activation_dynamics", "flow"),
        ("reduced_dynamics.multitask", "flow"),
        ("reduced_dynamics.dynamics", "corrected_loss"),
    ],
)
def test_the_extension_modules_keep_their_theory_and_no_driver(package, module):
    """Their limits, normalisations and classifications stay; what integrated a flow (or drew its start, or held
    its result) is the engine's now."""
    mod = importlib.import_module("." + module, package)
    names = set(getattr(mod, "__all__", ())) | {n for n in vars(mod) if not n.startswith("_")}
    drivers = {n for n in names if n.startswith("integrate") or n.endswith("end_state") or n.startswith("random_")}
    results = {n for n in names if n.endswith("Result") and "Flow" in n}
    assert not drivers and not results
