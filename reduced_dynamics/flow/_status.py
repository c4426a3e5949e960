"""One table of termination statuses, shared by every model and every integrator path.

Codes (:class:`Status`): 0 reached ``t_end``; 1 stationary point; 2 left the model's domain;
3 gradient descent diverged; -1 the solver failed; -2 the gradient-evaluation budget was
exhausted. ``success`` means 0 or 1. Each message says what happened and what to try next;
:func:`status_message` fills in the model-specific part (its domain, and for the isotropic
model whether H = 1, where a minimiser exists).
"""

from __future__ import annotations

import enum

__all__ = ["Status", "STATUS_MESSAGES", "status_message", "SUCCESS"]


class Status(enum.IntEnum):
    """Termination status of a flow (an ``int``; the codes are stable)."""

    REACHED_T_END = 0
    STATIONARY = 1
    LEFT_DOMAIN = 2
    DIVERGED = 3
    SOLVER_FAILED = -1
    BUDGET_EXHAUSTED = -2


#: Statuses counted as success.
SUCCESS = (Status.REACHED_T_END, Status.STATIONARY)

#: ``status -> message``; ``{domain}`` is the model's ``domain_text``, ``{budget}`` the budget.
STATUS_MESSAGES = {
    Status.REACHED_T_END: (
        "Reached t_end. The flow of H >= 2 heads never stops (no finite minimiser); increase `t_end` to follow "
        "the drift further."
    ),
    Status.STATIONARY: (
        "Stationary point reached: |grad| < `stationarity_tol`. For H >= 2 this is a saddle (e.g. the start "
        "ω = μ = 0) or the minimum of heads of one sign (the kernel regressor), not the drift along the solution "
        "manifold: start elsewhere (another seed, or a symmetric ± start)."
    ),
    Status.LEFT_DOMAIN: "Stopped at the edge of the model's domain: {domain}",
    Status.DIVERGED: "Gradient-descent iterates diverged or overflowed. Try a smaller step `eta`.",
    Status.SOLVER_FAILED: (
        "Integration failed (see the solver message). Try a stiff method (`Radau`, `BDF`), or loosen `rtol`/`atol`."
    ),
    Status.BUDGET_EXHAUSTED: (
        "Gradient-evaluation budget exhausted: the solver needed more than {budget} gradient evaluations (the "
        "flow is too stiff here). Try a shorter `t_end`, a looser `rtol`/`atol`, or a larger `budget`."
    ),
}

_SINGLE = {
    Status.REACHED_T_END: (
        "Reached t_end before the gradient fell below `stationarity_tol`. The H = 1 flow converges to the kernel "
        "regressor ω = ±1/√d; increase `t_end` to reach it."
    ),
    Status.STATIONARY: "Stationary point reached: |grad| fell below `stationarity_tol` (expected for H = 1).",
}


def status_message(status: int, model=None, *, budget: int | None = None) -> str:
    """The message of ``status`` for ``model`` (its domain; H = 1 of a scalar-heads model has its own).

    Parameters
    ----------
    status : int
        A :class:`Status` code.
    model : ReducedModel, optional
    budget : int, optional
        The budget, quoted by the budget message.

    Returns
    -------
    str
    """
    try:
        st = Status(int(status))
    except (ValueError, TypeError):
        raise ValueError(f"`status` must be one of {[int(s) for s in Status]}, got {status!r}") from None
    if model is not None and getattr(model, "scalar_heads", False) and model.n_heads == 1 and st in _SINGLE:
        return _SINGLE[st]
    domain = getattr(model, "domain_text", "the state left the model's domain")
    return STATUS_MESSAGES[st].format(domain=domain, budget=budget if budget is not None else "the")
