"""The single-trajectory paths of the integrator: LSODA's own Fortran loop, and ``solve_ivp``.

Both take a kernel (:class:`~reduced_dynamics.flow._kernels.ModelKernel` or a model's fast
subclass) and the output times, and return ``(t, Y, status, solver_message, nlu)``; the two
terminal events are the model's domain margin reaching 0 (status 2) and stationarity
(status 1).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from reduced_dynamics.flow._kernels import Event, OutOfDomain
from reduced_dynamics.flow._status import Status

__all__ = ["lsoda_path", "solve_ivp_path", "IMPLICIT_METHODS", "EXPLICIT_METHODS"]

IMPLICIT_METHODS = ("Radau", "BDF", "LSODA")
EXPLICIT_METHODS = ("RK45", "RK23", "DOP853")


def solve_ivp_path(kern, t0, y0, t_eval, method, rtol, atol):
    """:func:`scipy.integrate.solve_ivp` from ``(t0, y0)`` to ``t_eval[-1]`` with the two terminal events.

    Returns ``(t, Y, status, solver_message, nlu)`` with Y of shape (T, n); ``t`` holds the ``t_eval``
    points reached plus the event point. Raises :class:`OutOfDomain` when the solver's trial state
    falls outside the model's domain before the margin event stops it.
    """
    from scipy.integrate import solve_ivp

    kern.abort = False

    def ev_domain(_t, y):
        return kern.margin(y)

    ev_domain.terminal = True
    ev_domain.direction = -1

    def ev_stationary(_t, y):
        return math.log(kern.grad_norm(y) + 1e-300) - 0.5 * math.log(kern.stat2)

    ev_stationary.terminal = True
    ev_stationary.direction = -1
    events = [ev_domain] + ([ev_stationary] if kern.stat2 > 0 else [])
    extra = {"jac": kern.jac_ivp} if (method in IMPLICIT_METHODS and kern.has_jac) else {}
    t_end = float(t_eval[-1])
    try:
        sol = solve_ivp(
            kern.rhs_ivp, (t0, t_end), y0, method=method, t_eval=t_eval, rtol=rtol, atol=atol, events=events, **extra
        )
    except (ValueError, np.linalg.LinAlgError) as exc:
        # scipy's linear algebra refuses a non-finite iteration matrix: the step size collapsed near the
        # edge of the domain (e.g. exp(d ωωᵀ) makes the flow too stiff near the overflow cap)
        raise OutOfDomain(f"the integrator broke down ({exc})") from None
    t = sol.t
    Y = sol.y.T
    if sol.status == 1 and sol.t_events is not None:
        # append the terminal event state so the trajectory ends where the solver stopped
        for k, te in enumerate(sol.t_events):
            if len(te):
                t = np.concatenate([t, te[-1:]])
                Y = np.concatenate([Y, sol.y_events[k][-1:]], axis=0)
    if sol.status == -1:
        status = Status.SOLVER_FAILED
    elif sol.status == 1 and len(sol.t_events[0]):
        status = Status.LEFT_DOMAIN
    elif sol.status == 1:
        status = Status.STATIONARY
    else:
        status = Status.REACHED_T_END
    return t, Y, int(status), sol.message, int(sol.nlu)


def lsoda_path(kern, y0, t_eval, rtol, atol):
    """LSODA driven by its own Fortran loop (:func:`scipy.integrate.odeint`), with the model's Jacobian.

    Events: the fast pass records the first evaluation below the stationarity threshold and raises
    :class:`Event` at the first one at a non-positive domain margin. From the last output time before
    that evaluation, :func:`solve_ivp_path` (Radau) continues and locates the event exactly. After a
    margin abort the outputs before it are recomputed first (LSODA's steps do not depend on the output
    times; the ``tcrit`` stop keeps it from stepping past the last one). A failure of the Fortran loop
    hands the whole run to :func:`solve_ivp_path`.
    """
    from scipy.integrate import ODEintWarning, odeint

    dfun = kern.jac if kern.has_jac else None
    kern.abort = True
    kern.flag_t = None
    ok = "Integration successful."
    mxstep = max(int(kern.budget), 1)
    try:
        with warnings.catch_warnings():  # a failure is reported through info["message"] and handled below
            warnings.simplefilter("ignore", ODEintWarning)
            Y, info = odeint(kern.rhs, y0, t_eval, Dfun=dfun, rtol=rtol, atol=atol, full_output=True, mxstep=mxstep)
        t_flag = kern.flag_t
        # odeint reports success but returns NaN states over a tiny interval (t_end ~ 1e-200): hand over too
        if info["message"] != ok or not np.all(np.isfinite(Y)):
            return solve_ivp_path(kern, 0.0, y0, t_eval, "Radau", rtol, atol)
        if t_flag is None:
            return t_eval.copy(), Y, int(Status.REACHED_T_END), info["message"], int(info["nje"][-1])
        k = max(1, int(np.searchsorted(t_eval, t_flag, side="left")))  # outputs t_eval[:k] are < t_flag
        Y_head = Y[:k]
        nje_head = int(info["nje"][k - 2]) if k >= 2 else 0  # row j of odeint's info is output j + 1
    except Event as ev:
        t_flag = ev.t if kern.flag_t is None else min(ev.t, kern.flag_t)
        k = max(1, int(np.searchsorted(t_eval, t_flag, side="left")))
        kern.abort = False
        if k >= 2:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ODEintWarning)
                Y_head, info = odeint(
                    kern.rhs,
                    y0,
                    t_eval[:k],
                    Dfun=dfun,
                    rtol=rtol,
                    atol=atol,
                    full_output=True,
                    mxstep=mxstep,
                    tcrit=t_eval[k - 1 : k],
                )
            if info["message"] != ok or not np.all(np.isfinite(Y_head)):
                return solve_ivp_path(kern, 0.0, y0, t_eval, "Radau", rtol, atol)
            nje_head = int(info["nje"][-1])
        else:
            Y_head, nje_head = y0[None, :], 0
    finally:
        kern.abort = False
    # the tail starts from an output state inside the domain and above the stationarity threshold, so its events
    # see the crossings (an output time before the first evaluation beyond the margin can still lie past the
    # edge: LSODA's step that ended at that evaluation spanned both the crossing and the output time)
    while k > 1 and (
        not kern.margin(Y_head[k - 1]) > 0 or (kern.stat2 > 0 and kern.grad_norm(Y_head[k - 1]) ** 2 < kern.stat2)
    ):
        k -= 1
    t_tail, Y_tail, status, message, nlu = solve_ivp_path(
        kern, float(t_eval[k - 1]), Y_head[k - 1], t_eval[k - 1 :], "Radau", rtol, atol
    )
    t = np.concatenate([t_eval[: k - 1], t_tail])
    Y = np.concatenate([Y_head[: k - 1], Y_tail], axis=0)
    return t, Y, status, message, nje_head + nlu
