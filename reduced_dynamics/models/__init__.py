"""Reduced models: one object per data model and objective, chosen from the :class:`~reduced_dynamics.Setting`.

:func:`reduced_model` is the one selector: it reads ``Sigma``, ``tasks`` and ``activation``
from the setting and the ``objective`` (``"approx"``: the large-L loss L̃; ``"corrected"``:
the risk to order 1/L; ``"exact"``: the exact finite-L risk) and returns the model that owns
its formulas. A combination whose reduced model is not derived is refused here, once, with
one line naming the fields. :data:`MODELS` registers every model: adding one is a module and
one line here.

Examples
--------
>>> from reduced_dynamics import Setting, reduced_model
>>> reduced_model(Setting(d=5, L=40, sigma2=0.1), n_heads=2)
IsotropicModel(setting=Setting(d=5, L=40, sigma2=0.1), n_heads=2)
>>> reduced_model(Setting.paper_multitask(), n_heads=3).name
'multitask'
"""

from __future__ import annotations

import importlib

from reduced_dynamics.models._base import Part, ReducedModel
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["reduced_model", "MODELS", "OBJECTIVES", "ReducedModel", "Part", "model_class", "model_name"]

#: name -> "module:Class" (imported on first use)
MODELS = {
    "isotropic": "reduced_dynamics.models.isotropic:IsotropicModel",
    "corrected": "reduced_dynamics.models.corrected:CorrectedModel",
    "exact": "reduced_dynamics.models.exact:ExactModel",
    "precond": "reduced_dynamics.models.precond:PrecondModel",
    "activation": "reduced_dynamics.models.activation:ActivationModel",
    "multitask": "reduced_dynamics.models.multitask:MultitaskModel",
    "precond_multitask": "reduced_dynamics.models.precond_multitask:PrecondMultitaskModel",
}

OBJECTIVES = ("approx", "corrected", "exact")


def model_class(name: str) -> type:
    """The class registered under ``name`` in :data:`MODELS`."""
    if not isinstance(name, str) or name not in MODELS:
        raise ValueError(f"`model` must be one of {sorted(MODELS)}, got {name!r}")
    mod, cls = MODELS[name].split(":")
    return getattr(importlib.import_module(mod), cls)


def model_name(setting: Setting, *, objective: str = "approx") -> str:
    """The name of the model :func:`reduced_model` picks for ``setting`` and ``objective`` (or ValueError)."""
    setting = as_setting(setting, "reduced_model")
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise ValueError(f"`objective` must be one of {list(OBJECTIVES)}, got {objective!r}")
    sigma = setting.Sigma is not None
    tasks = setting.tasks is not None
    act = setting.activation != "exp"
    extensions = [
        n for n, on in (("setting.Sigma", sigma), ("setting.tasks", tasks), ("setting.activation", act)) if on
    ]
    if objective != "approx":
        if extensions:
            raise ValueError(
                f"`objective` {objective!r} is derived for the isotropic softmax single-task model only; "
                f"{' and '.join(f'`{e}`' for e in extensions)} must be left at the default"
            )
        return objective
    if act and (sigma or tasks):
        raise ValueError(
            f"`setting.activation` {setting.activation!r} together with "
            f"{' and '.join(f'`{e}`' for e in extensions if e != 'setting.activation')} is not derived "
            "(derived: an activation alone, Σ, tasks, Σ with tasks)"
        )
    if sigma and tasks:
        return "precond_multitask"
    if sigma:
        return "precond"
    if tasks:
        return "multitask"
    if act:
        return "activation"
    return "isotropic"


def reduced_model(setting: Setting, *, n_heads: int, objective: str = "approx", **layout) -> ReducedModel:
    """The reduced model of ``setting`` for ``objective``, with ``n_heads`` heads.

    Parameters
    ----------
    setting : Setting
        Scalar. ``Sigma``, ``tasks`` and ``activation`` choose the model.
    n_heads : int
        Number of heads H.
    objective : {"approx", "corrected", "exact"}
        ``"approx"`` (default): the large-L loss of the data model; ``"corrected"``: the isotropic
        risk to order 1/L; ``"exact"``: the isotropic exact finite-L risk.
    **layout
        Model options: ``exponent_cap`` (isotropic), ``per_head`` (Σ), ``tol`` and ``fd_step``
        (exact). An option the chosen model does not take is refused.

    Returns
    -------
    ReducedModel

    Raises
    ------
    ValueError
        An unknown objective, an option the model does not take, or a combination of ``Sigma``,
        ``tasks``, ``activation`` and ``objective`` that is not derived (one line naming them).
    """
    name = model_name(setting, objective=objective)
    cls = model_class(name)
    try:
        return cls(setting, n_heads=n_heads, **layout)
    except TypeError as exc:
        if "unexpected keyword" in str(exc):
            bad = sorted(layout)
            raise ValueError(f"the {name} model takes no option {bad} (its options: see {cls.__name__})") from None
        raise
