"""The one result type of every flow: :class:`Flow` (one trajectory, or a batch of them)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

import numpy as np

from reduced_dynamics._results import FrozenResult, jsonable, readonly
from reduced_dynamics.dynamics.diagnostics import StageTolerances

__all__ = ["Flow", "Final"]


@dataclass(frozen=True, repr=False)
class Final(FrozenResult):
    """The last state of a flow and its scalar summaries (``model.summarize``), as attributes.

    Attributes
    ----------
    t : float
        Time of the last state.
    values : dict
        The model's summary of the last state; each key is also an attribute
        (``final.gamma``, ``final.eta_eff``, ...).
    """

    t: float
    values: dict

    def __getattr__(self, name):
        values = self.__dict__.get("values")
        if values is not None and name in values:
            v = values[name]
            if isinstance(v, list):  # numbers come back as arrays, anything else (head roles ...) as a tuple
                a = np.asarray(v)
                return a if a.dtype.kind in "fiub" else tuple(v)
            return v
        raise AttributeError(f"'Final' has no attribute {name!r}; its keys are {sorted(values or ())}")

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, **jsonable(self.values)}

    def __repr__(self) -> str:
        show = {k: v for k, v in self.values.items() if not isinstance(v, list)}
        return f"Final(t={self.t:.6g}, {', '.join(f'{k}={v!r}' for k, v in show.items())})"


@dataclass(frozen=True, repr=False)
class Flow(FrozenResult):
    """Trajectory (or batch of trajectories) of the gradient flow of a reduced model.

    Returned by :func:`reduced_dynamics.integrate` and :func:`reduced_dynamics.gradient_descent`.
    Frozen, arrays read-only. The solver fields mirror :class:`scipy.integrate.OdeResult`.

    Attributes
    ----------
    success : bool or ndarray of bool, shape (B,)
        Status 0 (reached ``t_end``) or 1 (stationary).
    status : int or ndarray of int, shape (B,)
        A :class:`~reduced_dynamics.flow.Status` code (one table for every model).
    message : str or tuple of str
        What happened and what to try next.
    t : ndarray, shape (T,)
        Output times (for a batch: the common output times).
    states : ndarray, shape (T, size) or (B, T, size)
        The state vector at each output time (a batch: NaN after a trajectory stopped).
    loss : ndarray, shape (T,) or (B, T)
        The model's objective along the path (NaN where a trajectory of a batch had stopped). Built with
        ``None``, it is evaluated from ``states`` on first access (a batch's summary never needs it).
    grad_norm : ndarray, shape (T,) or (B, T)
        Euclidean norm of its gradient (evaluated with ``loss``).
    model : ReducedModel
    method : str
        ``"LSODA"``, a :func:`scipy.integrate.solve_ivp` method, ``"batch-Radau"``, or ``"gd"``.
    rtol, atol : float
        Tolerances used (NaN for gradient descent).
    nfev, njev, nlu : int or ndarray of int, shape (B,)
        Gradient evaluations, Hessian (Jacobian) evaluations, matrix factorisations.
    seconds : float
        Wall time of the integration.
    t_stop : float or ndarray, shape (B,)
        Where each trajectory stopped.
    y_stop : ndarray, shape (size,) or (B, size)
        The state there.
    tolerances : StageTolerances
        Tolerances of the pattern diagnostics (scalar-heads models).

    Notes
    -----
    Views: ``y`` (``states.T``, like ``OdeResult.y``, single flows), ``parts`` (the model's named
    blocks, e.g. ``omega``, ``mu``, ``W``, each also an attribute), ``final`` (:class:`Final`),
    ``flow[i]`` (trajectory ``i`` of a batch), ``summary()`` (JSON-friendly). For models with one
    scalar ω and μ per head also ``diagnostics``, ``gamma``, ``eta_eff``, ``sum_mu``,
    ``stage_times``, ``n_positive``, ``n_negative`` and ``drift_law(t)``.
    """

    success: Any
    status: Any
    message: Any
    t: np.ndarray
    states: np.ndarray
    loss: np.ndarray | None
    grad_norm: np.ndarray | None
    model: Any
    method: str
    rtol: float
    atol: float
    nfev: Any
    njev: Any
    nlu: Any
    seconds: float
    t_stop: Any = None
    y_stop: Any = None
    tolerances: StageTolerances = field(default_factory=StageTolerances)

    def __post_init__(self):
        # FrozenResult's, reading the stored values (a path field left None stays None until first read)
        stored = object.__getattribute__(self, "__dict__")
        for f in fields(self):
            object.__setattr__(self, f.name, readonly(stored[f.name]))

    def __getattribute__(self, name):
        if name in _PATH_FIELDS and object.__getattribute__(self, "__dict__").get(name) is None:
            loss, gnorm = path_values(object.__getattribute__(self, "model"), object.__getattribute__(self, "states"))
            object.__setattr__(self, "loss", readonly(loss))
            object.__setattr__(self, "grad_norm", readonly(gnorm))
        return object.__getattribute__(self, name)

    # ------------------------------------------------------------------ shape
    @property
    def is_batch(self) -> bool:
        """True for a batch of trajectories."""
        return self.states.ndim == 3

    @property
    def n_traj(self) -> int:
        """Number of trajectories B (1 for a single flow)."""
        return self.states.shape[0] if self.is_batch else 1

    @property
    def n_heads(self) -> int:
        return self.model.n_heads

    @property
    def setting(self):
        return self.model.setting

    def __len__(self) -> int:
        return self.n_traj

    def __getitem__(self, i) -> Flow:
        """Trajectory ``i`` of a batch as a single :class:`Flow` (its output times up to the stop, then the stop)."""
        if not self.is_batch:
            raise TypeError("a single flow has no trajectories to index; it is one")
        B = self.n_traj
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not -B <= int(i) < B:
            raise ValueError(f"`i` must be an integer in [0, {B}), got {i!r}")
        i = int(i) % B
        keep = ~np.isnan(self.states[i, :, 0])
        t, Y = self.t[keep], self.states[i][keep]
        if t.size == 0 or t[-1] < self.t_stop[i]:  # (none: output times after a stop at the start)
            t = np.concatenate([t, self.t_stop[i : i + 1]])
            Y = np.concatenate([Y, self.y_stop[i][None]])
        st = int(self.status[i])
        return Flow(
            success=bool(self.success[i]),
            status=st,
            message=self.message[i],
            t=t,
            states=Y,
            loss=None,  # evaluated along Y on first access
            grad_norm=None,
            model=self.model,
            method=self.method,
            rtol=self.rtol,
            atol=self.atol,
            nfev=int(self.nfev[i]),
            njev=int(self.njev[i]),
            nlu=int(self.nlu[i]),
            seconds=self.seconds / B,
            t_stop=float(self.t_stop[i]),
            y_stop=self.y_stop[i],
            tolerances=self.tolerances,
        )

    # ------------------------------------------------------------------ views
    @property
    def y(self) -> np.ndarray:
        """States as ``(size, T)`` (``(B, size, T)`` for a batch), like ``OdeResult.y``."""
        return np.swapaxes(self.states, -1, -2)

    @cached_property
    def parts(self) -> dict:
        """The model's named blocks of the states, each ``(T, *shape)`` (``(B, T, *shape)``)."""
        return self.model.unpack(self.states)

    def __getattr__(self, name):
        # the model's named state parts (omega, mu, W, B, ...) as attributes
        if name.startswith("_") or name in ("model", "states"):
            raise AttributeError(name)
        model = self.__dict__.get("model")
        if model is not None and name in [p.name for p in model.parts]:
            return self.parts[name]
        raise AttributeError(f"'Flow' has no attribute {name!r}")

    @cached_property
    def final(self) -> Final:
        """The last state (for a batch: a tuple, one per trajectory) and its summaries."""
        if self.is_batch:
            return tuple(self[i].final for i in range(self.n_traj))
        values = self.model.summarize(self.states[-1], t=float(self.t[-1]), **self._summary_kw())
        return Final(t=float(self.t[-1]), values=values)

    def _summary_kw(self):
        return {"tolerances": self.tolerances} if self.model.scalar_heads else {}

    # ------------------------------------------------------------------ scalar-heads diagnostics
    def _require_heads(self, what):
        if not self.model.scalar_heads:
            raise ValueError(f"`{what}` needs a model with one scalar ω and μ per head, got {self.model!r}")
        if self.is_batch:
            raise ValueError(f"`{what}` is defined per trajectory: use flow[i].{what}")

    @cached_property
    def diagnostics(self):
        """Per-time pattern diagnostics (:class:`~reduced_dynamics.TrajectoryDiagnostics`), fields (T,)."""
        from reduced_dynamics.dynamics.diagnostics import trajectory_diagnostics

        self._require_heads("diagnostics")
        return trajectory_diagnostics(self.parts["omega"], self.parts["mu"], tolerances=self.tolerances)

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
    def stage_times(self):
        """First output time from which each pattern holds until the end (None if never)."""
        from reduced_dynamics.dynamics.diagnostics import stage_times

        self._require_heads("stage_times")
        return stage_times(self.t, self.parts["omega"], self.parts["mu"], tolerances=self.tolerances)

    @property
    def n_positive(self) -> int:
        """Number p of positive non-dummy heads at the end state."""
        return int(self.diagnostics.n_positive[-1])

    @property
    def n_negative(self) -> int:
        """Number n of negative non-dummy heads at the end state."""
        return int(self.diagnostics.n_negative[-1])

    def drift_law(self, t=None):
        """The drift law γ(t) = (16 c d³ (pn/H) t)^(−1/6) of this run (docs/theory.md#drift-law).

        Uses p = :attr:`n_positive`, n = :attr:`n_negative` at the end state.

        Parameters
        ----------
        t : float or array_like, optional
            Times (> 0). Default: the output times :attr:`t` (``inf`` at ``t = 0``).

        Raises
        ------
        ValueError
            A model without scalar heads or whose drift law is not this one, or an end state without
            both a positive and a negative non-dummy head.
        """
        from reduced_dynamics.dynamics.manifold import drift_law_gamma

        self._require_heads("drift_law")
        if self.model.name != "isotropic":
            raise ValueError(f"`drift_law` is the law of the isotropic L̃ flow, not of {self.model!r}")
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

    # ------------------------------------------------------------------ reports
    def summary(self) -> dict:
        """Everything a run reports, JSON-friendly: status, solver counts, the model, the final summaries.

        For a batch: the per-trajectory lists ``status, success, message, t_stop, nfev, njev``, the start and
        stop states, and the model's summaries of each stop state (the keys of a single flow's ``final``:
        ``loss``, ``grad_norm``, ``gamma``, ``eta_eff`` ...; ``ReducedModel.summarize_many``), each a list of
        one value per trajectory.
        """
        out = {"success": jsonable(self.success), "status": jsonable(self.status), "message": jsonable(self.message)}
        out.update(self.model.describe())
        out.update({"method": self.method, "rtol": self.rtol, "atol": self.atol, "seconds": self.seconds})
        out.update({"nfev": jsonable(self.nfev), "njev": jsonable(self.njev), "nlu": jsonable(self.nlu)})
        if self.is_batch:
            out["n_traj"] = self.n_traj
            out["t_end"] = float(self.t[-1])
            out["t_stop"] = jsonable(self.t_stop)
            start = self.model.unpack(self.states[:, 0])
            stop = self.model.unpack(self.y_stop)
            for k in start:
                out[f"{k}0"] = jsonable(start[k])
                out[k] = jsonable(stop[k])
            # the summaries a single flow reports (loss, grad_norm, gamma, eta_eff ...), one per trajectory, at its
            # stop state (the same values as flow[i].final)
            for k, v in self.model.summarize_many(self.y_stop, t=self.t_stop, **self._summary_kw()).items():
                out.setdefault(k, jsonable(v))
            return out
        out.update(self.final.to_dict())
        for k, v in self.model.unpack(self.states[0]).items():
            out[f"{k}0"] = jsonable(v)
        if self.model.scalar_heads:
            out["stage_times"] = self.stage_times.to_dict()
        return out

    def __repr__(self) -> str:
        if self.is_batch:
            n_ok = int(np.sum(self.success))
            return (
                f"Flow(success={n_ok}/{self.n_traj}, status={np.unique(self.status).tolist()}, model={self.model!r}, "
                f"method={self.method!r}, t_end={self.t[-1]:.4g}, n_times={len(self.t)}, seconds={self.seconds:.3g})"
            )
        return (
            f"Flow(success={self.success}, status={self.status}, message={self.message!r}, model={self.model!r}, "
            f"method={self.method!r}, t_end={self.t[-1]:.4g}, n_times={len(self.t)}, "
            f"loss={float(self.loss[-1]):.8g}, nfev={self.nfev})"
        )


#: the fields evaluated from the states on first access when a Flow is built without them
_PATH_FIELDS = frozenset({"loss", "grad_norm"})


def path_values(model, states):
    """``(loss, grad_norm)`` along ``states`` of shape (T, size), or (B, T, size) with NaN rows (NaN there)."""
    states = np.asarray(states, dtype=np.float64)
    if states.ndim == 2:
        return evaluate_along(model, states)
    B, T, _ = states.shape
    loss = np.full((B, T), np.nan)
    gnorm = np.full((B, T), np.nan)
    ok = ~np.isnan(states[:, :, 0])
    if np.any(ok):
        loss[ok], gnorm[ok] = evaluate_along(model, states[ok])
    return loss, gnorm


def evaluate_along(model, Y):
    """``(loss, grad_norm)`` of the states ``Y`` (shape (T, size)), vectorised where the model allows."""
    Y = np.asarray(Y, dtype=np.float64)
    try:
        loss = np.atleast_1d(np.asarray(model.loss(Y), dtype=np.float64))
        g = np.asarray(model.grad(Y))
        if loss.shape != Y.shape[:1] or g.shape != Y.shape:
            raise ValueError("not vectorised")
    except (ValueError, TypeError):
        loss = np.array([float(model.loss(y)) for y in Y])
        g = np.array([model.grad(y) for y in Y])
    with np.errstate(over="ignore"):
        gnorm = np.atleast_1d(np.sqrt(np.sum(g * g, axis=-1)))
    big = ~np.isfinite(gnorm) & np.all(np.isfinite(g), axis=-1)
    if np.any(big):  # a finite gradient whose squares overflow (|∇| > 1.3e154): scale before squaring
        s = np.max(np.abs(g[big]), axis=-1, keepdims=True)
        gnorm[big] = s[:, 0] * np.sqrt(np.sum((g[big] / s) ** 2, axis=-1))
    return loss, gnorm
