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

Time convention (factor 2)
--------------------------
We descend :math:`\tilde L` itself: :math:`\dot\theta = -\nabla\tilde L(\theta)`,
and gradient descent with step η is :math:`\theta \leftarrow \theta - \eta\nabla\tilde L`,
its time being ``η × steps``. The authors' code descends :math:`\tilde L/2`;
its learning rate ``lr`` is our step ``η = lr/2``, and its time
:math:`\tau` (``lr × steps``) is twice ours, :math:`\tau = 2t`. Every time-dependent
law of this package is in our time: the drift law
:math:`\gamma(t) = (16 c d^3 (pn/H) t)^{-1/6}` reads
:math:`\gamma(\tau) = (8 c d^3 (pn/H) \tau)^{-1/6}` in the authors' time
(``tests/reduced_dynamics/dynamics/test_flow.py`` integrates the flow of
:math:`\tilde L/2` and checks the constant 8).

References
----------
docs/theory.md#reduced-model, docs/theory.md#gradient-flow, docs/theory.md#drift-law.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from scipy.integrate import ODEintWarning, odeint, solve_ivp

from reduced_dynamics._results import FrozenResult
from reduced_dynamics._validation import (
    check_finite_array,
    check_nonnegative_float,
    check_nonnegative_int,
    check_positive_float,
    check_positive_int,
)
from reduced_dynamics.dynamics.diagnostics import (
    StageTimes,
    StageTolerances,
    TrajectoryDiagnostics,
    stage_times,
    trajectory_diagnostics,
)
from reduced_dynamics.dynamics.loss import (
    MAX_EXPONENT,
    LossOverflowError,
    _grad_arrays,
    _hessian_arrays,
    _loss_values,
    _prepare,
    _state_pair,
)
from reduced_dynamics.estimation.prompts import as_generator
from reduced_dynamics.setting import Setting, as_setting

__all__ = [
    "FlowResult",
    "FlowFinal",
    "FlowPath",
    "initial_state",
    "integrate_flow",
    "gradient_descent",
    "flow_at_times",
    "STATUS_MESSAGES",
    "status_message",
    "T_END_MAX",
    "IMPLICIT_METHODS",
    "EXPLICIT_METHODS",
    "DEFAULT_TOLERANCES",
    "default_tolerances",
]

IMPLICIT_METHODS = ("Radau", "BDF", "LSODA")
EXPLICIT_METHODS = ("RK45", "RK23", "DOP853")

#: Largest allowed final time of a flow (``t_end``, ``times``). The cost grows with t_end (the paper's
#: setting: 1 s to 1e6, 4 s to 1e9, 24 s to 1e10), while γ(t) ~ t^(-1/6) changes little: the bound keeps
#: every run within seconds.
T_END_MAX = 1e9
#: Allowed solver tolerances: ``rtol`` in [RTOL_MIN, RTOL_MAX], ``atol`` in (0, ATOL_MAX].
RTOL_MIN, RTOL_MAX, ATOL_MAX = 1e-14, 0.1, 1.0
#: Largest number of output times (``n_eval``) and of gradient-descent steps (``n_steps``).
N_EVAL_MAX = 100_000
N_STEPS_MAX = 10**8
#: Budget of gradient evaluations of one :func:`integrate_flow` run (the paper's setting needs ~6e4 for
#: t_end = 1e9); a flow that needs more (extremely stiff settings) ends with status -1 instead of running on.
NFEV_MAX = 150_000
#: Largest number of heads H of a flow (the Hessian is 2H × 2H, exp(d ωωᵀ) is H × H).
N_HEADS_MAX = 1000

#: One table of termination messages, each saying what to try next. Keys: ``(status, kind)``
#: with ``kind`` ``"multi"`` (H >= 2 heads) or ``"single"`` (H = 1); see :func:`status_message`.
STATUS_MESSAGES = {
    (
        0,
        "multi",
    ): "Reached t_end. The flow of H >= 2 never stops (no finite minimiser); increase `t_end` to follow the drift further.",
    (
        0,
        "single",
    ): "Reached t_end before the gradient fell below `stationarity_tol`. The H = 1 flow converges to the kernel regressor ω = ±1/√d; increase `t_end` to reach it.",
    (
        1,
        "multi",
    ): "Stationary point reached: |grad L̃| < `stationarity_tol`. For H >= 2 this is a saddle (e.g. the start ω = μ = 0), not a minimiser: start off it (e.g. `init='random'`).",
    (1, "single"): "Stationary point reached: |grad L̃| fell below `stationarity_tol` (expected for H = 1).",
    (
        2,
        "multi",
    ): "Left the overflow-safe region: d·max(ω²) reached the cap where exp(d ωωᵀ) nears float64 overflow. Try a smaller `init_scale` or smaller |omega0|.",
    (3, "multi"): "Gradient-descent iterates diverged or overflowed. Try a smaller step `eta`.",
    (
        -1,
        "multi",
    ): "Integration failed (see solver message). Try a stiff method (`Radau`, `BDF`), or loosen `rtol`/`atol`.",
}
for _status in (2, 3, -1):
    STATUS_MESSAGES[(_status, "single")] = STATUS_MESSAGES[(_status, "multi")]
del _status


#: Default ``(rtol, atol)`` of :func:`integrate_flow` per method (``None`` of a method not listed: the
#: ``"other"`` entry). LSODA needs tighter tolerances than Radau for the same accuracy at t = 1e5.
DEFAULT_TOLERANCES = {"LSODA": (1e-11, 1e-14), "other": (1e-8, 1e-11)}


def default_tolerances(method: str, rtol=None, atol=None) -> tuple:
    """``(rtol, atol)`` with the :data:`DEFAULT_TOLERANCES` of ``method`` in place of ``None``.

    Parameters
    ----------
    method : str
        A method of :func:`integrate_flow`.
    rtol, atol : float or None
        Given tolerances (returned unchanged, unvalidated) or ``None``.

    Returns
    -------
    tuple of (float, float)
    """
    r0, a0 = DEFAULT_TOLERANCES.get(method, DEFAULT_TOLERANCES["other"])
    return (r0 if rtol is None else rtol, a0 if atol is None else atol)


def status_message(status: int, n_heads: int) -> str:
    """The termination message of :data:`STATUS_MESSAGES` for ``status`` and ``n_heads`` heads.

    Parameters
    ----------
    status : int
        0 reached ``t_end``; 1 stationary; 2 left the overflow-safe region; 3 gradient descent
        diverged; -1 solver failure.
    n_heads : int, >= 1
        Number of heads H (the messages of H = 1 and H >= 2 differ: only H = 1 has a minimiser).

    Returns
    -------
    str
    """
    n_heads = check_positive_int("n_heads", n_heads)
    if status not in (0, 1, 2, 3, -1):
        raise ValueError(f"`status` must be one of 0, 1, 2, 3, -1, got {status!r}")
    return STATUS_MESSAGES[(status, "single" if n_heads == 1 else "multi")]


def _check_tolerances(rtol, atol):
    """Validate the solver tolerances (ValueError naming each)."""
    rtol_v = check_positive_float("rtol", rtol)
    if not RTOL_MIN <= rtol_v <= RTOL_MAX:
        raise ValueError(f"`rtol` must be a number in [{RTOL_MIN:g}, {RTOL_MAX:g}], got {rtol!r}")
    atol_v = check_positive_float("atol", atol)
    if atol_v > ATOL_MAX:
        raise ValueError(f"`atol` must be a number in (0, {ATOL_MAX:g}], got {atol!r}")
    return rtol_v, atol_v


def _check_stage_tolerances(tolerances) -> StageTolerances:
    if tolerances is None:
        return StageTolerances()
    if not isinstance(tolerances, StageTolerances):
        raise TypeError(f"`tolerances` must be a StageTolerances or None, got {tolerances!r}")
    return tolerances


@dataclass(frozen=True)
class FlowFinal(FrozenResult):
    """The last state of a :class:`FlowResult` and its scalar summaries.

    Attributes
    ----------
    t : float
        Last output time.
    omega, mu : ndarray, shape (H,)
        Last state (read-only).
    loss : float
        ``L̃`` there.
    grad_norm : float
        ``|∇L̃|`` there.
    gamma : float
        γ, mean ``|ω_h|`` over non-dummy heads.
    eta_eff : float
        Effective step ``μᵀω``.
    eta_star : float
        The optimal step η* of the setting (the limit of ``eta_eff`` for H >= 2).
    inf_loss : float or None
        ``inf L̃ = 1 + σ² − η*`` for H >= 2; ``None`` for H = 1 (L̃ then has a finite minimiser).
    sum_mu : float
        ``Σ μ_h``.
    zero_sum_ratio : float
        ``|Σμ|/Σ|μ|``.
    n_dummy, n_positive, n_negative : int
        Numbers of dummy heads and of positive / negative non-dummy heads.
    """

    t: float
    omega: np.ndarray
    mu: np.ndarray
    loss: float
    grad_norm: float
    gamma: float
    eta_eff: float
    eta_star: float
    inf_loss: float | None
    sum_mu: float
    zero_sum_ratio: float
    n_dummy: int
    n_positive: int
    n_negative: int


@dataclass(frozen=True, repr=False)
class FlowResult(FrozenResult):
    """Trajectory of the gradient flow (or of gradient descent) on L̃.

    Returned by :func:`integrate_flow` and :func:`gradient_descent`. Frozen;
    every ndarray is read-only. The solver fields mirror
    :class:`scipy.integrate.OdeResult` (``status, message, success, nfev, njev, nlu``).
    Times are in the convention of the module docstring (descent of L̃, not L̃/2).

    Attributes
    ----------
    success : bool
        True for status 0 (reached ``t_end``) or 1 (stationary point).
    status : int
        Key of :data:`STATUS_MESSAGES`: 0 reached ``t_end``; 1 stationary
        (``|∇L̃| < stationarity_tol``); 2 left the overflow-safe region;
        3 gradient descent diverged; -1 solver failure.
    message : str
        ``status_message(status, H)`` (:data:`STATUS_MESSAGES`), saying what to try next (plus the
        solver's message on failure); the messages of H = 1 and H >= 2 differ.
    t : ndarray, shape (T,)
        Output times (for gradient descent: ``eta × step``).
    omega, mu : ndarray, shape (T, H)
        The state at each output time.
    loss : ndarray, shape (T,)
        ``L̃(ω(t), μ(t))``.
    grad_norm : ndarray, shape (T,)
        Euclidean norm of the full gradient ``(∇_ω L̃, ∇_μ L̃)``.
    setting : Setting
        The (scalar, isotropic) data model of the run.
    method : str
        The ``solve_ivp`` method, or ``"gd"`` for gradient descent.
    nfev : int
        Number of gradient evaluations.
    njev : int
        Number of Hessian (Jacobian) evaluations (0 for explicit methods and GD).
    nlu : int
        Number of LU decompositions (0 for explicit methods and GD).
    seconds : float
        Wall time of the integration.
    tolerances : StageTolerances
        Tolerances of the pattern diagnostics.

    Notes
    -----
    Derived quantities (properties, computed from the fields):

    - ``y`` : ndarray (2H, T), the state as rows ``(ω_1..ω_H, μ_1..μ_H)``, like ``OdeResult.y``;
    - ``n_heads`` : int, H;
    - ``diagnostics`` : :class:`~reduced_dynamics.dynamics.diagnostics.TrajectoryDiagnostics`
      with fields of shape (T,);
    - ``gamma`` : ndarray (T,), γ(t), mean ``|ω_h|`` over non-dummy heads;
    - ``eta_eff`` : ndarray (T,), ``μᵀω``;
    - ``sum_mu`` : ndarray (T,), ``Σ_h μ_h``;
    - ``stage_times`` : :class:`~reduced_dynamics.dynamics.diagnostics.StageTimes`;
    - ``final`` : :class:`FlowFinal`, the last state and its scalar summaries;
    - ``n_positive``, ``n_negative`` : int, numbers p and n of positive and negative
      non-dummy heads at the end state;
    - ``drift_law(t=None)`` : the drift law γ(t) for this run's setting and p, n;
    - ``summary()`` : a JSON-friendly dict for the command line.
    """

    success: bool
    status: int
    message: str
    t: np.ndarray
    omega: np.ndarray
    mu: np.ndarray
    loss: np.ndarray
    grad_norm: np.ndarray
    setting: Setting
    method: str
    nfev: int
    njev: int
    nlu: int
    seconds: float
    tolerances: StageTolerances = field(default_factory=StageTolerances)

    # --- scipy-like view -------------------------------------------------
    @property
    def y(self) -> np.ndarray:
        """State as ``(2H, T)``, rows ``(ω_1..ω_H, μ_1..μ_H)``, like ``OdeResult.y`` (a new array)."""
        return np.concatenate([self.omega, self.mu], axis=1).T

    @property
    def n_heads(self) -> int:
        """Number of heads H."""
        return self.omega.shape[1]

    # --- derived diagnostics ---------------------------------------------
    @cached_property
    def diagnostics(self) -> TrajectoryDiagnostics:
        """Per-time pattern diagnostics, each field of shape (T,) (computed once)."""
        return trajectory_diagnostics(self.omega, self.mu, tolerances=self.tolerances)

    @property
    def gamma(self) -> np.ndarray:
        """γ(t): mean |ω_h| over non-dummy heads, shape (T,)."""
        return self.diagnostics.gamma

    @property
    def eta_eff(self) -> np.ndarray:
        """η_eff(t) = μᵀω, shape (T,)."""
        return self.diagnostics.eta_eff

    @property
    def sum_mu(self) -> np.ndarray:
        """Σ_h μ_h(t), shape (T,)."""
        return self.diagnostics.sum_mu

    @cached_property
    def stage_times(self) -> StageTimes:
        """First output time from which each pattern holds until the end of the run (None if never)."""
        return stage_times(self.t, self.omega, self.mu, tolerances=self.tolerances)

    @property
    def n_positive(self) -> int:
        """Number p of positive non-dummy heads (``μ_h > 0``) at the end state."""
        return int(self.diagnostics.n_positive[-1])

    @property
    def n_negative(self) -> int:
        """Number n of negative non-dummy heads (``μ_h < 0``) at the end state."""
        return int(self.diagnostics.n_negative[-1])

    @cached_property
    def final(self) -> FlowFinal:
        """The last state and its scalar summaries."""
        from reduced_dynamics.dynamics.manifold import eta_star, inf_loss

        diag = self.diagnostics
        return FlowFinal(
            t=float(self.t[-1]),
            omega=self.omega[-1],
            mu=self.mu[-1],
            loss=float(self.loss[-1]),
            grad_norm=float(self.grad_norm[-1]),
            gamma=float(diag.gamma[-1]),
            eta_eff=float(diag.eta_eff[-1]),
            eta_star=eta_star(self.setting),
            inf_loss=inf_loss(self.setting) if self.n_heads >= 2 else None,
            sum_mu=float(diag.sum_mu[-1]),
            zero_sum_ratio=float(diag.zero_sum_ratio[-1]),
            n_dummy=int(diag.n_dummy[-1]),
            n_positive=int(diag.n_positive[-1]),
            n_negative=int(diag.n_negative[-1]),
        )

    def drift_law(self, t=None):
        """The drift law γ(t) = (16 c d³ (pn/H) t)^(−1/6) for this run (docs/theory.md#drift-law).

        Uses the run's setting and the numbers p = :attr:`n_positive` and
        n = :attr:`n_negative` of positive and negative non-dummy heads at the
        end state (H = p + n in the law; dummy heads do not count).

        Parameters
        ----------
        t : float or array_like, optional
            Times (> 0) in this result's time units. Default: the output times
            :attr:`t`, where the law is ``inf`` at ``t = 0``.

        Returns
        -------
        float or ndarray
            γ predicted at ``t``.

        Raises
        ------
        ValueError
            If the end state lacks a positive or a negative non-dummy head
            (H = 1, or all heads of one sign): the law needs p, n >= 1.
        """
        from reduced_dynamics.dynamics.manifold import drift_law_gamma

        p, n = self.n_positive, self.n_negative
        if p < 1 or n < 1:
            raise ValueError(
                "`drift_law` needs at least one positive and one negative non-dummy head at the end state, "
                f"got n_positive={p}, n_negative={n}"
            )
        if t is not None:
            return drift_law_gamma(t, self.setting, n_positive=p, n_negative=n)
        out = np.full(self.t.shape, np.inf)
        pos = self.t > 0
        out[pos] = drift_law_gamma(self.t[pos], self.setting, n_positive=p, n_negative=n)
        return out

    def summary(self) -> dict:
        """Everything a run reports, as a JSON-friendly dict (for the command line and JSON files).

        Keys: ``success, status, message, method, n_heads, d, L, sigma2, nfev,
        njev, nlu, seconds``, the fields of :attr:`final` and ``stage_times``
        (a dict ``{"sign_matching", "zero_sum", "homogeneous"}``).
        """
        out = {
            "success": self.success,
            "status": self.status,
            "message": self.message,
            "method": self.method,
            "n_heads": self.n_heads,
            "d": self.setting.d,
            "L": self.setting.L,
            "sigma2": self.setting.sigma2,
            "nfev": self.nfev,
            "njev": self.njev,
            "nlu": self.nlu,
            "seconds": self.seconds,
        }
        out.update(self.final.to_dict())
        out["stage_times"] = self.stage_times.to_dict()
        return out

    def __repr__(self) -> str:
        f = self.final
        return (
            f"FlowResult(success={self.success}, status={self.status}, message={self.message!r}, "
            f"method={self.method!r}, H={self.n_heads}, setting={self.setting!r}, t_end={f.t:.4g}, "
            f"n_times={len(self.t)}, loss={f.loss:.8g}, gamma={f.gamma:.4g}, eta_eff={f.eta_eff:.6g}, nfev={self.nfev})"
        )


@dataclass(frozen=True)
class FlowPath(FrozenResult):
    """States of a flow at requested times (:func:`flow_at_times`, :func:`integrate_corrected_flow`).

    Attributes
    ----------
    t : ndarray, shape (T,)
        The requested output times.
    omega, mu : ndarray, shape (T, H)
        The state at each time.
    """

    t: np.ndarray
    omega: np.ndarray
    mu: np.ndarray


def initial_state(n_heads, *, kind="random", scale=0.01, seed=None, omega0=None, mu0=None):
    """Initial state for the flow.

    Parameters
    ----------
    n_heads : int, in [1, 1000]
        Number of heads H.
    kind : {"random", "symmetric", "given"}
        ``random``: i.i.d. ``N(0, scale²)`` entries drawn from ``seed``;
        ``symmetric``: ``ω = scale·(+1, −1, +1, ...)``, ``μ = ω`` (a ± pair per two heads);
        ``given``: use ``omega0`` and ``mu0``.
    scale : float, > 0
        Size of the initial entries.
    seed : int >= 0 or numpy.random.Generator
        Required for ``kind="random"`` (there is no default seed); unused otherwise.
    omega0, mu0 : array_like, shape (H,), optional
        Used by ``given``.

    Returns
    -------
    ndarray, shape (2, H)
        Row 0 is ``omega0``, row 1 is ``mu0`` (so ``w0, m0 = initial_state(...)`` and
        ``integrate_flow(*initial_state(...), setting)`` work).

    Examples
    --------
    >>> initial_state(4, kind="symmetric", scale=0.1)
    array([[ 0.1, -0.1,  0.1, -0.1],
           [ 0.1, -0.1,  0.1, -0.1]])
    """
    n_heads = check_positive_int("n_heads", n_heads, hi=N_HEADS_MAX)
    if kind == "given" or (omega0 is not None or mu0 is not None):
        if omega0 is None or mu0 is None:
            raise ValueError("`omega0` and `mu0` must both be given for kind='given'")
        omega0 = check_finite_array("omega0", omega0, ndim=1)
        mu0 = check_finite_array("mu0", mu0, ndim=1)
        if omega0.shape != (n_heads,) or mu0.shape != (n_heads,):
            raise ValueError(
                f"`omega0` and `mu0` must have shape ({n_heads},) for n_heads={n_heads}, got {omega0.shape} and {mu0.shape}"
            )
        return np.stack([omega0, mu0])
    scale = check_positive_float("scale", scale)
    if kind == "random":
        if seed is None:
            raise ValueError("`seed` is required for kind='random' (an integer >= 0 or a numpy Generator)")
        if not isinstance(seed, np.random.Generator):
            seed = check_nonnegative_int("seed", seed)
        rng = as_generator(seed)
        return rng.standard_normal((2, n_heads)) * scale
    if kind == "symmetric":
        signs = np.where(np.arange(n_heads) % 2 == 0, 1.0, -1.0)
        return np.stack([scale * signs, scale * signs])
    raise ValueError(f"`kind` must be one of 'random', 'symmetric', 'given', got {kind!r}")


class _BudgetExceeded(Exception):
    """The flow needed more than :data:`NFEV_MAX` gradient evaluations."""


def _check_t_end(name: str, value) -> float:
    """A final time in (0, T_END_MAX] (ValueError naming ``name``): the run time must stay bounded."""
    out = check_positive_float(name, value)
    if out > T_END_MAX:
        raise ValueError(
            f"`{name}` must be a number in (0, {T_END_MAX:g}], got {value!r} (the cost of a flow grows "
            "with its final time)"
        )
    return out


def _check_run_options(n_eval, t_first, tolerances, stationarity_tol, exponent_cap):
    """The output and stopping options shared by :func:`integrate_flow` and ``integrate_flow_batch``.

    Returns ``(n_eval, t_first, tolerances, stationarity_tol, cap)`` validated, in this order (the
    first bad one raises), with ``cap`` the exponent cap (default 0.95·MAX_EXPONENT).
    """
    n_eval = check_positive_int("n_eval", n_eval, hi=N_EVAL_MAX)
    if n_eval < 2:
        raise ValueError(f"`n_eval` must be an integer in [2, {N_EVAL_MAX}], got {n_eval}")
    t_first = check_positive_float("t_first", t_first)
    tol = _check_stage_tolerances(tolerances)
    stationarity_tol = check_nonnegative_float("stationarity_tol", stationarity_tol)
    cap = 0.95 * MAX_EXPONENT if exponent_cap is None else check_positive_float("exponent_cap", exponent_cap)
    if cap > MAX_EXPONENT:
        raise ValueError(f"`exponent_cap` must be in (0, {MAX_EXPONENT:g}], got {exponent_cap}")
    return n_eval, t_first, tol, stationarity_tol, cap


def _log_times(t_end: float, n_eval: int, t_first: float) -> np.ndarray:
    if t_first >= t_end:
        return np.array([0.0, t_end])
    return np.concatenate([[0.0], np.geomspace(t_first, t_end, n_eval - 1)])


def _evaluate_along(omega, mu, setting):
    omega, mu, d, c, s2, E = _prepare(omega, mu, setting, "integrate_flow")
    loss = _loss_values(omega, mu, c, s2, E)
    gw, gm = _grad_arrays(omega, mu, d, c, E)
    gnorm = np.sqrt(np.sum(gw * gw, axis=-1) + np.sum(gm * gm, axis=-1))
    return np.atleast_1d(loss), np.atleast_1d(gnorm)


def _single_state(omega0, mu0):
    omega0, mu0 = _state_pair(omega0, mu0, ("omega0", "mu0"))
    if omega0.ndim != 1 or mu0.ndim != 1:
        raise ValueError(f"`omega0` and `mu0` must have shape (H,), got {omega0.shape} and {mu0.shape}")
    if omega0.size > N_HEADS_MAX:
        raise ValueError(f"`omega0` must have at most {N_HEADS_MAX} heads, got {omega0.size}")
    return omega0.copy(), mu0.copy()


def integrate_flow(
    omega0,
    mu0,
    setting,
    *,
    t_end=1e5,
    method="LSODA",
    rtol=None,
    atol=None,
    n_eval=400,
    t_first=1e-2,
    stationarity_tol=1e-10,
    exponent_cap=None,
    tolerances: StageTolerances | None = None,
) -> FlowResult:
    r"""Integrate the gradient flow :math:`\dot\theta = -\nabla\tilde L(\theta)` from ``(omega0, mu0)``.

    **Time convention.** We descend L̃ itself. The authors' code descends
    L̃/2: their learning rate ``lr`` corresponds to our step ``lr/2`` and their
    time τ = ``lr × steps`` to our ``t = τ/2``; the drift constant 16 of
    :func:`reduced_dynamics.drift_law_gamma` becomes 8 in their time
    (module docstring; docs/theory.md#drift-law).

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
        Initial state (see :func:`initial_state`).
    setting : Setting
        Scalar and isotropic.
    t_end : float, in (0, T_END_MAX = 1e9]
        Final time. The slow drift along S_γ continues to any t; the bound keeps the run time
        within seconds. At most ``NFEV_MAX`` gradient evaluations are spent: a flow too stiff
        to finish within them ends with status -1 at the last state the solver evaluated.
    method : str
        ``"LSODA"`` (default): scipy's LSODA driven by its own Fortran loop
        (:func:`scipy.integrate.odeint`) with the analytic Jacobian and a pre-bound right-hand side
        (Python floats for H <= 6); the events are located exactly by handing over to
        :func:`scipy.integrate.solve_ivp` at the first evaluation that meets one. Any other
        :func:`scipy.integrate.solve_ivp` method (``Radau``, ``BDF``; explicit ``RK45``, ``RK23``,
        ``DOP853``) runs through ``solve_ivp`` with the same pre-bound functions; implicit methods
        receive the analytic Jacobian.
    rtol : float, in [1e-14, 0.1], optional
        Relative tolerance of the solver. Default :data:`DEFAULT_TOLERANCES` of the method: 1e-11 for
        LSODA (its error control is looser than Radau's: at 1e-8 its final state at t = 1e5 is off by
        ~1e-7, at 1e-11 by ~3e-10), 1e-8 for the others.
    atol : float, in (0, 1], optional
        Absolute tolerance of the solver. Default 1e-14 for LSODA, 1e-11 for the others.
    n_eval : int, in [2, 100000]
        Number of output times: 0 and log-spaced from ``t_first`` to ``t_end``.
    t_first : float, > 0
        First positive output time.
    stationarity_tol : float, >= 0
        Terminate when ``|∇L̃| < stationarity_tol`` (0 disables). A start that is already
        stationary (e.g. the saddle ``ω = μ = 0``) returns at once with status 1 and the
        one-point trajectory ``t = [0]``.
    exponent_cap : float in (0, MAX_EXPONENT], optional
        Terminate when ``d·max ω²`` reaches this (default 0.95·MAX_EXPONENT).
    tolerances : StageTolerances, optional
        Tolerances of the stage diagnostics (a ``TypeError`` for anything else).

    Returns
    -------
    FlowResult

    Raises
    ------
    ValueError
        A bad argument, named in the message with its allowed range.
    TypeError
        ``tolerances`` is not a :class:`StageTolerances`.
    LossOverflowError
        The initial state is outside the overflow-safe region, or the solver
        broke down near it.

    References
    ----------
    docs/theory.md#gradient-flow, docs/theory.md#stages

    Examples
    --------
    >>> from reduced_dynamics import initial_state, integrate_flow
    >>> from reduced_dynamics.setting import Setting
    >>> w0, m0 = initial_state(2, scale=0.01, seed=0)
    >>> res = integrate_flow(w0, m0, Setting(d=5, L=40, sigma2=0.1), t_end=1e3)
    >>> bool(res.success), res.stage_times.all_reached
    (True, True)
    """
    setting = as_setting(setting, "integrate_flow")
    setting.require_isotropic("integrate_flow").require_softmax("integrate_flow")
    omega0, mu0 = _single_state(omega0, mu0)
    t_end = _check_t_end("t_end", t_end)
    if method not in IMPLICIT_METHODS + EXPLICIT_METHODS:
        raise ValueError(f"`method` must be one of {IMPLICIT_METHODS + EXPLICIT_METHODS}, got {method!r}")
    rtol, atol = _check_tolerances(*default_tolerances(method, rtol, atol))
    n_eval, t_first, tol, stationarity_tol, cap = _check_run_options(
        n_eval, t_first, tolerances, stationarity_tol, exponent_cap
    )
    d = setting.d
    with np.errstate(over="ignore"):
        start_expo = d * float(np.max(omega0**2))
    if start_expo >= cap:
        raise LossOverflowError(
            f"initial state `omega0` is outside the overflow-safe region: d·max(ω0²) = {start_expo:.4g} >= {cap:.4g}"
        )
    H = omega0.shape[0]
    y0 = np.concatenate([omega0, mu0])
    kern = _FlowKernels(setting, H, cap, stationarity_tol)

    if stationarity_tol > 0:
        with np.errstate(all="ignore"):  # a huge gradient is simply not stationary
            g0 = kern.rhs_array(0.0, y0)
            g0_norm = math.sqrt(float(g0 @ g0))
        if g0_norm < stationarity_tol:
            # the start is already stationary (e.g. the saddle ω = μ = 0): the event of the solver only
            # sees crossings, so report it here, with the one-point trajectory
            loss, gnorm = _evaluate_along(omega0[None, :], mu0[None, :], setting)
            return FlowResult(
                success=True,
                status=1,
                message=status_message(1, H),
                t=np.zeros(1),
                omega=omega0[None, :].copy(),
                mu=mu0[None, :].copy(),
                loss=loss,
                grad_norm=gnorm,
                setting=setting,
                method=method,
                nfev=1,
                njev=0,
                nlu=0,
                seconds=0.0,
                tolerances=tol,
            )

    t_eval = _log_times(t_end, n_eval, t_first)
    start = time.perf_counter()
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite values are turned into errors below
            if method == "LSODA":
                run = _lsoda_path(kern, y0, t_eval, rtol, atol, start_expo)
            else:
                run = _solve_ivp_path(kern, 0.0, y0, t_eval, method, rtol, atol, start_expo)
    except _BudgetExceeded:
        # too stiff to finish within the budget: end at the last state the solver evaluated (status -1)
        run = None
    seconds = time.perf_counter() - start
    if run is None:
        t = np.array([0.0, kern.last_t])
        Y = np.stack([y0, np.asarray(kern.last_y)])
        omega, mu = Y[:, :H].copy(), Y[:, H:].copy()
        loss, gnorm = _evaluate_along(omega, mu, setting)
        return FlowResult(
            success=False,
            status=-1,
            message=(
                f"{status_message(-1, H)} The solver needed more than {NFEV_MAX} gradient evaluations "
                f"(the flow is too stiff at {setting!r}) and stopped at t = {kern.last_t:.4g}; try a shorter "
                "`t_end` or a looser `rtol`/`atol`."
            ),
            t=t,
            omega=omega,
            mu=mu,
            loss=loss,
            grad_norm=gnorm,
            setting=setting,
            method=method,
            nfev=NFEV_MAX,
            njev=kern.njev,
            nlu=0,
            seconds=seconds,
            tolerances=tol,
        )
    t, Y, status, solver_message, nlu = run
    omega, mu = Y[:, :H].copy(), Y[:, H:].copy()
    message = status_message(status, H) + (f" Solver: {solver_message}" if status == -1 else "")
    loss, gnorm = _evaluate_along(omega, mu, setting)
    return FlowResult(
        success=status in (0, 1),
        status=status,
        message=message,
        t=t,
        omega=omega,
        mu=mu,
        loss=loss,
        grad_norm=gnorm,
        setting=setting,
        method=method,
        nfev=kern.nfev,
        njev=kern.njev if method in IMPLICIT_METHODS else 0,
        nlu=nlu,
        seconds=seconds,
        tolerances=tol,
    )


class _Event(Exception):
    """The fast LSODA pass met an event condition (overflow cap or stationarity) at time ``t``."""

    def __init__(self, t):
        super().__init__(t)
        self.t = t


#: Largest H whose right-hand side and Jacobian run on Python floats (cheaper than numpy on tiny arrays).
_PY_KERNEL_MAX_HEADS = 6


class _FlowKernels:
    """Pre-bound ``−∇L̃`` and ``−∇²L̃`` of one scalar setting and H, for the single-trajectory solvers.

    Validated once by the caller; each call only guards the overflow region and counts. For H <= 6 the
    arithmetic runs on Python floats (a few µs per call, against ~20 µs for numpy on arrays of 2H
    entries); for larger H on numpy arrays. ``abort=True`` makes the right-hand side raise
    :class:`_Event` at the first evaluation beyond the overflow cap or below the stationarity threshold
    (the fast LSODA pass then hands over to the exact event location of :func:`_solve_ivp_path`).
    """

    def __init__(self, setting, H, cap, stationarity_tol):
        self.H = H
        self.d = float(setting.d)
        self.c = float(setting.c)
        self.cap = cap
        self.stat2 = stationarity_tol * stationarity_tol
        self.nfev = 0
        self.njev = 0
        self.abort = False
        self.flag_t = None  # time of the first evaluation below the stationarity threshold (fast pass)
        self.last_t = 0.0
        self.last_y = None
        d_arr = np.asarray(self.d)
        c_arr = np.asarray(self.c)
        self._d_arr, self._c_arr = d_arr, c_arr

    # --- the state guard ---------------------------------------------------------------------------
    def _guard(self, t, w):
        expo = self.d * max([x * x for x in w])
        if not expo <= MAX_EXPONENT:  # also catches NaN
            raise LossOverflowError(f"d·max(ω²) = {expo:.4g} exceeds {MAX_EXPONENT:g}")
        if self.abort and not expo < self.cap:
            raise _Event(t)

    def _grad_lists(self, w, m):
        H, d, c = self.H, self.d, self.c
        cd = c * d
        R = range(H)
        u = -1.0
        a = [0.0] * H
        for h in R:
            a[h] = m[h] * w[h]
            u += a[h]
        out = [0.0] * (2 * H)
        exp = math.exp
        for h in R:
            dw = d * w[h]
            g = 0.0
            em = 0.0
            for k in R:
                e = exp(dw * w[k])
                g += e * a[k]
                em += e * m[k]
            out[h] = -2.0 * m[h] * (u + cd * g)
            out[H + h] = -2.0 * (u * w[h] + c * em)
        return out

    def rhs_array(self, t, y):
        """``−∇L̃(y)`` as an ndarray (no counting, no guard beyond the overflow check)."""
        H = self.H
        if H <= _PY_KERNEL_MAX_HEADS:
            yl = y.tolist()
            return np.array(self._grad_lists(yl[:H], yl[H:]))
        w, m = y[:H], y[H:]
        E = np.exp(self._d_arr * w[:, None] * w[None, :])
        gw, gm = _grad_arrays(w, m, self._d_arr, self._c_arr, E)
        return -np.concatenate([gw, gm])

    def rhs(self, y, t):
        """``−∇L̃`` for odeint (``(y, t)``): counted, guarded, remembers the latest state."""
        self.nfev += 1
        if self.nfev > NFEV_MAX:
            raise _BudgetExceeded()
        H = self.H
        if H <= _PY_KERNEL_MAX_HEADS:
            yl = y.tolist()
            self._guard(t, yl[:H])
            out = self._grad_lists(yl[:H], yl[H:])
            if self.abort and self.stat2 > 0 and self.flag_t is None and sum([x * x for x in out]) < self.stat2:
                self.flag_t = t
        else:
            w = y[:H]
            self._guard(t, w.tolist())
            E = np.exp(self._d_arr * w[:, None] * w[None, :])
            gw, gm = _grad_arrays(w, y[H:], self._d_arr, self._c_arr, E)
            out = -np.concatenate([gw, gm])
            if self.abort and self.stat2 > 0 and self.flag_t is None and float(out @ out) < self.stat2:
                self.flag_t = t
        if t >= self.last_t:
            self.last_t, self.last_y = float(t), y.copy()
        return out

    def rhs_ivp(self, t, y):
        """``rhs`` with solve_ivp's argument order ``(t, y)``, returning an ndarray."""
        return np.asarray(self.rhs(y, t))

    def jac(self, y, t):
        """``−∇²L̃`` for odeint (``(y, t)``), shape (2H, 2H) (the formulas of :func:`approx_loss_hessian`)."""
        self.njev += 1
        H = self.H
        if H > _PY_KERNEL_MAX_HEADS:
            w, m = y[:H], y[H:]
            self._check_expo(w.tolist())
            E = np.exp(self._d_arr * w[:, None] * w[None, :])
            return -_hessian_arrays(w, m, self._d_arr, self._c_arr, E)
        yl = y.tolist()
        w, m = yl[:H], yl[H:]
        self._check_expo(w)
        d, c = self.d, self.c
        cd = c * d
        R = range(H)
        exp = math.exp
        E = [[exp(d * w[i] * w[j]) for j in R] for i in R]
        a = [m[k] * w[k] for k in R]
        u = sum(a) - 1.0
        n2 = 2 * H
        J = [[0.0] * n2 for _ in range(n2)]
        for i in R:
            Ei = E[i]
            g = 0.0
            s2 = 0.0
            for k in R:
                g += Ei[k] * a[k]
                s2 += Ei[k] * a[k] * w[k]
            mi, wi = m[i], w[i]
            Ji, Jhi = J[i], J[H + i]
            for j in R:
                e = Ei[j]
                mm = mi * m[j]
                Ji[j] = -(2.0 * mm + 2.0 * cd * mm * e * (1.0 + d * wi * w[j]))
                # ∂²L̃/∂ω_i∂μ_j
                hwm = 2.0 * mi * w[j] * (1.0 + cd * e)
                Ji[H + j] = -hwm
                J[H + j][i] = -hwm
                Jhi[H + j] = -(2.0 * wi * w[j] + 2.0 * c * e)
            Ji[i] -= 2.0 * cd * d * mi * s2
            Ji[H + i] -= 2.0 * (u + cd * g)
            J[H + i][i] -= 2.0 * (u + cd * g)
        return J

    def _check_expo(self, w):
        expo = self.d * max([x * x for x in w])
        if not expo <= MAX_EXPONENT:
            raise LossOverflowError(f"d·max(ω²) = {expo:.4g} exceeds {MAX_EXPONENT:g}")

    def jac_ivp(self, t, y):
        return self.jac(y, t)

    def grad_norm(self, y):
        out = self.rhs_array(0.0, y)
        return math.sqrt(float(out @ out))


def _solve_ivp_path(kern, t0, y0, t_eval, method, rtol, atol, start_expo):
    """:func:`scipy.integrate.solve_ivp` from ``(t0, y0)`` to ``t_eval[-1]`` with the two terminal events.

    Returns ``(t, Y, status, solver_message, nlu)`` with Y of shape (T, 2H); ``t`` holds the ``t_eval``
    points reached plus the event point. Raises :class:`LossOverflowError` when the solver breaks down.
    """
    H, d, cap = kern.H, kern.d, kern.cap
    kern.abort = False

    def ev_overflow(_t, y):
        return cap - d * float(np.max(y[:H] ** 2))

    ev_overflow.terminal = True
    ev_overflow.direction = -1

    def ev_stationary(_t, y):
        return math.log(kern.grad_norm(y) + 1e-300) - 0.5 * math.log(kern.stat2)

    ev_stationary.terminal = True
    ev_stationary.direction = -1
    events = [ev_overflow] + ([ev_stationary] if kern.stat2 > 0 else [])
    extra = {"jac": kern.jac_ivp} if method in IMPLICIT_METHODS else {}
    t_end = float(t_eval[-1])
    try:
        sol = solve_ivp(
            kern.rhs_ivp,
            (t0, t_end),
            y0,
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
            f"the integrator broke down ({exc}) with d·max(ω0²) = {start_expo:.4g}: the flow is "
            "too stiff near the overflow cap. Try a smaller |omega0|."
        ) from None
    t = sol.t
    Y = sol.y.T
    if sol.status == 1 and sol.t_events is not None:
        # append the terminal event state so the trajectory ends where the solver stopped
        for k, te in enumerate(sol.t_events):
            if len(te):
                t = np.concatenate([t, te[-1:]])
                Y = np.concatenate([Y, sol.y_events[k][-1:]], axis=0)
    if sol.status == -1:
        status = -1
    elif sol.status == 1 and len(sol.t_events[0]):
        status = 2
    elif sol.status == 1:
        status = 1
    else:
        status = 0
    return t, Y, status, sol.message, int(sol.nlu)


def _lsoda_path(kern, y0, t_eval, rtol, atol, start_expo):
    """LSODA driven by its own Fortran loop (:func:`scipy.integrate.odeint`), with the analytic Jacobian.

    Events: the fast pass records the first evaluation below the stationarity threshold and raises
    :class:`_Event` at the first one beyond the overflow cap. From the last output time before that
    evaluation, :func:`_solve_ivp_path` continues and locates the event exactly (as the other methods
    do). After an overflow abort the outputs before it are recomputed first (LSODA's steps do not depend
    on the output times; the ``tcrit`` stop keeps it from stepping past the last one). A failure of the
    Fortran loop hands the whole run to :func:`_solve_ivp_path`.
    """
    kern.abort = True
    kern.flag_t = None
    ok = "Integration successful."
    try:
        with warnings.catch_warnings():  # a failure is reported through info["message"] and handled below
            warnings.simplefilter("ignore", ODEintWarning)
            Y, info = odeint(
                kern.rhs, y0, t_eval, Dfun=kern.jac, rtol=rtol, atol=atol, full_output=True, mxstep=NFEV_MAX
            )
        t_flag = kern.flag_t
        if info["message"] != ok:
            return _solve_ivp_path(kern, 0.0, y0, t_eval, "Radau", rtol, atol, start_expo)
        if t_flag is None:
            return t_eval.copy(), Y, 0, info["message"], int(info["nje"][-1])
        k = max(1, int(np.searchsorted(t_eval, t_flag, side="left")))  # outputs t_eval[:k] are < t_flag
        Y_head = Y[:k]
        nje_head = int(info["nje"][k - 1]) if k >= 2 else 0
    except _Event as ev:
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
                    Dfun=kern.jac,
                    rtol=rtol,
                    atol=atol,
                    full_output=True,
                    mxstep=NFEV_MAX,
                    tcrit=t_eval[k - 1 : k],
                )
            if info["message"] != ok:
                return _solve_ivp_path(kern, 0.0, y0, t_eval, "Radau", rtol, atol, start_expo)
            nje_head = int(info["nje"][-1])
        else:
            Y_head, nje_head = y0[None, :], 0
    finally:
        kern.abort = False
    # the tail starts from an output state above the stationarity threshold, so its event sees the crossing
    while k > 1 and kern.stat2 > 0 and kern.grad_norm(Y_head[k - 1]) ** 2 < kern.stat2:
        k -= 1
    t_tail, Y_tail, status, message, nlu = _solve_ivp_path(
        kern, float(t_eval[k - 1]), Y_head[k - 1], t_eval[k - 1 :], "Radau", rtol, atol, start_expo
    )
    t = np.concatenate([t_eval[: k - 1], t_tail])
    Y = np.concatenate([Y_head[: k - 1], Y_tail], axis=0)
    return t, Y, status, message, nje_head + nlu


def _record_steps(n_steps: int, n_records: int) -> np.ndarray:
    """Exactly ``n_records`` distinct steps in ``[0, n_steps]``, including both ends, close to log-spaced.

    Rounded ``geomspace(1, n_steps)`` values collide at small steps; each
    collision is pushed to the next free integer (and the tail is kept clear
    so the last record is ``n_steps``). Needs ``n_records <= n_steps + 1``.
    """
    target = np.concatenate([[0.0], np.geomspace(1.0, n_steps, n_records - 1)])
    target[-1] = n_steps  # (geomspace with one point returns its start)
    steps = np.empty(n_records, dtype=np.int64)
    steps[0] = 0
    for k in range(1, n_records):
        want = int(round(target[k]))
        steps[k] = min(max(want, steps[k - 1] + 1), n_steps - (n_records - 1 - k))
    return steps


def gradient_descent(
    omega0,
    mu0,
    setting,
    *,
    eta,
    n_steps,
    n_records=None,
    tolerances: StageTolerances | None = None,
) -> FlowResult:
    r"""Plain gradient descent on L̃: ``θ ← θ − η ∇L̃(θ)``.

    Recorded at exactly ``n_records`` steps, close to log-spaced, including
    step 0 and the last; the result's ``t`` is ``η × step`` so it can be
    overlaid on :func:`integrate_flow`.

    **Time convention.** We descend L̃ itself. The authors' code descends
    L̃/2 (``θ ← θ − lr ∇(L̃/2)``): their learning rate ``lr`` is our
    ``eta = lr/2``, their time ``lr × steps`` is twice our ``t``, and the drift
    constant 16 of :func:`reduced_dynamics.drift_law_gamma` becomes 8 in
    their time (module docstring).

    Parameters
    ----------
    omega0, mu0 : array_like, shape (H,)
    setting : Setting
        Scalar and isotropic.
    eta : float, > 0
        Step size.
    n_steps : int, in [1, 1e8]
        Number of steps.
    n_records : int in [2, n_steps + 1], optional
        Number of recorded iterates, including step 0 and the last step.
        Default ``min(200, n_steps + 1)``.
    tolerances : StageTolerances, optional

    Returns
    -------
    FlowResult
        ``method == "gd"``; ``nfev`` counts gradient evaluations. Exactly
        ``n_records`` iterates unless the iterates overflow (status 3, step too
        large): the record then stops at the last finite iterate.

    Raises
    ------
    ValueError
        ``n_records`` outside ``[2, n_steps + 1]`` (there are only
        ``n_steps + 1`` distinct iterates), or other bad arguments.
    LossOverflowError
        The initial state is outside the overflow-safe region.

    References
    ----------
    docs/theory.md#gradient-flow
    """
    setting = as_setting(setting, "gradient_descent")
    setting.require_isotropic("gradient_descent").require_softmax("gradient_descent")
    omega, mu = _single_state(omega0, mu0)
    H = omega.shape[0]
    d = setting.d
    with np.errstate(over="ignore"):
        expo0 = d * float(np.max(omega**2))
    if expo0 > MAX_EXPONENT:
        raise LossOverflowError(
            f"initial state `omega0` is outside the overflow-safe region: d·max(ω0²) = {expo0:.4g} > {MAX_EXPONENT:g}"
        )
    eta = check_positive_float("eta", eta)
    n_steps = check_positive_int("n_steps", n_steps, hi=N_STEPS_MAX)
    tol = _check_stage_tolerances(tolerances)
    n_records = min(200, n_steps + 1) if n_records is None else check_positive_int("n_records", n_records)
    if not 2 <= n_records <= n_steps + 1:
        raise ValueError(
            f"`n_records` must be an integer in [2, n_steps + 1] = [2, {n_steps + 1}] "
            f"(there are only n_steps + 1 distinct iterates), got {n_records}"
        )
    steps = _record_steps(n_steps, n_records)
    record = set(steps.tolist())
    rec_w, rec_m, rec_s = [], [], []
    status, message = 0, "Completed all steps."
    start = time.perf_counter()
    nfev = 0
    last_good = None  # (step, omega, mu) of the latest iterate with a finite loss and gradient
    if H <= _PY_KERNEL_MAX_HEADS:
        status, message, nfev, last_good = _gd_floats(omega, mu, setting, eta, n_steps, record, rec_w, rec_m, rec_s)
    else:
        for k in range(n_steps + 1):
            with np.errstate(over="ignore", invalid="ignore"):
                far = d * float(np.max(omega**2)) > MAX_EXPONENT
            if not (np.all(np.isfinite(omega)) and np.all(np.isfinite(mu))) or far:
                status, message = 3, status_message(3, H)
                break
            try:
                w, m, dd, c, s2, E = _prepare(omega, mu, setting, "gradient_descent")
                _loss_values(w, m, c, s2, E)
                gw, gm = _grad_arrays(w, m, dd, c, E)
            except (LossOverflowError, ValueError):
                status, message = 3, status_message(3, H)
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
    loss, gnorm = _evaluate_along(W, M, setting)
    return FlowResult(
        success=status == 0,
        status=status,
        message=message,
        t=eta * np.array(rec_s, dtype=float),
        omega=W,
        mu=M,
        loss=loss,
        grad_norm=gnorm,
        setting=setting,
        method="gd",
        nfev=nfev,
        njev=0,
        nlu=0,
        seconds=seconds,
        tolerances=tol,
    )


def _gd_floats(omega, mu, setting, eta, n_steps, record, rec_w, rec_m, rec_s):
    """The loop of :func:`gradient_descent` on Python floats (H <= 6): same checks, same records.

    Returns ``(status, message, nfev, last_good)`` and appends the recorded iterates to the lists.
    """
    H = omega.shape[0]
    kern = _FlowKernels(setting, H, MAX_EXPONENT, 0.0)
    d, c, s2 = kern.d, kern.c, float(setting.sigma2)
    w, m = omega.tolist(), mu.tolist()
    isfinite, exp = math.isfinite, math.exp
    R = range(H)
    status, message, nfev, last_good = 0, "Completed all steps.", 0, None
    for k in range(n_steps + 1):
        if not all(isfinite(x) for x in w + m) or not d * max([x * x for x in w]) <= MAX_EXPONENT:
            status, message = 3, status_message(3, H)
            break
        u = sum([m[h] * w[h] for h in R])
        quad = sum([m[h] * exp(d * w[h] * w[j]) * m[j] for h in R for j in R])
        loss = s2 + (1.0 - u) * (1.0 - u) + c * quad  # (x ** 2 would raise on overflow)
        ng = kern._grad_lists(w, m)  # −∇L̃
        if not (isfinite(loss) and all(isfinite(x) for x in ng)):
            status, message = 3, status_message(3, H)
            break
        nfev += 1
        last_good = (k, np.array(w), np.array(m))
        if k in record:
            rec_w.append(last_good[1])
            rec_m.append(last_good[2])
            rec_s.append(k)
        if k == n_steps:
            break
        w = [w[h] + eta * ng[h] for h in R]
        m = [m[h] + eta * ng[H + h] for h in R]
    return status, message, nfev, last_good


def _grad_parts(g):
    """A gradient callable's output -> ``(grad_omega, grad_mu)`` (accepts a LossGradient or a pair)."""
    if hasattr(g, "omega") and hasattr(g, "mu"):
        return g.omega, g.mu
    gw, gm = g
    return gw, gm


def flow_at_times(
    grad, omega0, mu0, times, *, hessian=None, omega_rate=1.0, method="Radau", rtol=1e-9, atol=1e-12, what="flow"
) -> FlowPath:
    r"""Integrate :math:`\dot\omega = -r\,g_\omega(\omega,\mu),\ \dot\mu = -g_\mu(\omega,\mu)` for any gradient ``g``.

    The shared engine of the comparison flows (the L̃ flow with a slowed ω in
    :mod:`reduced_dynamics.crosscheck`, the Monte Carlo risk's flow, the flow of
    :mod:`reduced_dynamics.dynamics.corrected_loss`); :func:`integrate_flow` remains the
    fully diagnosed integrator of L̃ itself. No data model enters here (it lives in ``grad``).

    Parameters
    ----------
    grad : callable
        ``grad(omega, mu)`` returning a
        :class:`~reduced_dynamics.dynamics.loss.LossGradient` or a pair
        ``(grad_omega, grad_mu)``, each of shape (H,).
    omega0, mu0 : array_like, shape (H,)
    times : array_like, shape (T,)
        Non-decreasing output times, ``0 <= times[0]``, ``times[-1] <= T_END_MAX``; the flow starts at t = 0.
    hessian : callable, optional
        ``hessian(omega, mu) -> (2H, 2H)``; passed (scaled) as the Jacobian to implicit methods.
    omega_rate : float, in [1e-6, 1e6]
        The rate ``r`` of ω relative to μ (1: the plain gradient flow).
    method : str
        A :func:`scipy.integrate.solve_ivp` method.
    rtol : float, in [1e-14, 0.1]
        Relative tolerance.
    atol : float, in (0, 1]
        Absolute tolerance.
    what : str
        Name used in the error message if the integration fails.

    Returns
    -------
    FlowPath
        ``t`` (the requested times), ``omega`` and ``mu`` of shape (T, H).

    Raises
    ------
    RuntimeError
        The solver failed.
    """
    omega0, mu0 = _single_state(omega0, mu0)
    times = check_finite_array("times", times, ndim=1)
    if times[0] < 0 or np.any(np.diff(times) < 0) or times[-1] > T_END_MAX:
        raise ValueError(f"`times` must be non-negative, non-decreasing and <= {T_END_MAX:g}")
    r = check_positive_float("omega_rate", omega_rate)
    if not 1e-6 <= r <= 1e6:
        raise ValueError(f"`omega_rate` must be a number in [1e-06, 1e+06], got {omega_rate!r}")
    rtol, atol = _check_tolerances(rtol, atol)
    if method not in IMPLICIT_METHODS + EXPLICIT_METHODS:
        raise ValueError(f"`method` must be one of {IMPLICIT_METHODS + EXPLICIT_METHODS}, got {method!r}")
    H = omega0.size
    P = np.concatenate([np.full(H, r), np.ones(H)])

    def rhs(_t, y):
        gw, gm = _grad_parts(grad(y[:H], y[H:]))
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
    return FlowPath(t=times, omega=Y[:, :H].copy(), mu=Y[:, H:].copy())
