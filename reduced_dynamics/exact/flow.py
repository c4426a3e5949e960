r"""Gradient flow of the exact finite-L risk (docs/theory.md#exact-risk).

:func:`integrate_exact_flow` integrates

.. math:: \dot\omega = -\nabla_\omega \mathcal E(\omega,\mu), \qquad \dot\mu = -\nabla_\mu \mathcal E(\omega,\mu)

with the deterministic gradient of :func:`reduced_dynamics.exact.evaluator.exact_risk`,
so the true finite-L dynamics of the reduced model is an ODE instead of a noisy
Monte Carlo flow. Same time convention as :func:`reduced_dynamics.integrate_flow`
(descent of the risk itself, not of half of it). The flow is stiff (fast
directions across the solution manifold, a slow drift along it), so an implicit
:mod:`scipy.integrate` method steps it, with a forward-difference Jacobian of the
exact gradient; the states are recorded by the solver's dense output at the
requested times (log-spaced by default, for drift laws over decades).

References
----------
docs/theory.md#exact-risk, docs/theory.md#gradient-flow
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.integrate import BDF, LSODA, Radau

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array, check_positive_float, check_positive_int
from reduced_dynamics.exact.evaluator import _check_setting, _check_state, _check_tol, exact_risk
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["ExactFlowResult", "integrate_exact_flow", "EXACT_FLOW_METHODS", "EXACT_FLOW_T_END_MAX"]

#: Implicit solvers accepted by :func:`integrate_exact_flow`.
EXACT_FLOW_METHODS = {"Radau": Radau, "BDF": BDF, "LSODA": LSODA}
#: Largest allowed ``t_end``.
EXACT_FLOW_T_END_MAX = 1e12

_STATUS = {
    0: "reached t_end",
    1: "left the evaluator's range (|omega| too large for exact_risk); the path stops at the last state inside it",
    2: "the gradient budget `max_evaluations` was exhausted before t_end",
    -1: "the solver failed",
}


@dataclass(frozen=True)
class ExactFlowResult(FrozenResult):
    r"""A path of the exact-risk gradient flow (:func:`integrate_exact_flow`).

    Attributes
    ----------
    success : bool
        ``status == 0``.
    status : int
        0 reached ``t_end``; 1 the state left the evaluator's range of ω; 2 the
        gradient budget ran out; -1 the solver failed. The arrays hold the recorded
        times reached before the stop.
    message : str
        Human-readable status.
    t : ndarray, shape (T,)
        Recorded times (a prefix of the requested ones when the flow stopped early).
    omega, mu : ndarray, shape (T, H)
        The state at each recorded time.
    risk : ndarray, shape (T,)
        The exact risk along the path.
    risk_error : ndarray, shape (T,)
        Its quadrature error estimate (:attr:`~reduced_dynamics.exact.evaluator.ExactRisk.error_estimate`).
    grad_norm : ndarray, shape (T,)
        Euclidean norm of the full gradient (ω and μ) at each recorded state.
    setting : Setting
        The data model.
    n_gradient_evaluations : int
        Exact gradients evaluated by the solver (right-hand sides and Jacobian columns).
    n_jacobians : int
        Jacobians formed (each costs ``2H`` gradients: forward differences).
    cpu_seconds : float
        Process CPU time of the integration.
    """

    success: bool
    status: int
    message: str
    t: np.ndarray
    omega: np.ndarray
    mu: np.ndarray
    risk: np.ndarray
    risk_error: np.ndarray
    grad_norm: np.ndarray
    setting: Setting
    n_gradient_evaluations: int
    n_jacobians: int
    cpu_seconds: float


class _OutOfRange(Exception):
    pass


class _Budget(Exception):
    pass


def _output_times(t_end, n_eval, t_first, times):
    if times is not None:
        times = check_finite_array("times", times, ndim=1)
        if times[0] < 0 or np.any(np.diff(times) <= 0) or times[-1] > EXACT_FLOW_T_END_MAX:
            raise ValueError(f"`times` must be >= 0, strictly increasing and <= {EXACT_FLOW_T_END_MAX:g}")
        if times[-1] != t_end:
            raise ValueError(f"`times` must end at `t_end` = {t_end!r}, got {times[-1]!r}")
        return times
    if t_first is None:
        t_first = min(1.0, t_end * 1e-6)
    t_first = check_positive_float("t_first", t_first)
    if t_first > t_end:
        raise ValueError(f"`t_first` must be in (0, t_end] = (0, {t_end:g}], got {t_first!r}")
    if n_eval == 1:
        return np.array([t_end])
    if n_eval == 2:
        return np.array([0.0, t_end])
    return np.concatenate([[0.0], np.geomspace(t_first, t_end, n_eval - 1)])


def integrate_exact_flow(
    omega0,
    mu0,
    setting,
    *,
    t_end,
    n_eval=100,
    rtol=1e-8,
    atol=1e-10,
    method="BDF",
    t_first=None,
    times=None,
    tol=1e-12,
    max_evaluations=200_000,
    fd_step=1e-5,
) -> ExactFlowResult:
    r"""Integrate the gradient flow of the exact finite-L risk from ``(omega0, mu0)`` to ``t_end``.

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
        Initial state (``omega0`` inside the range of :func:`~reduced_dynamics.exact.evaluator.exact_risk`).
    setting : Setting
        Scalar, isotropic, ``L >= 2``.
    t_end : float, in (0, 1e12]
        Final time.
    n_eval : int, in [1, 100000]
        Number of recorded times: 0 and ``n_eval - 1`` log-spaced times from ``t_first``
        to ``t_end`` (ignored when ``times`` is given).
    rtol : float, in [1e-13, 0.1]
        Relative tolerance of the solver.
    atol : float, in [1e-15, 1]
        Absolute tolerance of the solver.
    method : {"BDF", "Radau", "LSODA"}
        Implicit :mod:`scipy.integrate` solver (BDF needed about 2.7x fewer gradients than Radau
        and LSODA on the paper's two-head flow to t = 1000).
    t_first : float, optional
        First positive recorded time (default ``min(1, 1e-6 t_end)``).
    times : array_like, shape (T,), optional
        Explicit recorded times, strictly increasing from >= 0, ending at ``t_end``.
    tol : float
        Quadrature target passed to :func:`~reduced_dynamics.exact.evaluator.exact_risk`.
    max_evaluations : int, in [1, 1e7]
        Budget of exact gradient evaluations; status 2 when it runs out.
    fd_step : float, in [1e-8, 1e-2]
        Step of the forward-difference Jacobian of the gradient.

    Returns
    -------
    ExactFlowResult
        Status first; ``t``, ``omega``, ``mu``, the exact ``risk`` along the path.

    Raises
    ------
    ValueError
        Bad input, naming the parameter.

    References
    ----------
    docs/theory.md#exact-risk
    """
    d, L, _ = _check_setting(setting, "integrate_exact_flow")
    tol = _check_tol(tol)
    try:
        omega0, mu0 = _check_state(omega0, mu0, d, tol)
    except ValueError as exc:
        raise ValueError(str(exc).replace("`omega`", "`omega0`").replace("`mu`", "`mu0`", 1)) from None
    t_end = check_positive_float("t_end", t_end)
    if t_end > EXACT_FLOW_T_END_MAX:
        raise ValueError(f"`t_end` must be in (0, {EXACT_FLOW_T_END_MAX:g}], got {t_end!r}")
    n_eval = check_positive_int("n_eval", n_eval, hi=100_000)
    rtol = check_positive_float("rtol", rtol)
    if not 1e-13 <= rtol <= 0.1:
        raise ValueError(f"`rtol` must be in [1e-13, 0.1], got {rtol!r}")
    atol = check_positive_float("atol", atol)
    if not 1e-15 <= atol <= 1.0:
        raise ValueError(f"`atol` must be in [1e-15, 1], got {atol!r}")
    if method not in EXACT_FLOW_METHODS:
        raise ValueError(f"`method` must be one of {sorted(EXACT_FLOW_METHODS)}, got {method!r}")
    max_evaluations = check_positive_int("max_evaluations", max_evaluations, hi=10**7)
    fd_step = check_positive_float("fd_step", fd_step)
    if not 1e-8 <= fd_step <= 1e-2:
        raise ValueError(f"`fd_step` must be in [1e-8, 1e-2], got {fd_step!r}")
    out_t = _output_times(t_end, n_eval, t_first, times)
    setting = as_setting(setting)
    H = omega0.size
    count = [0]
    n_jac = [0]
    cpu0 = time.process_time()

    def grad(y):
        if count[0] >= max_evaluations:
            raise _Budget
        count[0] += 1
        try:
            res = exact_risk(y[:H], y[H:], setting, grad=True, tol=tol)
        except ValueError as exc:
            if "`omega`" in str(exc):
                raise _OutOfRange from None
            raise
        return np.concatenate([res.grad_omega, res.grad_mu])

    def rhs(_t, y):
        return -grad(y)

    def jac(_t, y):
        # forward differences (2H gradients; the Newton iterations need no more accuracy), symmetrised
        n_jac[0] += 1
        g0 = grad(y)
        J = np.empty((2 * H, 2 * H))
        for i in range(2 * H):
            e = np.zeros(2 * H)
            e[i] = fd_step
            J[:, i] = -(grad(y + e) - g0) / fd_step
        return 0.5 * (J + J.T)  # the Hessian is symmetric

    y0 = np.concatenate([omega0, mu0])
    states = []
    status, message = 0, _STATUS[0]
    k = 0
    while k < out_t.size and out_t[k] == 0.0:
        states.append(y0.copy())
        k += 1
    try:
        extra = {} if method == "LSODA" else {"jac": jac}
        solver = EXACT_FLOW_METHODS[method](rhs, 0.0, y0, t_end, rtol=rtol, atol=atol, **extra)
        while k < out_t.size:
            msg = solver.step()
            if solver.status == "failed":
                status, message = -1, f"{_STATUS[-1]}: {msg}"
                break
            dense = None
            while k < out_t.size and out_t[k] <= solver.t:
                if out_t[k] == solver.t:
                    states.append(solver.y.copy())
                else:
                    dense = dense or solver.dense_output()
                    states.append(dense(out_t[k]))
                k += 1
            if solver.status == "finished" and k < out_t.size:
                states.extend(solver.y.copy() for _ in range(out_t.size - k))
                k = out_t.size
    except _OutOfRange:
        status, message = 1, _STATUS[1]
    except _Budget:
        status, message = 2, _STATUS[2]
    cpu = time.process_time() - cpu0
    Y = np.array(states).reshape(len(states), 2 * H)
    risks, errs, gnorm = [], [], []
    keep = 0
    for y in Y:
        try:
            res = exact_risk(y[:H], y[H:], setting, grad=True, tol=tol)
        except ValueError:
            break
        risks.append(res.risk)
        errs.append(res.error_estimate)
        gnorm.append(float(np.linalg.norm(np.concatenate([res.grad_omega, res.grad_mu]))))
        keep += 1
    if keep < len(Y) and status == 0:
        status, message = 1, _STATUS[1]
    Y = Y[:keep]
    return ExactFlowResult(
        success=status == 0,
        status=int(status),
        message=message,
        t=out_t[:keep].copy(),
        omega=Y[:, :H].copy(),
        mu=Y[:, H:].copy(),
        risk=np.array(risks),
        risk_error=np.array(errs),
        grad_norm=np.array(gnorm),
        setting=setting,
        n_gradient_evaluations=int(count[0]),
        n_jacobians=int(n_jac[0]),
        cpu_seconds=float(cpu),
    )
