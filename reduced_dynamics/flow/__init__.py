"""One integrator for every reduced model: :func:`integrate`, :func:`gradient_descent`, one result
type :class:`Flow` and one status table :class:`Status`.

A model (:func:`reduced_dynamics.reduced_model`) owns its formulas; this package owns the time
stepping: the single-trajectory paths (LSODA's Fortran loop with events handed over to ``solve_ivp``,
or any ``solve_ivp`` method) and the batched Radau IIA integrator vectorised over trajectories
(:mod:`reduced_dynamics.flow._batch`), for every model that has a Hessian.

References
----------
docs/theory.md#gradient-flow
"""

from reduced_dynamics.flow._integrate import (
    ATOL_MAX,
    BUDGET,
    DEFAULT_TOLERANCES,
    JACOBIAN_MAX_BYTES,
    METHODS,
    N_TIMES_MAX,
    RTOL_MAX,
    RTOL_MIN,
    T_END_MAX,
    T_END_MIN,
    DomainError,
    default_tolerances,
    gradient_descent,
    integrate,
)
from reduced_dynamics.flow._result import Final, Flow
from reduced_dynamics.flow._status import STATUS_MESSAGES, SUCCESS, Status, status_message

__all__ = [
    "integrate",
    "gradient_descent",
    "Flow",
    "Final",
    "Status",
    "STATUS_MESSAGES",
    "SUCCESS",
    "status_message",
    "DomainError",
    "METHODS",
    "DEFAULT_TOLERANCES",
    "default_tolerances",
    "T_END_MAX",
    "T_END_MIN",
    "JACOBIAN_MAX_BYTES",
    "N_TIMES_MAX",
    "BUDGET",
    "RTOL_MIN",
    "RTOL_MAX",
    "ATOL_MAX",
]
