"""One command-line dispatch: the setting and ``--objective`` pick the model; one table says which flags it takes.

Every command that integrates, evaluates or trains a reduced model (``run``, ``risk``, ``train``) builds its :class:`~reduced_dynamics.Setting` from the flags, asks
:func:`reduced_dynamics.reduced_model` for the model, and checks here, in one place, that the command
serves that model and that every flag the user typed applies to it (:data:`MODEL_FLAGS`). A model the
command does not serve, or a flag that does not apply, is refused with one line naming the flags (exit
2), never silently ignored. The library's names of setting fields map to the flags that set them
(:data:`SETTING_FLAGS`), so a refusal from the selector names the flag the user typed.
"""

from __future__ import annotations

__all__ = [
    "MODEL_FLAGS",
    "SETTING_FLAGS",
    "COMMAND_SERVES",
    "typed_flags",
    "check_model_flags",
    "model_from_args",
]

#: library names of the setting fields -> the flags that set them (for the one error line)
SETTING_FLAGS = {
    "setting.Sigma": "--sigma/--sigma-eigs",
    "setting.tasks": "--tasks",
    "setting.activation": "--activation",
    "setting.activation_c": "--activation-c",
    "setting.d": "--d",
    "setting.L": "--L",
    "setting.sigma2": "--sigma2",
    "objective": "--objective",
}

_SCALAR_START = {"--omega0", "--mu0"}
_ALL = {"--n-init"}
_STATE = {"--omega", "--mu"}

#: command -> model name -> the model-specific flags of the command the model accepts; a model missing
#: from a command's table is not served by it (refused in one line). Every served model takes the
#: command's common flags (run: --heads --d --L --sigma2 --t-end --init-scale --seed --method --rtol --atol
#: --n-times --out --json ...; risk: --prompts --seed --json --out ...; train: every flag of ``train``).
#: ``run --no-plot``: only the isotropic run draws its flow portrait, whose landmarks are L̃'s.
#: ``risk --conditional``: Rao–Blackwellised estimates (the activation model's stream always is);
#: ``risk --omega/--mu``: the state whose predictor is estimated (the models whose plan has a state).
MODEL_FLAGS = {
    "run": {
        "isotropic": _SCALAR_START | _ALL | {"--no-plot"},
        "corrected": _SCALAR_START | _ALL,
        "exact": _SCALAR_START | _ALL,
        "activation": _SCALAR_START | _ALL,
        "precond": _SCALAR_START | _ALL,
        "multitask": _ALL,
        "precond_multitask": _ALL,
    },
    "risk": {
        "isotropic": _STATE | {"--conditional"},
        "activation": _STATE | {"--conditional"},
        "precond": {"--conditional"},
        "multitask": set(),
    },
    "train": {
        "isotropic": set(),
        "activation": set(),
        "precond": set(),
        "multitask": set(),
    },
}

#: command -> what it does with a model (for the refusal of a model it does not serve)
COMMAND_SERVES = {
    "run": "reduced flow",
    "risk": "Monte Carlo estimators",
    "train": "trainer",
}

#: command -> the flags governed by its table (a typed flag outside this set is common to every model)
GOVERNED = {command: set().union(*table.values()) for command, table in MODEL_FLAGS.items()}


def typed_flags(args) -> set[str]:
    """The long flags the user typed (recorded by the parser; ``--x-y`` for dest ``x_y``)."""
    seen = getattr(args, "_seen_options", set())
    return {"--" + d.replace("_", "-") for d in seen}


def check_model_flags(args, model, command: str = "run") -> None:
    """Refuse a model ``command`` does not serve, or a typed flag that does not apply to ``model``.

    Raises
    ------
    ValueError
        One line naming the command, the model, the flags that chose it, and the flags it takes.
    """
    table = MODEL_FLAGS[command]
    if model.name not in table:
        served = ", ".join(sorted(table))
        raise ValueError(
            f"`{command}` has no {COMMAND_SERVES[command]} for the {model.name} model yet ({_describe(model)}); "
            f"it serves the {served} models, and `run` integrates the reduced flow of every model"
        )
    accepted = table[model.name]
    bad = sorted((typed_flags(args) & GOVERNED[command]) - accepted)
    if bad:
        names = " and ".join(f"`{flag}`" for flag in bad)
        raise ValueError(
            f"{names} {'does' if len(bad) == 1 else 'do'} not apply to the {model.name} model of this setting "
            f"({command} with {_describe(model)}); it takes {', '.join(sorted(accepted)) or 'none of the model flags'}"
        )


def _describe(model) -> str:
    """The flags that chose ``model``, as typed (``--sigma/--sigma-eigs together with --tasks``)."""
    s = model.setting
    parts = []
    if s.Sigma is not None:
        parts.append("`--sigma/--sigma-eigs`")
    if s.tasks is not None:
        parts.append("`--tasks`")
    if s.activation != "exp":
        parts.append(f"`--activation` {s.activation}")
    if model.objective != "approx":
        parts.append(f"`--objective` {model.objective}")
    return " together with ".join(parts) or "the isotropic softmax setting"


def model_from_args(args, setting, *, n_heads: int | None = None):
    """The model of ``setting`` and ``--objective`` with ``n_heads`` (default ``--heads``) heads.

    A combination that is not derived is refused by the selector in one line.
    """
    from reduced_dynamics.models import reduced_model

    heads = getattr(args, "heads", 2) if n_heads is None else n_heads
    return reduced_model(setting, n_heads=heads, objective=getattr(args, "objective", "approx"))
