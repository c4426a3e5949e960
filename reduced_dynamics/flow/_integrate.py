r"""The one integrator: :func:`integrate` runs the gradient flow of any reduced model.

.. math:: \dot\theta = -\nabla\mathcal L(\theta)

for one start (``y0`` of shape ``(size,)``) or a batch (``(B, size)``), with one set of
options, one result type (:class:`~reduced_dynamics.flow.Flow`) and one status table
(:mod:`reduced_dynamics.flow._status`) whatever the model.

Time convention (factor 2)
--------------------------
We descend the loss itself: :math:`\dot\theta = -\nabla\tilde L(\theta)`. The authors' code
descends :math:`\tilde L/2`; its learning rate ``lr`` is our step ``η = lr/2`` and its time
:math:`\tau` (``lr × steps``) is twice ours, :math:`\tau = 2t`. The drift law
:math:`\gamma(t) = (16 c d^3 (pn/H) t)^{-1/6}` reads :math:`(8 c d^3 (pn/H) \tau)^{-1/6}`
in the authors' time (docs/conventions.md).

References
----------
docs/theory.md#gradient-flow
"""

from __future__ import annotations

import math
import time

import numpy as np

from reduced_dynamics._validation import (
    check_finite_array,
    check_nonnegative_float,
    check_positive_float,
    check_positive_int,
)
from reduced_dynamics.dynamics.diagnostics import StageTolerances
from reduced_dynamics.dynamics.loss import LossOverflowError
from reduced_dynamics.flow._batch import BATCH_MIN, N_TRAJ_MAX, radau_batch
from reduced_dynamics.flow._kernels import BudgetExceeded, OutOfDomain
from reduced_dynamics.flow._result import Flow, evaluate_along
from reduced_dynamics.flow._single import IMPLICIT_METHODS, lsoda_path, solve_ivp_path
from reduced_dynamics.flow._status import SUCCESS, Status, status_message

__all__ = [
    "integrate",
    "gradient_descent",
    "DomainError",
    "METHODS",
    "DEFAULT_TOLERANCES",
    "default_tolerances",
    "T_END_MAX",
    "N_TIMES_MAX",
    "JACOBIAN_MAX_BYTES",
    "BUDGET",
    "RTOL_MIN",
    "RTOL_MAX",
    "ATOL_MAX",
]

#: Every method of :func:`integrate`: LSODA's Fortran loop, the :func:`scipy.integrate.solve_ivp`
#: methods, and the batched Radau IIA of :mod:`reduced_dynamics.flow._batch` (batches only).
METHODS = ("LSODA", "Radau", "BDF", "RK45", "RK23", "DOP853", "batch-Radau")
#: Largest allowed final time. The cost of a run is bounded by its gradient-evaluation budget.
T_END_MAX = 1e12
#: Smallest ``t_end`` (and positive output time): the smallest normal float. Below it the solvers' first step
#: is subnormal and its inverse overflows (they fail, or report the breakdown as leaving the domain).
T_END_MIN = float(np.finfo(np.float64).tiny)
#: Allowed solver tolerances: ``rtol`` in [RTOL_MIN, RTOL_MAX], ``atol`` in (0, ATOL_MAX].
RTOL_MIN, RTOL_MAX, ATOL_MAX = 1e-13, 0.1, 1.0  # below ~2e-14 solve_ivp silently raises rtol
#: Largest number of output times.
N_TIMES_MAX = 100_000
#: Default budget of gradient evaluations of one trajectory (the paper's setting needs ~6e4 to t = 1e9);
#: a flow that needs more ends with status -2 instead of running on.
BUDGET = 150_000
#: Largest gradient-evaluation budget.
BUDGET_MAX = 10**8
#: Largest number of gradient-descent steps.
N_STEPS_MAX = 10**8

#: Largest dense Jacobian (bytes) an implicit method may hold: LSODA's work array, Radau's and BDF's
#: matrices and LU factors are ``size x size``; a state larger than this allows needs an explicit method.
JACOBIAN_MAX_BYTES = 2**30
#: ``size x size`` float64 matrices each implicit method keeps (Radau: J, a real and a complex LU).
_DENSE_COPIES = {"LSODA": 1, "BDF": 2, "Radau": 4, "batch-Radau": 4}

#: Default ``(rtol, atol)`` per method (the same for every model). LSODA's error control is looser than
#: Radau's (at 1e-8 its final state at t = 1e5 is off by ~1e-7, at 1e-11 by ~3e-10); the batched Radau's
#: is conservative on these contracting flows (at 1e-6 its final states at t = 1e5 agree with a 1e-12 reference to
#: ~3e-8 relative, at 1e-7 to ~1e-9 with 1.4x the work; benchmarks/bench_flow.py prints the former).
DEFAULT_TOLERANCES = {"LSODA": (1e-11, 1e-14), "batch-Radau": (1e-6, 1e-10), "other": (1e-8, 1e-11)}


class DomainError(LossOverflowError, ValueError):
    """A start outside the model's domain (a ``ValueError`` and the package's ``LossOverflowError``)."""


def default_tolerances(method: str, rtol=None, atol=None) -> tuple:
    """``(rtol, atol)`` with the :data:`DEFAULT_TOLERANCES` of ``method`` in place of ``None``."""
    r0, a0 = DEFAULT_TOLERANCES.get(method, DEFAULT_TOLERANCES["other"])
    return (r0 if rtol is None else rtol, a0 if atol is None else atol)


def _check_tolerances(rtol, atol):
    rtol_v = check_positive_float("rtol", rtol)
    if not RTOL_MIN <= rtol_v <= RTOL_MAX:
        raise ValueError(f"`rtol` must be a number in [{RTOL_MIN:g}, {RTOL_MAX:g}], got {rtol!r}")
    atol_v = check_positive_float("atol", atol)
    if atol_v > ATOL_MAX:
        raise ValueError(f"`atol` must be a number in (0, {ATOL_MAX:g}], got {atol!r}")
    return rtol_v, atol_v


def _check_model(model):
    from reduced_dynamics.models._base import ReducedModel

    if not isinstance(model, ReducedModel):
        raise ValueError(
            f"`model` must be a reduced model (reduced_dynamics.reduced_model(setting, n_heads=...)), got {model!r}"
        )
    return model


def _check_t_end(t_end, name: str = "t_end") -> float:
    out = check_positive_float(name, t_end)
    if not T_END_MIN <= out <= T_END_MAX:
        raise ValueError(
            f"`{name}` must be a number in [{T_END_MIN:.6g}, {T_END_MAX:g}] (a normal float: the solver steps "
            f"below it are subnormal), got {t_end!r}"
        )
    return out


def output_times(t_end, n_times, t_first, times):
    """The output times: ``times`` as given, or 0 and ``n_times − 1`` log-spaced from ``t_first`` to ``t_end``."""
    if times is not None:
        times = check_finite_array("times", times, ndim=1)
        if times.size < 1 or times[0] < 0 or np.any(np.diff(times) <= 0) or times[-1] > T_END_MAX:
            raise ValueError(f"`times` must be non-negative, strictly increasing and <= {T_END_MAX:g}")
        if times[-1] <= 0:
            raise ValueError("`times` must end at a positive time")
        if np.any((times > 0) & (times < T_END_MIN)):
            raise ValueError(f"`times` must be 0 or >= {T_END_MIN:.6g} (normal floats: the solver steps between them)")
        return times.astype(np.float64)
    t_end = _check_t_end(t_end)
    n_times = check_positive_int("n_times", n_times, hi=N_TIMES_MAX)
    if n_times < 2:
        raise ValueError(f"`n_times` must be an integer in [2, {N_TIMES_MAX}], got {n_times}")
    t_first = _check_t_end(t_first, "t_first")
    if t_first >= t_end or n_times == 2:  # geomspace(t_first, t_end, 1) would be [t_first]: the flow must reach t_end
        return np.array([0.0, t_end])
    return np.concatenate([[0.0], np.geomspace(t_first, t_end, n_times - 1)])


def integrate(
    model,
    y0,
    *,
    t_end=1e5,
    method=None,
    rtol=None,
    atol=None,
    n_times=400,
    t_first=1e-2,
    times=None,
    stationarity_tol=1e-10,
    budget=BUDGET,
    rates=None,
    tolerances: StageTolerances | None = None,
) -> Flow:
    r"""Integrate the gradient flow :math:`\dot\theta = -\nabla\mathcal L(\theta)` of ``model`` from ``y0``.

    Parameters
    ----------
    model : ReducedModel
        From :func:`reduced_dynamics.reduced_model` (any data model and objective).
    y0 : array_like, shape (size,) or (B, size)
        One start, or B starts integrated as a batch (``model.state(...)``, ``model.initial_state(...)``).
    t_end : float, in [2.2e-308, 1e12]
        Final time (a normal float) (ignored when ``times`` is given: its last entry is the final time).
    method : str, optional
        ``"LSODA"``: scipy's LSODA driven by its own Fortran loop (:func:`scipy.integrate.odeint`),
        events located by handing over to ``solve_ivp`` (Radau) at the first evaluation that meets
        one; ``"Radau"``, ``"BDF"`` (implicit) or ``"RK45"``, ``"RK23"``, ``"DOP853"`` (explicit):
        :func:`scipy.integrate.solve_ivp`; ``"batch-Radau"`` (batches of a model with a Hessian): the
        Radau IIA integrator vectorised over trajectories. Implicit methods receive the model's
        Hessian (or its finite-difference Jacobian, for the exact risk). Default: the model's
        ``default_method`` for one start; for a batch ``"batch-Radau"`` from 48 starts on when the
        model has a Hessian, else a loop of the model's default method.
    rtol : float, in [1e-13, 0.1], optional
        Relative tolerance. Default per method (:data:`DEFAULT_TOLERANCES`): 1e-11 for LSODA, 1e-6
        for batch-Radau, 1e-8 for the others.
    atol : float, in (0, 1], optional
        Absolute tolerance. Default 1e-14 for LSODA, 1e-10 for batch-Radau, 1e-11 for the others.
    n_times : int, in [2, 100000]
        Number of output times: 0, then log-spaced from ``t_first`` to ``t_end``.
    t_first : float, > 0
        First positive output time.
    times : array_like, shape (T,), optional
        Explicit output times (strictly increasing, from >= 0); the flow starts at t = 0.
    stationarity_tol : float, >= 0
        Stop (status 1) when ``|∇L| < stationarity_tol`` (0 disables). A start already there
        returns at once with the one-point trajectory ``t = [0]``.
    budget : int, in [1, 1e8]
        Gradient evaluations one trajectory may spend (status -2 beyond it).
    rates : dict, optional
        ``{part name: rate}``: integrate :math:`\dot\theta = -P\nabla\mathcal L` with ``P`` the rate of
        each named block of the state (e.g. ``{"omega": r}`` slows or speeds ω against μ; blocks not
        named run at rate 1). Rates in [1e-6, 1e6]; single trajectories only.
    tolerances : StageTolerances, optional
        Tolerances of the pattern diagnostics (scalar-heads models).

    Returns
    -------
    Flow
        Status, message, output times and states, the loss and gradient norm along the path.

    Raises
    ------
    ValueError
        A bad argument, named with its allowed range.
    DomainError
        A start outside the model's domain (also a ``LossOverflowError``).

    References
    ----------
    docs/theory.md#gradient-flow, docs/theory.md#stages

    Examples
    --------
    >>> from reduced_dynamics import Setting, integrate, reduced_model
    >>> model = reduced_model(Setting(d=5, L=40, sigma2=0.1), n_heads=2)
    >>> flow = integrate(model, model.initial_state(seed=0), t_end=1e3)
    >>> bool(flow.success), flow.stage_times.all_reached
    (True, True)
    """
    model = _check_model(model)
    y0 = model.check_state(y0)
    batch = y0.ndim == 2
    if method is not None and (not isinstance(method, str) or method not in METHODS):
        raise ValueError(f"`method` must be one of {list(METHODS)}, got {method!r}")
    if batch:
        if not 1 <= y0.shape[0] <= N_TRAJ_MAX:
            raise ValueError(f"`y0` must hold between 1 and {N_TRAJ_MAX} starts (rows), got {y0.shape[0]}")
        if method is None:
            method = "batch-Radau" if (model.has_hessian and y0.shape[0] >= BATCH_MIN) else model.default_method
    elif method is None:
        method = model.default_method
    if method == "batch-Radau":
        if not batch:
            raise ValueError("`method` 'batch-Radau' integrates a batch: give `y0` of shape (B, size)")
        if not model.has_hessian:
            raise ValueError(f"`method` 'batch-Radau' needs a model with a derived Hessian, got {model!r}")
    _check_dense_size(model, method, y0.shape[0] if batch and method == "batch-Radau" else 1)
    rtol, atol = _check_tolerances(*default_tolerances(method, rtol, atol))
    t_out = output_times(t_end, n_times, t_first, times)
    stationarity_tol = check_nonnegative_float("stationarity_tol", stationarity_tol)
    budget = check_positive_int("budget", budget, hi=BUDGET_MAX)
    if tolerances is None:
        tolerances = StageTolerances()
    elif not isinstance(tolerances, StageTolerances):
        raise TypeError(f"`tolerances` must be a StageTolerances or None, got {tolerances!r}")
    check_start(model, y0)
    P = _rate_vector(model, rates)
    if P is not None and batch:
        raise ValueError("`rates` applies to single trajectories (give `y0` of shape (size,))")
    opts = dict(rtol=rtol, atol=atol, stationarity_tol=stationarity_tol, budget=budget, tolerances=tolerances)
    if batch:
        if method == "batch-Radau":
            return _batch_radau(model, y0, t_out, **opts)
        return _batch_loop(model, y0, t_out, method, **opts)
    return _single(model, y0, t_out, method, rates=P, **opts)


def check_start(model, y0) -> None:
    """Raise :class:`DomainError` if a start (or a row of a batch) is outside ``model``'s domain.

    What :func:`integrate` checks first; a command calls it before it starts work (so a sweep's dry run
    refuses the point).
    """
    y0 = np.asarray(y0)
    with np.errstate(all="ignore"):
        margin0 = np.atleast_1d(np.asarray(model.margin(y0), dtype=np.float64))
    if not np.all(margin0 > 0):
        row = int(np.argmax(~(margin0 > 0)))
        where = f" (row {row})" if y0.ndim == 2 else ""
        raise DomainError(f"the start `y0`{where} is outside the domain of {model!r}: {model.domain_text}")


def _check_dense_size(model, method: str, n_traj: int) -> None:
    """Refuse an implicit ``method`` whose dense Jacobians of the state would exceed :data:`JACOBIAN_MAX_BYTES`.

    Decided before anything is allocated: ``run --tasks 1-4,3-6 --d 100000`` asked LSODA for a 298 GiB work
    array (a MemoryError traceback).
    """
    copies = _DENSE_COPIES.get(method)
    if copies is None:
        return
    n = int(model.size)
    need = 8 * n * n * copies * n_traj
    if need > JACOBIAN_MAX_BYTES:
        raise ValueError(
            f"`method` {method} keeps dense {n} x {n} Jacobians of the {n}-dimensional state of {model!r} "
            f"({need / 2**30:.3g} GiB, more than {JACOBIAN_MAX_BYTES / 2**30:g} GiB): give an explicit `method` "
            "(RK45, RK23 or DOP853) or a smaller `setting.d`"
        )


def _rate_vector(model, rates):
    """The diagonal of ``P`` from ``{part: rate}`` (None when every rate is 1)."""
    if rates is None:
        return None
    if not isinstance(rates, dict):
        raise ValueError(f"`rates` must be a dict {{part name: rate}}, got {rates!r}")
    names = [p.name for p in model.parts]
    out = []
    for p in model.parts:
        r = rates.get(p.name, 1.0)
        r = check_positive_float(f"rates[{p.name!r}]", r)
        if not 1e-6 <= r <= 1e6:
            raise ValueError(f"`rates[{p.name!r}]` must be a number in [1e-06, 1e+06], got {r!r}")
        out.append(np.full(p.size, r))
    unknown = sorted(set(rates) - set(names))
    if unknown:
        raise ValueError(f"`rates` names unknown parts {unknown}; the parts of {model!r} are {names}")
    return np.concatenate(out)


def _single(model, y0, t_out, method, *, rtol, atol, stationarity_tol, budget, tolerances, rates=None):
    if rates is None:
        kern = model.kernels(stationarity_tol=stationarity_tol, budget=budget)
    else:
        from reduced_dynamics.flow._kernels import RatedKernel

        kern = RatedKernel(model, rates, stationarity_tol=stationarity_tol, budget=budget)
    common = dict(model=model, method=method, rtol=rtol, atol=atol, tolerances=tolerances)
    if stationarity_tol > 0:
        with np.errstate(all="ignore"):  # a huge gradient is simply not stationary
            try:
                g0 = np.asarray(kern.rhs_array(0.0, y0))
                g0_norm = math.sqrt(float(g0 @ g0))
            except OutOfDomain as exc:
                raise DomainError(f"the gradient of {model!r} cannot be evaluated at the start `y0`: {exc}") from None
        if g0_norm < stationarity_tol:
            # the start is already stationary (e.g. the saddle ω = μ = 0): the event of the solver only
            # sees crossings, so report it here, with the one-point trajectory
            loss, gnorm = evaluate_along(model, y0[None, :])
            return Flow(
                success=True,
                status=int(Status.STATIONARY),
                message=status_message(Status.STATIONARY, model),
                t=np.zeros(1),
                states=y0[None, :].copy(),
                loss=loss,
                grad_norm=gnorm,
                nfev=1,
                njev=0,
                nlu=0,
                seconds=0.0,
                t_stop=0.0,
                y_stop=y0.copy(),
                **common,
            )
    drop_first = t_out[0] > 0
    t_eval = np.concatenate([[0.0], t_out]) if drop_first else t_out
    start = time.perf_counter()
    stop = None
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # non-finite values become statuses
            if method == "LSODA":
                run = lsoda_path(kern, y0, t_eval, rtol, atol)
            else:
                run = solve_ivp_path(kern, 0.0, y0, t_eval, method, rtol, atol)
    except BudgetExceeded:
        stop = Status.BUDGET_EXHAUSTED
    except OutOfDomain as exc:
        stop, why = Status.LEFT_DOMAIN, str(exc)
    seconds = time.perf_counter() - start
    if stop == Status.LEFT_DOMAIN and kern.last_y is None:
        # the first evaluation, at the start itself, failed (with stationarity_tol = 0 the gradient is not
        # evaluated up front): the start is outside the domain, as when the check above fails
        raise DomainError(f"the gradient of {model!r} cannot be evaluated at the start `y0`: {why}")
    if stop is not None:
        # end at the last state the solver evaluated
        t = np.array([0.0, kern.last_t]) if kern.last_y is not None else np.zeros(1)
        Y = np.stack([y0, np.asarray(kern.last_y)]) if kern.last_y is not None else y0[None, :]
        msg = status_message(stop, model, budget=budget)
        if stop == Status.LEFT_DOMAIN:
            msg += f" (a solver step left the domain: {why})"
        msg += f" Stopped at t = {float(t[-1]):.4g}."
        loss, gnorm = evaluate_along(model, Y)
        return Flow(
            success=False,
            status=int(stop),
            message=msg,
            t=t,
            states=Y,
            loss=loss,
            grad_norm=gnorm,
            nfev=min(kern.nfev, budget),
            njev=kern.njev,
            nlu=0,
            seconds=seconds,
            t_stop=float(t[-1]),
            y_stop=Y[-1],
            **common,
        )
    t, Y, status, solver_message, nlu = run
    if drop_first:
        t, Y = t[1:], Y[1:]
    message = status_message(status, model) + (f" Solver: {solver_message}" if status == Status.SOLVER_FAILED else "")
    loss, gnorm = evaluate_along(model, Y)
    return Flow(
        success=status in SUCCESS,
        status=int(status),
        message=message,
        t=t,
        states=Y,
        loss=loss,
        grad_norm=gnorm,
        nfev=kern.nfev,
        njev=kern.njev if method in IMPLICIT_METHODS else 0,
        nlu=nlu,
        seconds=seconds,
        t_stop=float(t[-1]),
        y_stop=Y[-1],
        **common,
    )


def _batch_radau(model, y0, t_out, *, rtol, atol, stationarity_tol, budget, tolerances):
    r = radau_batch(model, y0, t_out, rtol=rtol, atol=atol, stationarity_tol=stationarity_tol, budget=budget)
    status = r["status"]
    return Flow(
        success=np.isin(status, [int(s) for s in SUCCESS]),
        status=status,
        message=r["message"],
        t=t_out,
        states=r["Y_out"],
        loss=None,  # evaluated along the states on first access (Flow.loss)
        grad_norm=None,
        model=model,
        method="batch-Radau",
        rtol=rtol,
        atol=atol,
        nfev=r["nfev"],
        njev=r["njev"],
        nlu=r["nlu"],
        seconds=r["seconds"],
        t_stop=r["t_stop"],
        y_stop=r["y_stop"],
        tolerances=tolerances,
    )


def _batch_loop(model, y0, t_out, method, *, rtol, atol, stationarity_tol, budget, tolerances):
    """A batch as a loop of single-trajectory runs, assembled on the common output times."""
    B, n = y0.shape
    T = t_out.size
    Y = np.full((B, T, n), np.nan)
    status = np.zeros(B, dtype=np.int64)
    msgs, t_stop = [], np.zeros(B)
    y_stop = np.zeros((B, n))
    nfev, njev, nlu = (np.zeros(B, dtype=np.int64) for _ in range(3))
    start = time.perf_counter()
    for b in range(B):
        r = _single(
            model,
            y0[b],
            t_out,
            method,
            rtol=rtol,
            atol=atol,
            stationarity_tol=stationarity_tol,
            budget=budget,
            tolerances=tolerances,
        )
        k = min(len(r.t), T)
        while k > 0 and not (r.t[k - 1] == t_out[k - 1]):  # the outputs are a prefix of t_out, then the event
            k -= 1
        Y[b, :k] = r.states[:k]
        if k == 0:
            Y[b, 0] = y0[b]
        status[b] = r.status
        msgs.append(r.message)
        t_stop[b] = r.t[-1]
        y_stop[b] = r.states[-1]
        nfev[b], njev[b], nlu[b] = r.nfev, r.njev, r.nlu
    return Flow(
        success=np.isin(status, [int(s) for s in SUCCESS]),
        status=status,
        message=tuple(msgs),
        t=t_out,
        states=Y,
        loss=None,  # evaluated along the states on first access (Flow.loss)
        grad_norm=None,
        model=model,
        method=method,
        rtol=rtol,
        atol=atol,
        nfev=nfev,
        njev=njev,
        nlu=nlu,
        seconds=time.perf_counter() - start,
        t_stop=t_stop,
        y_stop=y_stop,
        tolerances=tolerances,
    )


def _record_steps(n_steps: int, n_records: int) -> np.ndarray:
    """Exactly ``n_records`` distinct steps in ``[0, n_steps]``, including both ends, close to log-spaced."""
    target = np.concatenate([[0.0], np.geomspace(1.0, n_steps, n_records - 1)])
    target[-1] = n_steps
    steps = np.empty(n_records, dtype=np.int64)
    steps[0] = 0
    for k in range(1, n_records):
        want = int(round(target[k]))
        steps[k] = min(max(want, steps[k - 1] + 1), n_steps - (n_records - 1 - k))
    return steps


def gradient_descent(model, y0, *, eta, n_steps, n_records=None, tolerances: StageTolerances | None = None) -> Flow:
    r"""Plain gradient descent ``θ ← θ − η ∇L(θ)`` on any reduced model.

    Recorded at exactly ``n_records`` steps, close to log-spaced, including step 0 and the last; the
    result's ``t`` is ``η × step`` so it can be overlaid on :func:`integrate` (time convention of the
    module docstring).

    Parameters
    ----------
    model : ReducedModel
    y0 : array_like, shape (size,)
    eta : float, > 0
        Step size.
    n_steps : int, in [1, 1e8]
    n_records : int in [2, n_steps + 1], optional
        Default ``min(200, n_steps + 1)``.
    tolerances : StageTolerances, optional

    Returns
    -------
    Flow
        ``method == "gd"``; status 3 (the record stops at the last finite iterate) when the iterates
        leave the model's domain or overflow.

    Raises
    ------
    ValueError
        Bad arguments, or a start outside the domain (:class:`DomainError`).
    """
    model = _check_model(model)
    y = model.check_state(y0)
    if y.ndim != 1:
        raise ValueError(f"`y0` must have shape ({model.size},) for gradient descent, got {y.shape}")
    if not model.in_range(y):
        raise DomainError(f"the start `y0` is outside the domain of {model!r}: {model.domain_text}")
    eta = check_positive_float("eta", eta)
    n_steps = check_positive_int("n_steps", n_steps, hi=N_STEPS_MAX)
    if tolerances is None:
        tolerances = StageTolerances()
    elif not isinstance(tolerances, StageTolerances):
        raise TypeError(f"`tolerances` must be a StageTolerances or None, got {tolerances!r}")
    n_records = min(200, n_steps + 1) if n_records is None else check_positive_int("n_records", n_records)
    if not 2 <= n_records <= n_steps + 1:
        raise ValueError(
            f"`n_records` must be an integer in [2, n_steps + 1] = [2, {n_steps + 1}] "
            f"(there are only n_steps + 1 distinct iterates), got {n_records}"
        )
    record = set(_record_steps(n_steps, n_records).tolist())
    kern = model.kernels(stationarity_tol=0.0, budget=BUDGET_MAX)
    rec_y, rec_s = [], []
    status = Status.REACHED_T_END
    nfev = 0
    last_good = None
    start = time.perf_counter()
    for k in range(n_steps + 1):
        with np.errstate(all="ignore"):
            inside = bool(np.all(np.isfinite(y))) and kern.margin(y) > -math.inf and _hard_inside(model, y)
        if not inside:
            status = Status.DIVERGED
            break
        try:
            with np.errstate(all="ignore"):
                g = np.asarray(kern.rhs_array(0.0, y))
                lv = float(model.loss(y)) if k in record else 0.0
        except (OutOfDomain, LossOverflowError, ValueError):
            status = Status.DIVERGED
            break
        if not (np.all(np.isfinite(g)) and math.isfinite(lv)):
            status = Status.DIVERGED
            break
        nfev += 1
        last_good = (k, y.copy())
        if k in record:
            rec_y.append(y.copy())
            rec_s.append(k)
        if k == n_steps:
            break
        with np.errstate(over="ignore", invalid="ignore"):
            y = y + eta * g
    seconds = time.perf_counter() - start
    if status == Status.DIVERGED and last_good is not None and (not rec_s or rec_s[-1] != last_good[0]):
        rec_s.append(last_good[0])
        rec_y.append(last_good[1])
    if not rec_s:
        raise DomainError("the loss or its gradient is not finite in float64 at the start; reduce the start")
    Y = np.array(rec_y)
    loss, gnorm = evaluate_along(model, Y)
    t = eta * np.array(rec_s, dtype=float)
    return Flow(
        success=status == Status.REACHED_T_END,
        status=int(status),
        message="Completed all steps." if status == Status.REACHED_T_END else status_message(status, model),
        t=t,
        states=Y,
        loss=loss,
        grad_norm=gnorm,
        model=model,
        method="gd",
        rtol=math.nan,
        atol=math.nan,
        nfev=nfev,
        njev=0,
        nlu=0,
        seconds=seconds,
        t_stop=float(t[-1]),
        y_stop=Y[-1],
        tolerances=tolerances,
    )


def _hard_inside(model, y) -> bool:
    """Inside the model's hard domain (where its formulas evaluate), for gradient descent."""
    hard = getattr(model, "hard_margin", None)
    if hard is None:
        return True
    return bool(hard(y) > 0)
