r"""Gradient flow (and discrete gradient descent) on the approximate loss.

.. math::

    \dot\omega = -\nabla_\omega \tilde L(\omega, \mu), \qquad
    \dot\mu = -\nabla_\mu \tilde L(\omega, \mu)

The dynamics are multi-scale: a fast stage (escape from the saddle at the
origin, sign matching, zero-sum OV) on times O(1)–O(10), then a slow drift along
the solution manifold :math:`S_\gamma` that never stops for ``H >= 2`` (γ(t)
decays like a power of t). The default integrator is therefore the implicit
``Radau`` method of :func:`scipy.integrate.solve_ivp` with the analytic
Jacobian (``−Hessian``), output at log-spaced times, and two events:
leaving the overflow-safe region of ``exp(d ωωᵀ)`` and stationarity
(``|∇L̃|`` below a threshold, reached only for H = 1).

References
----------
docs/theory.md#reduced-model, docs/theory.md#gradient-flow.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.integrate import solve_ivp

from reduced_dynamics._validation import (
    check_finite_array,
    check_heads_pair,
    check_nonnegative_float,
    check_positive_float,
    check_positive_int,
    check_problem,
)
from reduced_dynamics.dynamics.diagnostics import StageTolerances, stage_times, trajectory_diagnostics
from reduced_dynamics.dynamics.loss import (
    MAX_EXPONENT,
    LossOverflowError,
    approx_loss,
    approx_loss_grad,
    approx_loss_hessian,
    max_exponent,
)
from reduced_dynamics.estimation.prompts import as_generator

__all__ = [
    "FlowResult",
    "initial_state",
    "integrate_flow",
    "gradient_descent",
    "flow_at_times",
    "STATUS_MESSAGES",
    "IMPLICIT_METHODS",
    "EXPLICIT_METHODS",
]

IMPLICIT_METHODS = ("Radau", "BDF", "LSODA")
EXPLICIT_METHODS = ("RK45", "RK23", "DOP853")

#: One table of termination messages, each saying what to try next.
STATUS_MESSAGES = {
    0: "Reached t_end. The flow of H >= 2 never stops (no finite minimiser); increase `t_end` to follow the drift further.",
    1: "Stationary point reached: |grad L̃| fell below `stationarity_tol` (expected for H = 1).",
    2: "Left the overflow-safe region: d·max(ω²) reached the cap where exp(d ωωᵀ) nears float64 overflow. Try a smaller `init_scale` or smaller |omega0|.",
    3: "Gradient-descent iterates diverged or overflowed. Try a smaller step `eta`.",
    -1: "Integration failed (see solver message). Try a stiff method (`Radau`, `BDF`), or loosen `rtol`/`atol`.",
}


@dataclass(frozen=True, repr=False)
class FlowResult:
    """Trajectory of the gradient flow (or of gradient descent) on L̃.

    Fields mirror :class:`scipy.integrate.OdeResult` (``t, y, status, message,
    success, nfev, njev, nlu``) plus the diagnostics of this package.

    Attributes
    ----------
    t : ndarray, shape (T,)
        Output times (for gradient descent: ``eta * step``).
    omega, mu : ndarray, shape (T, H)
        The state at each output time.
    loss : ndarray, shape (T,)
        ``L̃(ω(t), μ(t))``.
    grad_norm : ndarray, shape (T,)
        Euclidean norm of the full gradient ``(∇_ω L̃, ∇_μ L̃)``.
    status : int
        Key of :data:`STATUS_MESSAGES` (0: reached ``t_end``; 1: stationary;
        2: left the overflow-safe region; 3: GD diverged; -1: solver failure).
    message : str
    success : bool
        ``status >= 0`` and not an overflow exit.
    nfev, njev, nlu : int
        Counts of gradient, Hessian evaluations and LU decompositions.
    d, L, sigma2 : problem constants.
    method : str
        ``solve_ivp`` method, or ``"gd"`` for gradient descent.
    seconds : float
        Wall time.
    tolerances : StageTolerances
        Tolerances used for the stage diagnostics.
    """

    t: np.ndarray
    omega: np.ndarray
    mu: np.ndarray
    loss: np.ndarray
    grad_norm: np.ndarray
    status: int
    message: str
    success: bool
    nfev: int
    njev: int
    nlu: int
    d: int
    L: int
    sigma2: float
    method: str
    seconds: float
    tolerances: StageTolerances = field(default_factory=StageTolerances)

    # --- scipy-like view -------------------------------------------------
    @property
    def y(self) -> np.ndarray:
        """State as ``(2H, T)``, rows ``(ω_1..ω_H, μ_1..μ_H)``, like ``OdeResult.y``."""
        return np.concatenate([self.omega, self.mu], axis=1).T

    @property
    def n_heads(self) -> int:
        return self.omega.shape[1]

    # --- derived diagnostics ---------------------------------------------
    @property
    def diagnostics(self) -> dict[str, np.ndarray]:
        """Per-time diagnostics: gamma, eta_eff, sum_mu, zero_sum_ratio, homogeneity, sign_matched, n_dummy."""
        return trajectory_diagnostics(self.omega, self.mu, self.tolerances)

    @property
    def gamma(self) -> np.ndarray:
        """γ(t): mean |ω_h| over non-dummy heads, shape (T,)."""
        return self.diagnostics["gamma"]

    @property
    def eta_eff(self) -> np.ndarray:
        """η_eff(t) = μᵀω, shape (T,)."""
        return np.sum(self.omega * self.mu, axis=1)

    @property
    def sum_mu(self) -> np.ndarray:
        """Σ_h μ_h(t), shape (T,)."""
        return np.sum(self.mu, axis=1)

    @property
    def stage_times(self) -> dict[str, float | None]:
        """First output time from which each pattern holds until the end of the run (None if never)."""
        return stage_times(self.t, self.omega, self.mu, self.tolerances)

    @property
    def final(self) -> dict[str, Any]:
        """Final state and scalar summaries (JSON-friendly)."""
        from reduced_dynamics.dynamics.manifold import eta_star, inf_loss

        diag = self.diagnostics
        return {
            "t": float(self.t[-1]),
            "omega": self.omega[-1].tolist(),
            "mu": self.mu[-1].tolist(),
            "loss": float(self.loss[-1]),
            "grad_norm": float(self.grad_norm[-1]),
            "gamma": float(diag["gamma"][-1]),
            "eta_eff": float(self.eta_eff[-1]),
            "eta_star": eta_star(self.d, self.L, self.sigma2),
            "inf_loss": inf_loss(self.d, self.L, self.sigma2) if self.n_heads >= 2 else None,
            "sum_mu": float(self.sum_mu[-1]),
            "zero_sum_ratio": float(diag["zero_sum_ratio"][-1]),
            "n_dummy": int(diag["n_dummy"][-1]),
        }

    def summary(self) -> dict[str, Any]:
        """Everything a run reports: status, final values, stage times, counts."""
        out = {
            "success": self.success,
            "status": self.status,
            "message": self.message,
            "method": self.method,
            "n_heads": self.n_heads,
            "d": self.d,
            "L": self.L,
            "sigma2": self.sigma2,
            "nfev": self.nfev,
            "njev": self.njev,
            "nlu": self.nlu,
            "seconds": self.seconds,
        }
        out.update(self.final)
        out["stage_times"] = self.stage_times
        return out

    def __repr__(self) -> str:
        f = self.final
        return (
            f"FlowResult(success={self.success}, status={self.status}, message={self.message!r}, "
            f"method={self.method!r}, H={self.n_heads}, t_end={f['t']:.4g}, n_times={len(self.t)}, "
            f"loss={f['loss']:.8g}, gamma={f['gamma']:.4g}, eta_eff={f['eta_eff']:.6g}, nfev={self.nfev})"
        )


def initial_state(n_heads, *, kind="random", scale=0.01, seed=0, omega0=None, mu0=None):
    """Initial state for the flow.

    Parameters
    ----------
    n_heads : int
        Number of heads H >= 1.
    kind : {"random", "symmetric", "given"}
        ``random``: i.i.d. ``N(0, scale²)`` entries from ``seed``;
        ``symmetric``: ``ω = scale·(+1, −1, +1, ...)``, ``μ = ω`` (a ± pair per two heads);
        ``given``: use ``omega0`` and ``mu0``.
    scale : float
        Size of the initial entries (> 0).
    seed : int or numpy.random.Generator
        Used by ``random``.
    omega0, mu0 : array_like, shape (H,), optional
        Used by ``given``.

    Returns
    -------
    omega0, mu0 : ndarray, shape (H,)
    """
    n_heads = check_positive_int("n_heads", n_heads)
    if kind == "given" or (omega0 is not None or mu0 is not None):
        if omega0 is None or mu0 is None:
            raise ValueError("`omega0` and `mu0` must both be given for kind='given'")
        omega0 = check_finite_array("omega0", omega0, ndim=1)
        mu0 = check_finite_array("mu0", mu0, ndim=1)
        if omega0.shape != (n_heads,) or mu0.shape != (n_heads,):
            raise ValueError(
                f"`omega0` and `mu0` must have shape ({n_heads},) for n_heads={n_heads}, got {omega0.shape} and {mu0.shape}"
            )
        return omega0.copy(), mu0.copy()
    scale = check_positive_float("scale", scale)
    if kind == "random":
        rng = as_generator(seed)
        z = rng.standard_normal((2, n_heads)) * scale
        return z[0], z[1]
    if kind == "symmetric":
        signs = np.where(np.arange(n_heads) % 2 == 0, 1.0, -1.0)
        return scale * signs, scale * signs.copy()
    raise ValueError(f"`kind` must be one of 'random', 'symmetric', 'given', got {kind!r}")


def _log_times(t_end: float, n_eval: int, t_first: float) -> np.ndarray:
    if t_first >= t_end:
        return np.array([0.0, t_end])
    return np.concatenate([[0.0], np.geomspace(t_first, t_end, n_eval - 1)])


def _evaluate_along(omega, mu, d, L, sigma2):
    loss = approx_loss(omega, mu, d=d, L=L, sigma2=sigma2)
    gw, gm = approx_loss_grad(omega, mu, d=d, L=L, sigma2=sigma2)
    gnorm = np.sqrt(np.sum(gw * gw, axis=-1) + np.sum(gm * gm, axis=-1))
    return np.atleast_1d(loss), np.atleast_1d(gnorm)


def integrate_flow(
    omega0,
    mu0,
    *,
    d,
    L,
    sigma2,
    t_end=1e5,
    method="Radau",
    rtol=1e-8,
    atol=1e-11,
    n_eval=400,
    t_first=1e-2,
    stationarity_tol=1e-10,
    exponent_cap=None,
    tolerances: StageTolerances | None = None,
) -> FlowResult:
    r"""Integrate the gradient flow of L̃ from ``(omega0, mu0)``.

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
        Initial state (see :func:`initial_state`).
    d, L : int
        Problem dimension and prompt length (>= 1).
    sigma2 : float
        Noise variance (>= 0).
    t_end : float
        Final time (> 0). The slow drift along S_γ continues to any t.
    method : str
        A :func:`scipy.integrate.solve_ivp` method. Implicit methods
        (``Radau`` default, ``BDF``, ``LSODA``) receive the analytic Jacobian.
    rtol, atol : float
        Solver tolerances (> 0).
    n_eval : int
        Number of output times (>= 2): 0 and log-spaced from ``t_first`` to ``t_end``.
    t_first : float
        First positive output time (> 0).
    stationarity_tol : float
        Terminate when ``|∇L̃| < stationarity_tol`` (>= 0; 0 disables).
    exponent_cap : float, optional
        Terminate when ``d·max ω²`` reaches this (default 0.95·MAX_EXPONENT).
    tolerances : StageTolerances, optional
        Tolerances of the stage diagnostics.

    Returns
    -------
    FlowResult

    Examples
    --------
    >>> from reduced_dynamics import initial_state, integrate_flow
    >>> w0, m0 = initial_state(2, scale=0.01, seed=0)
    >>> res = integrate_flow(w0, m0, d=5, L=40, sigma2=0.1, t_end=1e3)
    >>> bool(res.success), sorted(res.stage_times)
    (True, ['homogeneous', 'sign_matching', 'zero_sum'])
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    omega0, mu0 = check_heads_pair(omega0, mu0)
    if omega0.ndim != 1:
        raise ValueError(f"`omega0` must have shape (H,), got {omega0.shape}")
    t_end = check_positive_float("t_end", t_end)
    rtol = check_positive_float("rtol", rtol)
    atol = check_positive_float("atol", atol)
    n_eval = check_positive_int("n_eval", n_eval)
    if n_eval < 2:
        raise ValueError(f"`n_eval` must be an integer >= 2, got {n_eval}")
    t_first = check_positive_float("t_first", t_first)
    stationarity_tol = check_nonnegative_float("stationarity_tol", stationarity_tol)
    if method not in IMPLICIT_METHODS + EXPLICIT_METHODS:
        raise ValueError(f"`method` must be one of {IMPLICIT_METHODS + EXPLICIT_METHODS}, got {method!r}")
    cap = 0.95 * MAX_EXPONENT if exponent_cap is None else check_positive_float("exponent_cap", exponent_cap)
    if cap > MAX_EXPONENT:
        raise ValueError(f"`exponent_cap` must be in (0, {MAX_EXPONENT:g}], got {exponent_cap}")
    if float(max_exponent(omega0, d)) >= cap:
        raise LossOverflowError(
            f"initial state is outside the overflow-safe region: d·max(ω0²) = {float(max_exponent(omega0, d)):.4g} >= {cap:.4g}"
        )
    tol = tolerances or StageTolerances()
    H = omega0.shape[0]
    kw = dict(d=d, L=L, sigma2=sigma2)
    counts = {"njev": 0}

    def rhs(_t, y):
        gw, gm = approx_loss_grad(y[:H], y[H:], **kw)
        return -np.concatenate([gw, gm])

    def jac(_t, y):
        counts["njev"] += 1
        return -approx_loss_hessian(y[:H], y[H:], **kw)

    def ev_overflow(_t, y):
        return cap - d * float(np.max(y[:H] ** 2))

    ev_overflow.terminal = True
    ev_overflow.direction = -1

    def ev_stationary(_t, y):
        gw, gm = approx_loss_grad(y[:H], y[H:], **kw)
        return math.log(math.sqrt(float(gw @ gw + gm @ gm)) + 1e-300) - math.log(stationarity_tol)

    ev_stationary.terminal = True
    ev_stationary.direction = -1
    events = [ev_overflow] + ([ev_stationary] if stationarity_tol > 0 else [])

    t_eval = _log_times(t_end, n_eval, t_first)
    extra = {"jac": jac} if method in IMPLICIT_METHODS else {}
    start = time.perf_counter()
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite values are turned into errors below
            sol = solve_ivp(
                rhs,
                (0.0, t_end),
                np.concatenate([omega0, mu0]),
                method=method,
                t_eval=t_eval,
                rtol=rtol,
                atol=atol,
                events=events,
                **extra,
            )
    except LossOverflowError as exc:
        # a trial step of the solver left the overflow-safe region before the event could stop it
        raise LossOverflowError(
            f"the solver stepped outside the overflow-safe region ({exc}). Try a smaller |omega0| or `exponent_cap`."
        ) from None
    except (ValueError, np.linalg.LinAlgError) as exc:
        # scipy's linear algebra refuses a non-finite iteration matrix: the step size collapsed because
        # exp(d ωωᵀ) makes the flow too stiff (only near the overflow cap); not a bad argument
        raise LossOverflowError(
            f"the integrator broke down ({exc}) with d·max(ω0²) = {float(max_exponent(omega0, d)):.4g}: the flow is "
            "too stiff near the overflow cap. Try a smaller |omega0|."
        ) from None
    seconds = time.perf_counter() - start
    t = sol.t
    Y = sol.y.T
    if sol.status == 1 and sol.t_events is not None:
        # append the terminal event state so the trajectory ends where the solver stopped
        for k, te in enumerate(sol.t_events):
            if len(te):
                t = np.concatenate([t, te[-1:]])
                Y = np.concatenate([Y, sol.y_events[k][-1:]], axis=0)
    omega, mu = Y[:, :H].copy(), Y[:, H:].copy()
    if sol.status == -1:
        status = -1
        message = f"{STATUS_MESSAGES[-1]} Solver: {sol.message}"
    elif sol.status == 1 and len(sol.t_events[0]):
        status, message = 2, STATUS_MESSAGES[2]
    elif sol.status == 1:
        status, message = 1, STATUS_MESSAGES[1]
    else:
        status, message = 0, STATUS_MESSAGES[0]
    loss, gnorm = _evaluate_along(omega, mu, d, L, sigma2)
    return FlowResult(
        t=t,
        omega=omega,
        mu=mu,
        loss=loss,
        grad_norm=gnorm,
        status=status,
        message=message,
        success=status in (0, 1),
        nfev=int(sol.nfev),
        njev=int(sol.njev) if method in IMPLICIT_METHODS else 0,
        nlu=int(sol.nlu),
        d=d,
        L=L,
        sigma2=sigma2,
        method=method,
        seconds=seconds,
        tolerances=tol,
    )


def gradient_descent(
    omega0,
    mu0,
    *,
    d,
    L,
    sigma2,
    eta,
    n_steps,
    n_records=200,
    tolerances: StageTolerances | None = None,
) -> FlowResult:
    r"""Plain gradient descent on L̃: ``θ ← θ − η ∇L̃(θ)`` (the paper's update rule).

    Recorded at log-spaced steps; the result's ``t`` is ``η × step`` so it can
    be overlaid on the flow.

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
    d, L, sigma2 : problem constants
    eta : float
        Step size (> 0).
    n_steps : int
        Number of steps (>= 1).
    n_records : int
        Number of recorded iterates (>= 2), including step 0 and the last.

    Returns
    -------
    FlowResult
        ``method == "gd"``; ``nfev`` counts gradient evaluations. Status 3 if
        the iterates overflow (step too large).
    """
    d, L, sigma2 = check_problem(d, L, sigma2)
    omega, mu = check_heads_pair(omega0, mu0)
    if omega.ndim != 1:
        raise ValueError(f"`omega0` must have shape (H,), got {omega.shape}")
    if float(max_exponent(omega, d)) > MAX_EXPONENT:
        raise LossOverflowError(
            f"initial state is outside the overflow-safe region: d·max(ω0²) = {float(max_exponent(omega, d)):.4g} > {MAX_EXPONENT:g}"
        )
    eta = check_positive_float("eta", eta)
    n_steps = check_positive_int("n_steps", n_steps)
    n_records = check_positive_int("n_records", n_records)
    if n_records < 2:
        raise ValueError(f"`n_records` must be an integer >= 2, got {n_records}")
    steps = np.unique(np.concatenate([[0], np.geomspace(1, n_steps, n_records - 1).round().astype(int)]))
    record = set(steps.tolist())
    omega, mu = omega.copy(), mu.copy()
    rec_w, rec_m, rec_s = [], [], []
    status, message = 0, "Completed all steps."
    start = time.perf_counter()
    nfev = 0
    last_good = None  # (step, omega, mu) of the latest iterate with a finite loss and gradient
    for k in range(n_steps + 1):
        if not (np.all(np.isfinite(omega)) and np.all(np.isfinite(mu))) or float(max_exponent(omega, d)) > MAX_EXPONENT:
            status, message = 3, STATUS_MESSAGES[3]
            break
        try:
            approx_loss(omega, mu, d=d, L=L, sigma2=sigma2)
            gw, gm = approx_loss_grad(omega, mu, d=d, L=L, sigma2=sigma2)
        except (LossOverflowError, ValueError):
            status, message = 3, STATUS_MESSAGES[3]
            break
        nfev += 1
        last_good = (k, omega.copy(), mu.copy())
        if k in record:
            rec_w.append(omega.copy())
            rec_m.append(mu.copy())
            rec_s.append(k)
        if k == n_steps:
            break
        with np.errstate(over="ignore", invalid="ignore"):
            omega = omega - eta * gw
            mu = mu - eta * gm
    seconds = time.perf_counter() - start
    if status == 3 and last_good is not None and (not rec_s or rec_s[-1] != last_good[0]):
        # end the record at the last finite iterate, so the result shows where GD left the rails
        rec_s.append(last_good[0])
        rec_w.append(last_good[1])
        rec_m.append(last_good[2])
    if not rec_s:
        raise LossOverflowError(
            "L̃ or its gradient is not finite in float64 at the initial state; reduce |mu0| or |omega0|"
        )
    W, M = np.array(rec_w), np.array(rec_m)
    loss, gnorm = _evaluate_along(W, M, d, L, sigma2)
    return FlowResult(
        t=eta * np.array(rec_s, dtype=float),
        omega=W,
        mu=M,
        loss=loss,
        grad_norm=gnorm,
        status=status,
        message=message,
        success=status == 0,
        nfev=nfev,
        njev=0,
        nlu=0,
        d=d,
        L=L,
        sigma2=sigma2,
        method="gd",
        seconds=seconds,
        tolerances=tolerances or StageTolerances(),
    )


def flow_at_times(
    grad, omega0, mu0, times, *, hessian=None, omega_rate=1.0, method="Radau", rtol=1e-9, atol=1e-12, what="flow"
):
    r"""Integrate :math:`\dot\omega = -r\,g_\omega(\omega,\mu),\ \dot\mu = -g_\mu(\omega,\mu)` for any gradient ``g``.

    The shared engine of the comparison flows (the L̃ flow with a slowed ω in
    :mod:`reduced_dynamics.crosscheck.core`, the Monte Carlo risk's flow, the flow of
    :mod:`reduced_dynamics.dynamics.corrected_loss`); :func:`integrate_flow` remains the
    fully diagnosed integrator of L̃ itself.

    Parameters
    ----------
    grad : callable
        ``grad(omega, mu) -> (grad_omega, grad_mu)``, each shape (H,).
    omega0, mu0 : array_like, shape (H,)
    times : array_like, shape (T,)
        Non-decreasing output times, ``times[0] >= 0``; the flow starts at t = 0.
    hessian : callable, optional
        ``hessian(omega, mu) -> (2H, 2H)``; passed (scaled) as the Jacobian to implicit methods.
    omega_rate : float, > 0
        The rate ``r`` of ω relative to μ (1: the plain gradient flow).
    method, rtol, atol
        Passed to :func:`scipy.integrate.solve_ivp`.
    what : str
        Name used in the error message if the integration fails.

    Returns
    -------
    omega, mu : ndarray, shape (T, H)

    Raises
    ------
    RuntimeError
        The solver failed.
    """
    omega0, mu0 = check_heads_pair(omega0, mu0)
    if omega0.ndim != 1:
        raise ValueError(f"`omega0` must have shape (H,), got {omega0.shape}")
    times = check_finite_array("times", times, ndim=1)
    if times[0] < 0 or np.any(np.diff(times) < 0):
        raise ValueError("`times` must be non-negative and non-decreasing")
    r = check_positive_float("omega_rate", omega_rate)
    H = omega0.size
    P = np.concatenate([np.full(H, r), np.ones(H)])

    def rhs(_t, y):
        gw, gm = grad(y[:H], y[H:])
        return -P * np.concatenate([gw, gm])

    extra = {}
    if hessian is not None and method in IMPLICIT_METHODS:
        extra["jac"] = lambda _t, y: -P[:, None] * hessian(y[:H], y[H:])
    y0 = np.concatenate([omega0, mu0])
    if times[-1] == 0:
        Y = np.tile(y0, (times.size, 1))
    else:
        sol = solve_ivp(rhs, (0.0, float(times[-1])), y0, t_eval=times, method=method, rtol=rtol, atol=atol, **extra)
        if sol.status != 0:
            raise RuntimeError(f"{what} integration failed: {sol.message}")
        Y = sol.y.T
    return Y[:, :H].copy(), Y[:, H:].copy()
