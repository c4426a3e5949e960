r"""Many gradient flows of L̃ at once: a Radau IIA integrator vectorised over trajectories.

:func:`integrate_flow_batch` integrates :math:`\dot\theta = -\nabla\tilde L(\theta)` from B initial
states in one loop whose every operation acts on all unfinished trajectories together (numpy arrays of
shape ``(B, 2H)``, ``(B, 2H, 2H)``). Each trajectory keeps **its own step size**, error estimate,
evaluation counts and termination status; the loop advances every unfinished trajectory by one of its
own steps per iteration, and a trajectory that stops (``t_end`` reached, an event, a failure) leaves
the working set without disturbing the others.

The method is the 3-stage Radau IIA collocation method of order 5 (the method of
:class:`scipy.integrate.Radau`, Hairer & Wanner, *Solving ODEs II*, Sec. IV.8): simplified Newton
iterations with the analytic Jacobian ``−∇²L̃`` (:func:`reduced_dynamics.approx_loss_hessian`, evaluated
for the whole batch at once and inverted by batched ``numpy.linalg.inv`` of the real and the complex
``2H × 2H`` iteration matrices), the embedded third-order error estimate, the two-step
(Gustafsson) step-size controller, and the cubic collocation polynomial as dense output at the common
log-spaced output times. Step control, Newton tolerances and safety factors are scipy's.

Events, per trajectory, as in :func:`~reduced_dynamics.dynamics.flow.integrate_flow`: leaving the
overflow-safe region (``d·max ω² >= exponent_cap``, status 2) and stationarity
(``|∇L̃| < stationarity_tol``, status 1) are located on the dense output by bisection and end that
trajectory only. A trajectory whose step size collapses or that exceeds the evaluation budget ends
with status -1 and its own message; the others run on.

References
----------
docs/theory.md#gradient-flow
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import check_finite_array
from reduced_dynamics.dynamics.diagnostics import StageTolerances
from reduced_dynamics.dynamics.loss import MAX_EXPONENT, LossOverflowError, _hessian_arrays
from reduced_dynamics.setting import Setting, as_setting

__all__ = ["FlowBatchResult", "integrate_flow_batch", "N_TRAJ_MAX", "BATCH_MIN"]

#: Largest number of trajectories of one batch (memory: B × n_eval × 2H floats of output).
N_TRAJ_MAX = 100_000
#: Smallest batch that ``method="auto"`` integrates with the batched Radau (below: a loop of the LSODA path).
BATCH_MIN = 48

# --- Radau IIA (order 5) constants, as in scipy.integrate._ivp.radau ---------------------------------
_S6 = 6**0.5
_C = np.array([(4 - _S6) / 10, (4 + _S6) / 10, 1.0])
_E = np.array([-13 - 7 * _S6, -13 + 7 * _S6, -1.0]) / 3
_MU_REAL = 3 + 3 ** (2 / 3) - 3 ** (1 / 3)
_MU_COMPLEX = 3 + 0.5 * (3 ** (1 / 3) - 3 ** (2 / 3)) - 0.5j * (3 ** (5 / 6) + 3 ** (7 / 6))
_T = np.array(
    [
        [0.09443876248897524, -0.14125529502095421, 0.03002919410514742],
        [0.25021312296533332, 0.20412935229379994, -0.38294211275726192],
        [1.0, 1.0, 0.0],
    ]
)
_TI = np.array(
    [
        [4.17871859155190428, 0.32768282076106237, 0.52337644549944951],
        [-4.17871859155190428, -0.32768282076106237, 0.47662355450055044],
        [0.50287263494578682, -2.57192694985560522, 0.59603920482822492],
    ]
)
_TI_REAL = _TI[0]
_TI_COMPLEX = _TI[1] + 1j * _TI[2]
_P = np.array(
    [
        [13 / 3 + 7 * _S6 / 3, -23 / 3 - 22 * _S6 / 3, 10 / 3 + 5 * _S6],
        [13 / 3 - 7 * _S6 / 3, -23 / 3 + 22 * _S6 / 3, 10 / 3 - 5 * _S6],
        [1 / 3, -8 / 3, 10 / 3],
    ]
)
_NEWTON_MAXITER = 6
_MIN_FACTOR, _MAX_FACTOR = 0.2, 10.0
_EPS = np.finfo(float).eps


@dataclass(frozen=True, repr=False)
class FlowBatchResult(FrozenResult):
    """B gradient flows of L̃ integrated together (:func:`integrate_flow_batch`).

    Frozen; every ndarray is read-only. Trajectory ``i`` as a full
    :class:`~reduced_dynamics.dynamics.flow.FlowResult` (diagnostics, stage times, drift law, summary):
    :meth:`trajectory`.

    Attributes
    ----------
    success : ndarray of bool, shape (B,)
        Status 0 (reached ``t_end``) or 1 (stationary point).
    status : ndarray of int, shape (B,)
        Per trajectory, the codes of :data:`~reduced_dynamics.dynamics.flow.STATUS_MESSAGES`: 0 reached
        ``t_end``; 1 stationary; 2 left the overflow-safe region; -1 step-size collapse or evaluation budget.
    messages : tuple of str, length B
        Per trajectory, what happened and what to try next.
    t : ndarray, shape (T,)
        The common output times: 0, then log-spaced from ``t_first`` to ``t_end``.
    omega, mu : ndarray, shape (B, T, H)
        States at the output times; NaN after the trajectory stopped (status 1, 2, -1).
    t_stop : ndarray, shape (B,)
        Time at which each trajectory stopped (``t_end``, or the located event, or the failure).
    omega_stop, mu_stop : ndarray, shape (B, H)
        The state at ``t_stop`` (for status 0 the state at ``t_end``).
    omega0, mu0 : ndarray, shape (B, H)
        The initial states.
    setting : Setting
    method : str
        ``"radau"`` (the batched integrator) or ``"lsoda"`` (a loop of the single-trajectory LSODA path).
    nfev, njev, nlu : ndarray of int, shape (B,)
        Gradient evaluations, Hessian evaluations and matrix factorisations (inversions of the real and
        complex iteration matrices count as one) of each trajectory.
    n_steps : ndarray of int, shape (B,)
        Accepted steps of each trajectory.
    seconds : float
        Wall time of the whole batch.
    rtol, atol : float
        Solver tolerances used.
    tolerances : StageTolerances
        Tolerances of the pattern diagnostics of :meth:`trajectory`.

    Notes
    -----
    ``n_traj`` (B) and ``n_heads`` (H) are properties; ``summary()`` is a JSON-friendly dict of the
    start and stop states (for the command line).
    """

    success: np.ndarray
    status: np.ndarray
    messages: tuple
    t: np.ndarray
    omega: np.ndarray
    mu: np.ndarray
    t_stop: np.ndarray
    omega_stop: np.ndarray
    mu_stop: np.ndarray
    omega0: np.ndarray
    mu0: np.ndarray
    setting: Setting
    method: str
    nfev: np.ndarray
    njev: np.ndarray
    nlu: np.ndarray
    n_steps: np.ndarray
    seconds: float
    rtol: float
    atol: float
    tolerances: StageTolerances = field(default_factory=StageTolerances)

    @property
    def n_traj(self) -> int:
        """Number of trajectories B."""
        return self.omega.shape[0]

    @property
    def n_heads(self) -> int:
        """Number of heads H."""
        return self.omega.shape[2]

    def trajectory(self, i):
        """Trajectory ``i`` as a :class:`~reduced_dynamics.dynamics.flow.FlowResult`.

        Its times are the output times up to the stop, plus the stop point when it falls between two
        output times (an event), as :func:`~reduced_dynamics.dynamics.flow.integrate_flow` returns them.
        ``method`` is ``"batch-Radau"`` (or ``"LSODA"`` for the loop); ``seconds`` is the batch's wall time divided by B.

        Parameters
        ----------
        i : int, in [0, B)

        Returns
        -------
        FlowResult
        """
        from reduced_dynamics.dynamics.flow import FlowResult, _evaluate_along

        B = self.n_traj
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= int(i) < B:
            raise ValueError(f"`i` must be an integer in [0, {B}), got {i!r}")
        i = int(i)
        keep = ~np.isnan(self.omega[i, :, 0])
        t, w, m = self.t[keep], self.omega[i][keep], self.mu[i][keep]
        if t[-1] < self.t_stop[i]:
            t = np.concatenate([t, self.t_stop[i : i + 1]])
            w = np.concatenate([w, self.omega_stop[i][None]])
            m = np.concatenate([m, self.mu_stop[i][None]])
        loss, gnorm = _evaluate_along(w, m, self.setting)
        st = int(self.status[i])
        return FlowResult(
            success=st in (0, 1),
            status=st,
            message=self.messages[i],
            t=t,
            omega=w,
            mu=m,
            loss=loss,
            grad_norm=gnorm,
            setting=self.setting,
            method="batch-Radau" if self.method == "radau" else "LSODA",
            nfev=int(self.nfev[i]),
            njev=int(self.njev[i]),
            nlu=int(self.nlu[i]),
            seconds=self.seconds / B,
            tolerances=self.tolerances,
        )

    def summary(self) -> dict:
        """Start and stop states and per-trajectory status, JSON-friendly (for the command line).

        Keys: ``n_traj, n_heads, d, L, sigma2, method, rtol, atol, seconds, t_end`` and the per-trajectory
        lists ``omega0, mu0, omega, mu`` (B × H: start and stop states), ``t_stop, status, success, message,
        nfev, njev, n_steps``.
        """
        return {
            "n_traj": self.n_traj,
            "n_heads": self.n_heads,
            "d": self.setting.d,
            "L": self.setting.L,
            "sigma2": self.setting.sigma2,
            "method": "batch-Radau" if self.method == "radau" else "LSODA",
            "rtol": self.rtol,
            "atol": self.atol,
            "seconds": self.seconds,
            "t_end": float(self.t[-1]),
            "omega0": self.omega0.tolist(),
            "mu0": self.mu0.tolist(),
            "omega": self.omega_stop.tolist(),
            "mu": self.mu_stop.tolist(),
            "t_stop": self.t_stop.tolist(),
            "status": self.status.tolist(),
            "success": self.success.tolist(),
            "message": list(self.messages),
            "nfev": self.nfev.tolist(),
            "njev": self.njev.tolist(),
            "n_steps": self.n_steps.tolist(),
        }

    def __repr__(self) -> str:
        n_ok = int(np.sum(self.success))
        return (
            f"FlowBatchResult(success={n_ok}/{self.n_traj}, status={np.unique(self.status).tolist()}, "
            f"H={self.n_heads}, setting={self.setting!r}, t_end={self.t[-1]:.4g}, n_times={len(self.t)}, "
            f"seconds={self.seconds:.3g})"
        )


class _Kernels:
    """The batched right-hand side ``−∇L̃`` and Jacobian ``−∇²L̃`` for one scalar setting (pre-bound)."""

    def __init__(self, setting: Setting, H: int):
        self.H = H
        self.d = float(setting.d)
        self.c = float(setting.c)
        self.cd = self.c * self.d

    def exp_matrix(self, w):
        # exp(d ω_h ω_k), the exponent clipped at MAX_EXPONENT so a trial stage far outside the safe region
        # stays finite (its step is then rejected, or the overflow event ends the trajectory)
        return np.exp(np.minimum(self.d * w[:, :, None] * w[:, None, :], MAX_EXPONENT))

    def rhs(self, y):
        """``−∇L̃`` of states ``y`` of shape (N, 2H)."""
        H = self.H
        w, m = y[:, :H], y[:, H:]
        E = self.exp_matrix(w)
        u = np.sum(m * w, axis=1, keepdims=True) - 1.0
        # (E v) by broadcasting: for a few heads much cheaper than a batched matmul of tiny matrices
        g = np.sum(E * (m * w)[:, None, :], axis=2)
        em = np.sum(E * m[:, None, :], axis=2)
        out = np.empty_like(y)
        out[:, :H] = -2.0 * m * (u + self.cd * g)
        out[:, H:] = -2.0 * (u * w + self.c * em)
        return out

    def jac(self, y):
        """``−∇²L̃`` of states ``y`` of shape (N, 2H): shape (N, 2H, 2H)."""
        H = self.H
        w, m = y[:, :H], y[:, H:]
        N = y.shape[0]
        d = np.full(N, self.d)
        c = np.full(N, self.c)
        with np.errstate(over="ignore", invalid="ignore"):
            try:
                return -_hessian_arrays(w, m, d, c, self.exp_matrix(w))
            except LossOverflowError:
                out = np.full((N, 2 * H, 2 * H), np.nan)
                return out

    def expo(self, y):
        """``d · max ω²`` per state."""
        return self.d * np.max(y[:, : self.H] ** 2, axis=1)

    def grad_norm(self, y):
        """``|∇L̃|`` per state."""
        return np.sqrt(np.sum(self.rhs(y) ** 2, axis=1))


def _rms(x, axes):
    return np.sqrt(np.mean(x * x, axis=axes))


def _dense(y_old, Q, x):
    """Collocation polynomial: ``y_old + Q @ (x, x², x³)``; y_old (N, n), Q (N, n, 3), x (N,)."""
    x2 = x * x
    return y_old + Q[:, :, 0] * x[:, None] + Q[:, :, 1] * x2[:, None] + Q[:, :, 2] * (x2 * x)[:, None]


def _locate(fun, y_old, Q, n_iter=42):
    """Smallest x in (0, 1] (bisection) where ``fun`` of the dense output becomes <= 0 (``fun(x=1) <= 0``)."""
    N = y_old.shape[0]
    lo, hi = np.zeros(N), np.ones(N)
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        below = fun(_dense(y_old, Q, mid)) <= 0
        hi = np.where(below, mid, hi)
        lo = np.where(below, lo, mid)
    return hi


def _check_batch_state(omega0, mu0):
    omega0 = check_finite_array("omega0", omega0, ndim=2)
    mu0 = check_finite_array("mu0", mu0, ndim=2)
    if omega0.shape != mu0.shape:
        raise ValueError(f"`omega0` and `mu0` must have the same shape (B, H), got {omega0.shape} and {mu0.shape}")
    B, H = omega0.shape
    from reduced_dynamics.dynamics.flow import N_HEADS_MAX

    if not 1 <= B <= N_TRAJ_MAX:
        raise ValueError(f"`omega0` must hold between 1 and {N_TRAJ_MAX} initial states (rows), got {B}")
    if not 1 <= H <= N_HEADS_MAX:
        raise ValueError(f"`omega0` must have between 1 and {N_HEADS_MAX} heads (columns), got {H}")
    return omega0.astype(float, copy=True), mu0.astype(float, copy=True)


def integrate_flow_batch(
    omega0,
    mu0,
    setting,
    *,
    t_end=1e5,
    method="auto",
    rtol=None,
    atol=None,
    n_eval=400,
    t_first=1e-2,
    stationarity_tol=1e-10,
    exponent_cap=None,
    tolerances: StageTolerances | None = None,
) -> FlowBatchResult:
    r"""Integrate B gradient flows :math:`\dot\theta = -\nabla\tilde L(\theta)` at once, each with its own step size.

    A Radau IIA (order 5) integrator written over the batch (module docstring): every operation acts on
    the arrays of all unfinished trajectories, so the Python cost of a step is paid once for the batch.
    The time convention, output times, events and statuses are those of
    :func:`~reduced_dynamics.dynamics.flow.integrate_flow`.

    Parameters
    ----------
    omega0, mu0 : array_like, shape (B, H)
        Initial states, one per row (B in [1, 100000]).
    setting : Setting
        Scalar and isotropic.
    t_end : float, in (0, 1e9]
        Final time.
    method : {"auto", "radau", "lsoda"}
        ``"radau"``: the batched Radau IIA integrator (module docstring). ``"lsoda"``: a loop of
        :func:`~reduced_dynamics.dynamics.flow.integrate_flow` (its default LSODA fast path), one
        trajectory after the other. ``"auto"`` (default): ``"radau"`` from :data:`BATCH_MIN` = 48
        trajectories on, ``"lsoda"`` below (the batched loop costs ~1 ms of Python per step whatever B,
        which a few trajectories do not amortise; ``benchmarks/bench_flow.py`` measures the crossover).
    rtol : float, in [1e-14, 0.1], optional
        Relative tolerance of each trajectory's error control. Default 1e-7 for ``radau`` (Radau's
        control is conservative: at 1e-7 the final states at t = 1e5 agree with a 1e-12 reference to
        ~1e-9), and LSODA's default 1e-11 for ``lsoda``.
    atol : float, in (0, 1], optional
        Absolute tolerance. Default 1e-10 for ``radau``, 1e-14 for ``lsoda``.
    n_eval : int, in [2, 100000]
        Number of output times: 0 and log-spaced from ``t_first`` to ``t_end``.
    t_first : float, > 0
        First positive output time.
    stationarity_tol : float, >= 0
        A trajectory stops (status 1) when ``|∇L̃| < stationarity_tol`` (0 disables); one that starts
        there stops at t = 0.
    exponent_cap : float in (0, MAX_EXPONENT], optional
        A trajectory stops (status 2) when ``d·max ω²`` reaches this (default 0.95·MAX_EXPONENT).
    tolerances : StageTolerances, optional
        Tolerances of the pattern diagnostics of :meth:`FlowBatchResult.trajectory`.

    Returns
    -------
    FlowBatchResult
        Output states ``omega, mu`` of shape (B, T, H), stop states (B, H), per-trajectory status.

    Raises
    ------
    ValueError
        A bad argument, named in the message with its allowed range.
    LossOverflowError
        An initial state is outside the overflow-safe region (``d·max ω0² >= exponent_cap``); the
        message names the row.

    References
    ----------
    docs/theory.md#gradient-flow

    Examples
    --------
    >>> import numpy as np
    >>> from reduced_dynamics.dynamics.batch_flow import integrate_flow_batch
    >>> from reduced_dynamics.setting import Setting
    >>> w0 = 0.01 * np.random.default_rng(0).standard_normal((8, 2))
    >>> res = integrate_flow_batch(w0, w0, Setting(d=5, L=40, sigma2=0.1), t_end=1e3)
    >>> res.omega.shape, bool(res.success.all())
    ((8, 400, 2), True)
    """
    from reduced_dynamics.dynamics.flow import (
        DEFAULT_TOLERANCES,
        _check_run_options,
        _check_t_end,
        _check_tolerances,
        _log_times,
        status_message,
    )

    setting = as_setting(setting, "integrate_flow_batch")
    setting.require_isotropic("integrate_flow_batch").require_softmax("integrate_flow_batch")
    omega0, mu0 = _check_batch_state(omega0, mu0)
    t_end = _check_t_end("t_end", t_end)
    if method not in ("auto", "radau", "lsoda"):
        raise ValueError(f"`method` must be one of 'auto', 'radau', 'lsoda', got {method!r}")
    if method == "auto":
        method = "radau" if omega0.shape[0] >= BATCH_MIN else "lsoda"
    defaults = (1e-7, 1e-10) if method == "radau" else DEFAULT_TOLERANCES["LSODA"]
    rtol, atol = _check_tolerances(defaults[0] if rtol is None else rtol, defaults[1] if atol is None else atol)
    n_eval, t_first, tol, stationarity_tol, cap = _check_run_options(
        n_eval, t_first, tolerances, stationarity_tol, exponent_cap
    )
    B, H = omega0.shape
    with np.errstate(over="ignore"):
        expo0 = float(setting.d) * np.max(omega0**2, axis=1)
    if np.any(expo0 >= cap):
        bad = int(np.argmax(expo0 >= cap))
        raise LossOverflowError(
            f"initial state `omega0` (row {bad}) is outside the overflow-safe region: "
            f"d·max(ω0²) = {expo0[bad]:.4g} >= {cap:.4g}"
        )
    if method == "lsoda":
        return _lsoda_loop(
            omega0, mu0, setting, t_end, rtol, atol, n_eval, t_first, stationarity_tol, exponent_cap, tol
        )
    n = 2 * H
    K = _Kernels(setting, H)
    y0 = np.concatenate([omega0, mu0], axis=1)
    from reduced_dynamics.dynamics.flow import NFEV_MAX

    t_out = _log_times(t_end, n_eval, t_first)
    T = t_out.size
    Y_out = np.full((B, T, n), np.nan)
    Y_out[:, 0] = y0
    nxt = np.ones(B, dtype=np.int64)  # index of the next output time of each trajectory
    status = np.zeros(B, dtype=np.int64)
    msgs = [""] * B
    t_stop = np.full(B, t_end)
    y_stop = y0.copy()
    nfev = np.zeros(B, dtype=np.int64)
    njev = np.zeros(B, dtype=np.int64)
    nlu = np.zeros(B, dtype=np.int64)
    nsteps = np.zeros(B, dtype=np.int64)
    start = time.perf_counter()

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        f0 = K.rhs(y0)
        nfev += 1
        g0 = np.sqrt(np.sum(f0 * f0, axis=1))
        done = np.zeros(B, dtype=bool)
        if stationarity_tol > 0:
            stat0 = g0 < stationarity_tol
            status[stat0] = 1
            t_stop[stat0] = 0.0
            done |= stat0
        # per-trajectory solver state
        t = np.zeros(B)
        y = y0.copy()
        f = f0
        # initial step (scipy's select_initial_step, order 5, per trajectory)
        scale0 = atol + np.abs(y0) * rtol
        d0 = _rms(y0 / scale0, 1)
        d1 = _rms(f0 / scale0, 1)
        h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / np.where(d1 > 0, d1, 1.0))
        h0 = np.minimum(h0, t_end)
        y1 = y0 + h0[:, None] * f0
        f1 = K.rhs(y1)
        nfev += 1
        d2 = _rms((f1 - f0) / scale0, 1) / h0
        big = np.maximum(d1, d2)
        h1 = np.where(big <= 1e-15, np.maximum(1e-6, h0 * 1e-3), (0.01 / np.where(big > 0, big, 1.0)) ** (1 / 6))
        h = np.minimum(np.minimum(100 * h0, h1), t_end)
        h_old = np.full(B, np.nan)
        err_old = np.full(B, np.nan)
        rejected = np.zeros(B, dtype=bool)
        Q = np.zeros((B, n, 3))
        have_Q = np.zeros(B, dtype=bool)
        t_prev_old, h_prev, y_prev_old = np.zeros(B), np.ones(B), np.zeros((B, n))  # the last accepted step
        newton_tol = max(10 * _EPS / rtol, min(0.03, rtol**0.5))
        eye = np.eye(n)

        while True:
            idx = np.flatnonzero(~done)
            if idx.size == 0:
                break
            ya, ta, fa = y[idx], t[idx], f[idx]
            ha = np.minimum(h[idx], t_end - ta)
            min_step = 10 * np.abs(np.nextafter(ta, np.inf) - ta)
            tiny = ha < min_step
            if np.any(tiny):
                for b in idx[tiny]:
                    status[b] = -1
                    msgs[b] = f"{status_message(-1, H)} The step size collapsed at t = {t[b]:.4g}."
                    t_stop[b], y_stop[b] = t[b], y[b]
                done[idx[tiny]] = True
                continue
            over = nfev[idx] > NFEV_MAX
            if np.any(over):
                for b in idx[over]:
                    status[b] = -1
                    msgs[b] = (
                        f"{status_message(-1, H)} The solver needed more than {NFEV_MAX} gradient evaluations "
                        f"(the flow is too stiff at {setting!r}) and stopped at t = {t[b]:.4g}; try a shorter "
                        "`t_end` or a looser `rtol`/`atol`."
                    )
                    t_stop[b], y_stop[b] = t[b], y[b]
                done[idx[over]] = True
                continue
            Na = idx.size
            # Jacobian and the inverses of the two iteration matrices, for the whole working set
            J = K.jac(ya)
            njev[idx] += 1
            nlu[idx] += 1
            Ar = (_MU_REAL / ha)[:, None, None] * eye - J
            Ac = (_MU_COMPLEX / ha)[:, None, None] * eye - J
            ok_mat = np.all(np.isfinite(J), axis=(1, 2))
            Ar[~ok_mat] = eye
            Ac[~ok_mat] = eye
            try:
                inv_r = np.linalg.inv(Ar)
                inv_c = np.linalg.inv(Ac)
            except np.linalg.LinAlgError:
                inv_r = np.empty_like(Ar)
                inv_c = np.empty_like(Ac)
                for k in range(Na):
                    try:
                        inv_r[k] = np.linalg.inv(Ar[k])
                        inv_c[k] = np.linalg.inv(Ac[k])
                    except np.linalg.LinAlgError:
                        ok_mat[k] = False
                        inv_r[k], inv_c[k] = eye, eye
            # Newton (simplified) on the collocation system
            Z0 = np.zeros((Na, 3, n))
            hq = have_Q[idx]
            if np.any(hq):
                # extrapolate the previous collocation polynomial to the new stage times
                x = (ta[hq, None] + ha[hq, None] * _C[None, :] - t_prev_old[idx[hq], None]) / h_prev[idx[hq], None]
                p = np.stack([x, x * x, x * x * x], axis=1)  # (Nh, 3 powers, 3 stages)
                Z0[hq] = (y_prev_old[idx[hq]][:, :, None] + np.matmul(Q[idx[hq]], p)).transpose(0, 2, 1) - ya[
                    hq, None, :
                ]
            scale = atol + np.abs(ya) * rtol
            W = np.matmul(_TI, Z0)
            Z = Z0
            Mr = _MU_REAL / ha
            Mc = _MU_COMPLEX / ha
            conv = np.zeros(Na, dtype=bool)
            fail = ~ok_mat
            n_iter = np.zeros(Na, dtype=np.int64)
            rate = np.full(Na, np.nan)
            dW_old = np.full(Na, np.nan)
            for k in range(_NEWTON_MAXITER):
                live = ~(conv | fail)
                if not np.any(live):
                    break
                F = K.rhs((ya[:, None, :] + Z).reshape(Na * 3, n)).reshape(Na, 3, n)
                nfev[idx[live]] += 3
                finite = np.all(np.isfinite(F), axis=(1, 2))
                fail |= live & ~finite
                live &= finite
                f_real = np.matmul(_TI_REAL, F) - Mr[:, None] * W[:, 0]
                f_cplx = np.matmul(_TI_COMPLEX, F) - Mc[:, None] * (W[:, 1] + 1j * W[:, 2])
                dWr = np.sum(inv_r * f_real[:, None, :], axis=2)
                dWc = np.sum(inv_c * f_cplx[:, None, :], axis=2)
                dW = np.stack([dWr, dWc.real, dWc.imag], axis=1)
                dW_norm = _rms(dW / scale[:, None, :], (1, 2))
                n_iter[live] = k + 1
                has_old = ~np.isnan(dW_old)
                new_rate = np.where(has_old, dW_norm / np.where(has_old, dW_old, 1.0), np.nan)
                rate = np.where(live, new_rate, rate)
                diverge = (
                    live
                    & has_old
                    & ((new_rate >= 1) | (new_rate ** (_NEWTON_MAXITER - k) / (1 - new_rate) * dW_norm > newton_tol))
                )
                fail |= diverge
                upd = live & ~diverge
                W = np.where(upd[:, None, None], W + dW, W)
                Z = np.where(upd[:, None, None], np.matmul(_T, W), Z)
                conv_now = upd & ((dW_norm == 0) | (has_old & (new_rate / (1 - new_rate) * dW_norm < newton_tol)))
                conv |= conv_now
                dW_old = np.where(live, dW_norm, dW_old)
            not_conv = ~conv
            if np.any(not_conv):
                bi = idx[not_conv]
                h[bi] = ha[not_conv] * 0.5
                rejected[bi] = True
            if not np.any(conv):
                continue
            # error estimate of the converged ones
            ci = np.flatnonzero(conv)
            bc = idx[ci]
            yc, hc, Zc = ya[ci], ha[ci], Z[ci]
            y_new = yc + Zc[:, 2]
            ZE = np.matmul(_E, Zc) / hc[:, None]
            err = np.matmul(inv_r[ci], (fa[ci] + ZE)[:, :, None])[:, :, 0]
            sc = atol + np.maximum(np.abs(yc), np.abs(y_new)) * rtol
            err_norm = _rms(err / sc, 1)
            rj = rejected[bc] & (err_norm > 1)
            if np.any(rj):
                f_rj = K.rhs(yc[rj] + err[rj])
                nfev[bc[rj]] += 1
                err2 = np.matmul(inv_r[ci][rj], (f_rj + ZE[rj])[:, :, None])[:, :, 0]
                err_norm[rj] = _rms(err2 / sc[rj], 1)
            err_norm = np.where(np.isfinite(err_norm), err_norm, np.inf)
            safety = 0.9 * (2 * _NEWTON_MAXITER + 1) / (2 * _NEWTON_MAXITER + n_iter[ci])
            two = ~np.isnan(h_old[bc]) & ~np.isnan(err_old[bc]) & (err_norm > 0)
            mult = np.where(
                two,
                hc
                / np.where(two, h_old[bc], 1.0)
                * (np.where(two, err_old[bc], 1.0) / np.where(two, err_norm, 1.0)) ** 0.25,
                1.0,
            )
            factor = np.minimum(1.0, mult) * np.where(err_norm > 0, err_norm, 1e-300) ** -0.25
            acc = err_norm <= 1
            # rejected steps: shrink
            if np.any(~acc):
                br = bc[~acc]
                h[br] = hc[~acc] * np.maximum(_MIN_FACTOR, safety[~acc] * factor[~acc])
                rejected[br] = True
            if not np.any(acc):
                continue
            ba = bc[acc]
            t_old_a = t[ba].copy()
            y_old_a = yc[acc]
            h_a = hc[acc]
            y_new_a = y_new[acc]
            Q_a = np.matmul(Zc[acc].transpose(0, 2, 1), _P)
            t_new_a = t_old_a + h_a
            t_new_a = np.where(t_end - t_new_a < 10 * np.abs(np.nextafter(t_end, np.inf) - t_end), t_end, t_new_a)
            f_new_a = K.rhs(y_new_a)
            nfev[ba] += 1
            nsteps[ba] += 1
            fac = np.minimum(_MAX_FACTOR, safety[acc] * factor[acc])
            h_old[ba] = h_a
            err_old[ba] = err_norm[acc]
            h[ba] = h_a * fac
            rejected[ba] = False
            # events: overflow cap and stationarity at the new state, located on the dense output
            ev_t = np.full(ba.size, np.inf)
            ev_kind = np.zeros(ba.size, dtype=np.int64)
            expo_new = K.expo(y_new_a)
            hit = ~(expo_new < cap)
            if np.any(hit):
                xs = _locate(lambda yy: cap - K.expo(yy), y_old_a[hit], Q_a[hit])
                ev_t[hit] = t_old_a[hit] + xs * h_a[hit]
                ev_kind[hit] = 2
            if stationarity_tol > 0:
                gn = np.sqrt(np.sum(f_new_a * f_new_a, axis=1))
                hit_s = gn < stationarity_tol
                if np.any(hit_s):
                    xs = _locate(
                        lambda yy: np.log(K.grad_norm(yy) + 1e-300) - math.log(stationarity_tol),
                        y_old_a[hit_s],
                        Q_a[hit_s],
                    )
                    ts = t_old_a[hit_s] + xs * h_a[hit_s]
                    sel = np.flatnonzero(hit_s)
                    earlier = ts < ev_t[sel]
                    ev_t[sel[earlier]] = ts[earlier]
                    ev_kind[sel[earlier]] = 1
            stop_here = ev_kind > 0
            t_lim = np.where(stop_here, ev_t, t_new_a)
            # dense output at the output times in (t_old, t_lim]
            while True:
                k_next = nxt[ba]
                inside = k_next < T
                tk = np.where(inside, t_out[np.minimum(k_next, T - 1)], np.inf)
                want = inside & (tk <= t_lim)
                if stop_here.any():
                    want &= ~(stop_here & (tk >= t_lim))
                if not np.any(want):
                    break
                wi = np.flatnonzero(want)
                x = (tk[wi] - t_old_a[wi]) / h_a[wi]
                Y_out[ba[wi], k_next[wi]] = _dense(y_old_a[wi], Q_a[wi], x)
                nxt[ba[wi]] += 1
            # advance
            t[ba] = t_new_a
            y[ba] = y_new_a
            f[ba] = f_new_a
            Q[ba] = Q_a
            have_Q[ba] = True
            t_prev_old[ba] = t_old_a
            h_prev[ba] = h_a
            y_prev_old[ba] = y_old_a
            if np.any(stop_here):
                si = np.flatnonzero(stop_here)
                bs = ba[si]
                xs = (ev_t[si] - t_old_a[si]) / h_a[si]
                y_ev = _dense(y_old_a[si], Q_a[si], xs)
                status[bs] = ev_kind[si]
                t_stop[bs] = ev_t[si]
                y_stop[bs] = y_ev
                done[bs] = True
            fin = (~stop_here) & (t_new_a >= t_end)
            if np.any(fin):
                bf = ba[fin]
                # the last output time is t_end itself
                Y_out[bf, T - 1] = y_new_a[fin]
                y_stop[bf] = y_new_a[fin]
                t_stop[bf] = t_end
                done[bf] = True
    seconds = time.perf_counter() - start
    for b in range(B):
        if not msgs[b]:
            msgs[b] = status_message(int(status[b]), H)
    return FlowBatchResult(
        success=np.isin(status, (0, 1)),
        status=status,
        messages=tuple(msgs),
        t=t_out,
        omega=Y_out[:, :, :H],
        mu=Y_out[:, :, H:],
        t_stop=t_stop,
        omega_stop=y_stop[:, :H],
        mu_stop=y_stop[:, H:],
        omega0=omega0,
        mu0=mu0,
        setting=setting,
        method="radau",
        nfev=nfev,
        njev=njev,
        nlu=nlu,
        n_steps=nsteps,
        seconds=seconds,
        rtol=rtol,
        atol=atol,
        tolerances=tol,
    )


def _one_lsoda(w0, m0, setting, t_end, rtol, atol, n_eval, t_first, stationarity_tol, exponent_cap, tol):
    from reduced_dynamics.dynamics.flow import integrate_flow

    return integrate_flow(
        w0,
        m0,
        setting,
        t_end=t_end,
        method="LSODA",
        rtol=rtol,
        atol=atol,
        n_eval=n_eval,
        t_first=t_first,
        stationarity_tol=stationarity_tol,
        exponent_cap=exponent_cap,
        tolerances=tol,
    )


def _lsoda_loop(omega0, mu0, setting, t_end, rtol, atol, n_eval, t_first, stationarity_tol, exponent_cap, tol):
    """``method="lsoda"``: one :func:`~reduced_dynamics.dynamics.flow.integrate_flow` per row, as a batch result."""
    from reduced_dynamics.dynamics.flow import _log_times, status_message

    B, H = omega0.shape
    t_out = _log_times(t_end, n_eval, t_first)
    T = t_out.size
    W = np.full((B, T, H), np.nan)
    M = np.full((B, T, H), np.nan)
    status = np.zeros(B, dtype=np.int64)
    msgs, t_stop = [], np.zeros(B)
    w_stop, m_stop = np.zeros((B, H)), np.zeros((B, H))
    nfev, njev, nlu = (np.zeros(B, dtype=np.int64) for _ in range(3))
    start = time.perf_counter()
    for b in range(B):
        try:
            r = _one_lsoda(
                omega0[b], mu0[b], setting, t_end, rtol, atol, n_eval, t_first, stationarity_tol, exponent_cap, tol
            )
        except LossOverflowError as exc:
            # the solver broke down near the overflow cap: report it for this trajectory, run the others
            W[b, 0], M[b, 0] = omega0[b], mu0[b]
            status[b] = -1
            msgs.append(f"{status_message(-1, H)} {exc}")
            t_stop[b] = 0.0
            w_stop[b], m_stop[b] = omega0[b], mu0[b]
            continue
        k = min(len(r.t), T)

        while k > 0 and not (r.t[k - 1] == t_out[k - 1]):  # the outputs are a prefix of t_out, then the event
            k -= 1
        W[b, :k], M[b, :k] = r.omega[:k], r.mu[:k]
        status[b] = r.status
        msgs.append(r.message)
        t_stop[b] = r.t[-1]
        w_stop[b], m_stop[b] = r.omega[-1], r.mu[-1]
        nfev[b], njev[b], nlu[b] = r.nfev, r.njev, r.nlu
    return FlowBatchResult(
        success=np.isin(status, (0, 1)),
        status=status,
        messages=tuple(msgs),
        t=t_out,
        omega=W,
        mu=M,
        t_stop=t_stop,
        omega_stop=w_stop,
        mu_stop=m_stop,
        omega0=omega0,
        mu0=mu0,
        setting=setting,
        method="lsoda",
        nfev=nfev,
        njev=njev,
        nlu=nlu,
        n_steps=np.zeros(B, dtype=np.int64),
        seconds=time.perf_counter() - start,
        rtol=rtol,
        atol=atol,
        tolerances=tol,
    )
