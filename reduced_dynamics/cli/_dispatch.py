"""One command-line dispatch: the setting and ``--objective`` pick the model; one table says which flags it takes.

Every command that integrates or evaluates a reduced model (``run``, ``portrait``) builds its
:class:`~reduced_dynamics.Setting` from the flags, asks :func:`reduced_dynamics.reduced_model` for the
model, and checks here, in one place, that every flag the user typed applies to that model
(:data:`MODEL_FLAGS`). A flag that does not apply is refused with one line naming it (exit 2), never
silently ignored. The library's names of setting fields map to the flags that set them
(:data:`SETTING_FLAGS`), so a refusal from the selector names the flag the user typed.
"""

from __future__ import annotations

__all__ = ["MODEL_FLAGS", "SETTING_FLAGS", "typed_flags", "check_model_flags", "model_from_args"]

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

#: model name -> the model-specific flags of ``run`` it accepts (``--no-plot``: only the isotropic run draws
#: its flow portrait, whose landmarks are L̃'s) (every model takes the common ones:
#: --heads --d --L --sigma2 --t-end --init-scale --seed --method --rtol --atol --n-times --out --json ...)
MODEL_FLAGS = {
    "isotropic": _SCALAR_START | _ALL | {"--no-plot"},
    "corrected": _SCALAR_START | _ALL,
    "exact": _SCALAR_START | _ALL,
    "activation": _SCALAR_START | _ALL,
    "precond": _SCALAR_START | _ALL,
    "multitask": _ALL,
    "precond_multitask": _ALL,
}

#: flags governed by MODEL_FLAGS (a typed flag outside this set is common to every model)
GOVERNED = set().union(*MODEL_FLAGS.values())


def typed_flags(args) -> set[str]:
    """The long flags the user typed (recorded by the parser; ``--x-y`` for dest ``x_y``)."""
    seen = getattr(args, "_seen_options", set())
    return {"--" + d.replace("_", "-") for d in seen}


def check_model_flags(args, model, command: str = "run") -> None:
    """Refuse a typed flag that does not apply to ``model`` (ValueError naming the flag and the model)."""
    accepted = MODEL_FLAGS[model.name]
    for flag in sorted(typed_flags(args) & GOVERNED):
        if flag not in accepted:
            raise ValueError(
                f"`{flag}` does not apply to the {model.name} model of this setting "
                f"({command} with {_describe(model)}); it takes {', '.join(sorted(accepted)) or 'none of the model flags'}"
            )


def _describe(model) -> str:
    s = model.setting
    parts = []
    if s.Sigma is not None:
        parts.append("--sigma")
    if s.tasks is not None:
        parts.append("--tasks")
    if s.activation != "exp":
        parts.append(f"--activation {s.activation}")
    if model.objective != "approx":
        parts.append(f"--objective {model.objective}")
    return " ".join(parts) or "the isotropic softmax setting"


def model_from_args(args, setting):
    """The model of ``setting`` and ``--objective`` with ``--heads`` heads (one refusal line if not derived)."""
    from reduced_dynamics.models import reduced_model

    return reduced_model(setting, n_heads=args.heads, objective=getattr(args, "objective", "approx"))
